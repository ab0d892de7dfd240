"""Shared experts on a side stream (default mode, CUDA).

A mixture-of-experts block with a shared expert (Llama 4's ``shared_expert``,
DeepSeek's and GLM's ``shared_experts``, Qwen2-MoE's ``shared_expert``, ...)
runs the router, the routing, the routed experts and the shared expert one
after the other on one stream, although the shared expert needs nothing but
the block's input. With packed experts the router, top-k and routing kernels
are small and leave most of the GPU idle at a few tokens; the shared expert's
packed linears stream their weights at full bandwidth. So the shared expert
starts on a side stream as the block begins, and the block takes its output
when it asks for it: the small kernels and the routed experts run beside it.

How: a forward pre-hook on the block (installed by :func:`attach`) moves the
block's own work (router, routing, routed experts) to a stream of the highest
priority that waits for the current one, and replaces the block's shared
module, for the duration of the call, by a stand-in (:class:`_SharedOutput`).
The shared module then runs on the side stream on the block's input (rows
flattened), after the work queued before it: as the block's router returns
(a forward hook on the child named in ROUTER_NAMES), or at once where the
block has no router child or calls its shared expert before its router
(Qwen2-MoE: found on the first call, which runs it in line). Why after the
router: the shared expert's linears fill every SM, and the router's GEMM
(cuBLAS, large tiles) found no room beside them until they drained —
Llama-4-Scout, 1 token, one CUDA-graph replay: the router began 34 µs in,
whatever the streams' priorities (a graph launch ignores them) — so the
routing chain, the block's critical path, started 34 µs late. The side
stream also takes only part of each SM (glyd._gpu.set_stream_share,
``GLYD_SHARED_SM_PERCENT``, default SHARE_PERCENT) so that the routing's
small kernels find room beside it. The current stream waits for both
streams at the end.
When the block calls it with the very same tensor, unmodified (its version
counter), in any shape with the same last dimension, the stand-in makes the
current stream wait for the side one and returns that output in the shape
asked for. Called with anything else (another tensor, extra arguments), it
runs the real module and turns the overlap off for that block (one wasted
product, once); called again in the same block call, it is the real module.
A forward hook that runs even when the block raises puts the real module back
and joins the streams.

Same bits: the same kernels run on the same inputs, only on another stream,
so the block's output is bit-identical with and without the overlap. Not
under ``exact=True`` (kept to the bf16 model's single stream), torch.compile,
autograd, or on the CPU. CUDA graphs: the fork and the join are stream waits,
captured as a branch of the graph. Memory: the block's input stays referenced
until the streams are joined, and every side- or body-stream allocation
follows a fork (both wait for the current one first), so the caching
allocator never hands a block to one stream while another still uses it.

``GLYD_SHARED_STREAM=0`` (read at attach) or :func:`set_overlap` turn it
off, for A/B measurements; ``GLYD_SHARED_FORK=block`` (read at attach)
starts the shared expert with the block, as before session 14.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import torch
from torch import nn

from .. import _gpu
from . import modules as _m
from .gpu_linear import _version  # the siblings' tie of an output to its input

__all__ = ["attach", "set_overlap", "overlapped_blocks"]

#: The names transformers gives a MoE block's shared expert module.
SHARED_NAMES = ("shared_expert", "shared_experts")

#: The names transformers gives a MoE block's router module.
ROUTER_NAMES = ("router", "gate")

#: The share of each SM the shared expert's side stream takes (session 14 sweep).
SHARE_PERCENT = 75

_KEY = "_glyd_shared"
_ROUTER_KEY = "_glyd_shared_of"  # on the router: its block's _State
_LOG = logging.getLogger("glyd.transformers")
_SIDE: dict = {}  # device index -> side stream
_BODY: dict = {}  # device index -> the block's high-priority stream


class _State:
    """Per block: the shared module's attribute name, whether the overlap is
    off, and the pending call (transient: dropped by deepcopy and pickle)."""

    def __init__(self, name: str, off: bool, router: Optional[str] = None):
        self.name, self.off = name, off
        self.router = router  # the router child after which the shared expert starts; None: at the block's start
        self.real = None  # the shared module while its stand-in is in place
        self.x = None  # the block's input while the shared expert waits for the router
        self.pending = None  # (input, its version, output) until the stand-in is called
        self.caller = None  # the caller's stream while the block runs on its body stream
        self.standin = _SharedOutput(self)
        self._linears = (None, ())  # (shared module, its packed linears)

    def __getstate__(self):
        return {"name": self.name, "off": self.off, "router": self.router}  # not the transient streams

    def __setstate__(self, state):
        self.__init__(state["name"], state["off"], state.get("router"))

    def linears(self, real) -> tuple:
        if self._linears[0] is not real:
            self._linears = (real, tuple(m for m in real.modules() if isinstance(m, _m.GlydLinear)))
        return self._linears[1]


class _SharedOutput(nn.Module):
    """Stands in for a block's shared module during one call (module docstring)."""

    def __init__(self, state: _State):
        super().__init__()
        self.__dict__["state"] = state  # not a submodule

    def forward(self, x, *args, **kwargs):
        st = self.__dict__["state"]
        if st.pending is None:  # not launched (the block asks before its router ran), or called again
            if st.x is not None:  # this family calls its shared expert first: fork at the block's start from now on
                st.x, st.router = None, None
            return st.real(x, *args, **kwargs)
        x0, version, y = st.pending
        st.pending = None
        torch.cuda.current_stream(y.device).wait_stream(_side(y.device))
        if (not args and not kwargs and torch.is_tensor(x) and x.data_ptr() == x0.data_ptr()
                and x.numel() == x0.numel() and x.shape[-1] == x0.shape[-1] and x.is_contiguous()
                and _version(x) == version):
            return y.view(*x.shape[:-1], y.shape[-1])
        st.off = True
        _LOG.debug("glyd: the shared expert %r is called with another input than its block's; "
                   "it runs in line from now on", st.name)
        return st.real(x, *args, **kwargs)


def _stream(streams: dict, device: torch.device, priority: int = 0, share: int = 100) -> torch.cuda.Stream:
    s = streams.get(device.index)
    if s is None:  # torch maps a priority beyond the device's range to its nearest end
        s = torch.cuda.Stream(device, priority=priority)
        if share < 100:
            _gpu.set_stream_share(s, share)
        streams[device.index] = s
    return s


def _side(device: torch.device) -> torch.cuda.Stream:
    return _stream(_SIDE, device, share=int(os.environ.get("GLYD_SHARED_SM_PERCENT", SHARE_PERCENT)))


def _body(device: torch.device) -> torch.cuda.Stream:
    return _stream(_BODY, device, priority=-1000)  # the highest


def _fork(block, args, kwargs) -> None:
    st: Optional[_State] = block.__dict__.get(_KEY)
    if st is None or st.off or st.real is not None:
        return
    x = args[0] if args else kwargs.get("hidden_states")
    if (not torch.is_tensor(x) or x.device.type != "cuda" or x.dtype != torch.bfloat16 or x.dim() == 0
            or not x.is_contiguous() or torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad)):
        return
    real = block._modules.get(st.name)
    lins = st.linears(real) if isinstance(real, nn.Module) and not isinstance(real, _SharedOutput) else ()
    if not lins or any(m.exact for m in lins):
        return
    main, body = torch.cuda.current_stream(x.device), _body(x.device)
    body.wait_stream(main)
    st.caller = main
    torch.cuda.set_stream(body)
    st.real = real
    block._modules[st.name] = st.standin
    if st.router is None:
        _launch(st, x)
    else:  # _routed starts it
        st.x = x


def _routed(router, args, output) -> None:
    """After the block's router: the shared expert starts now (see the module docstring)."""
    st: Optional[_State] = router.__dict__.get(_ROUTER_KEY)
    if st is not None and st.x is not None:
        x, st.x = st.x, None
        _launch(st, x)


def _launch(st: _State, x: torch.Tensor) -> None:
    """The shared expert on the side stream, after the work queued so far."""
    side = _side(x.device)
    side.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(side):
        y = st.real(x.reshape(-1, x.shape[-1]))
    if not torch.is_tensor(y) or not y.is_contiguous():
        torch.cuda.current_stream(x.device).wait_stream(side)  # not a plain MLP: leave it in line
        st.off = True
        return
    st.pending = (x, _version(x), y)


def _join(block, args, kwargs, output) -> None:
    st: Optional[_State] = block.__dict__.get(_KEY)
    if st is None:
        return
    st.x = None
    if block._modules.get(st.name) is st.standin:
        block._modules[st.name] = st.real
    st.real = None
    if st.pending is not None:  # the block did not ask for it
        y = st.pending[2]
        st.pending = None
        torch.cuda.current_stream(y.device).wait_stream(_side(y.device))
        st.off = True
    if st.caller is not None:  # back on the caller's stream, after the block's work
        caller, st.caller = st.caller, None
        caller.wait_stream(torch.cuda.current_stream(caller.device))
        torch.cuda.set_stream(caller)


def _shared_child(block: nn.Module) -> Optional[str]:
    """The name of block's shared expert when block is a MoE block with packed
    experts beside a shared module that holds packed linears."""
    kids = block._modules
    if not any(isinstance(c, _m.GlydExperts) for c in kids.values()):
        return None
    for name in SHARED_NAMES:
        c = kids.get(name)
        if isinstance(c, nn.Module) and any(isinstance(m, _m.GlydLinear) for m in c.modules()):
            return name
    return None


def _router_child(block: nn.Module) -> Optional[str]:
    """The name of block's router (its child named in ROUTER_NAMES), if any."""
    for name in ROUTER_NAMES:
        if isinstance(block._modules.get(name), nn.Module):
            return name
    return None


def attach(model: nn.Module) -> int:
    """Install the overlap on every MoE block of ``model`` with a shared expert
    (idempotent; on any device: the hooks act on CUDA inputs only). Returns how
    many blocks have it."""
    off = os.environ.get("GLYD_SHARED_STREAM", "1") == "0"
    n = 0
    for block in model.modules():
        if _KEY in block.__dict__:
            n += 1
            continue
        name = _shared_child(block)
        if name is None:
            continue
        router = None if os.environ.get("GLYD_SHARED_FORK") == "block" else _router_child(block)
        st = block.__dict__[_KEY] = _State(name, off, router)
        block.register_forward_pre_hook(_fork, with_kwargs=True)
        block.register_forward_hook(_join, with_kwargs=True, always_call=True)
        if router is not None:
            block._modules[router].__dict__[_ROUTER_KEY] = st
            block._modules[router].register_forward_hook(_routed)
        n += 1
    return n


def set_overlap(model: nn.Module, on: bool = True) -> int:
    """Turn the overlap on or off for every block of ``model`` that has it; returns how many."""
    n = 0
    for block in model.modules():
        st = block.__dict__.get(_KEY)
        if st is not None:
            st.off = not on
            n += 1
    return n


def overlapped_blocks(model: nn.Module) -> list:
    """Names of the blocks whose shared expert runs on the side stream now."""
    return [name for name, b in model.named_modules() if _KEY in b.__dict__ and not b.__dict__[_KEY].off]
