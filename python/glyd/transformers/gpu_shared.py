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

How: a forward pre-hook on the block (installed by :func:`attach`) forks:
the side stream waits for the current one, the shared module runs there on
the block's input (rows flattened), and for the duration of the call the
block's shared module is replaced by a stand-in (:class:`_SharedOutput`).
The block's own work (router, routing, routed experts) runs on a stream of
the highest priority, which also waits for the current one: the shared
expert's linears, queued first, fill every SM, and at equal priority the
block's small kernels waited for their last blocks to start (Llama-4-Scout,
1 token, one CUDA-graph replay: the router only began 34 µs in, after the
shared gate/up; session 13). The current stream waits for both at the end.
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

Only block calls of at most :data:`OVERLAP_ROWS` rows (tokens) overlap;
larger ones run the shared expert in line, where the overlap measured slower.

``GLYD_SHARED_STREAM=0`` (read at attach) or :func:`set_overlap` turn it
off, for A/B measurements.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

import torch
from torch import nn

from . import modules as _m
from .gpu_linear import _version  # the siblings' tie of an output to its input

__all__ = ["attach", "set_overlap", "overlapped_blocks"]

#: The names transformers gives a MoE block's shared expert module.
SHARED_NAMES = ("shared_expert", "shared_experts")

#: The most rows (tokens) a block call overlaps its shared expert for; above
#: it the shared expert runs in line. H200, CUDA-graph replays, overlap against
#: in line (docs/PERFORMANCE.md, session 33): Llama-4-Scout's block -11% at 1
#: token, -0.4% at 32, level at 48-64, +41% at 96-128 (its shared expert's
#: two-warpgroup prompt tile beside the routed experts), +4% at 512;
#: Moonlight-16B-A3B's (DeepSeek V3) -9% at 1, -1% at 32, +4% / +12% at 48 / 64;
#: Qwen1.5-MoE-A2.7B's within 1% up to 48, +2.4% at 64 (bench_moe.BLOCKS).
OVERLAP_ROWS = 32

_KEY = "_glyd_shared"
_LOG = logging.getLogger("glyd.transformers")
_SIDE: dict = {}  # device index -> side stream
_BODY: dict = {}  # device index -> the block's high-priority stream


class _State:
    """Per block: the shared module's attribute name, whether the overlap is
    off, and the pending call (transient: dropped by deepcopy and pickle)."""

    def __init__(self, name: str, off: bool):
        self.name, self.off = name, off
        self.real = None  # the shared module while its stand-in is in place
        self.pending = None  # (input, its version, output) until the stand-in is called
        self.caller = None  # the caller's stream while the block runs on its body stream
        self.standin = _SharedOutput(self)
        self._linears = (None, ())  # (shared module, its packed linears)

    def __getstate__(self):
        return {"name": self.name, "off": self.off}  # not the transient streams

    def __setstate__(self, state):
        self.__init__(state["name"], state["off"])

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
        if st.pending is None:  # called again in the same block call: the real module
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


def _stream(streams: dict, device: torch.device, priority: int = 0) -> torch.cuda.Stream:
    s = streams.get(device.index)
    if s is None:  # torch maps a priority beyond the device's range to its nearest end
        s = streams[device.index] = torch.cuda.Stream(device, priority=priority)
    return s


def _side(device: torch.device) -> torch.cuda.Stream:
    return _stream(_SIDE, device)


def _body(device: torch.device) -> torch.cuda.Stream:
    return _stream(_BODY, device, priority=-1000)  # the highest


def _fork(block, args, kwargs) -> None:
    st: Optional[_State] = block.__dict__.get(_KEY)
    if st is None or st.off or st.pending is not None:
        return
    x = args[0] if args else kwargs.get("hidden_states")
    if (not torch.is_tensor(x) or x.device.type != "cuda" or x.dtype != torch.bfloat16 or x.dim() == 0
            or not x.is_contiguous() or torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad)
            or x.numel() > OVERLAP_ROWS * x.shape[-1]):
        return
    real = block._modules.get(st.name)
    lins = st.linears(real) if isinstance(real, nn.Module) and not isinstance(real, _SharedOutput) else ()
    if not lins or any(m.exact for m in lins):
        return
    main, side = torch.cuda.current_stream(x.device), _side(x.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        y = real(x.reshape(-1, x.shape[-1]))
    if not torch.is_tensor(y) or not y.is_contiguous():
        main.wait_stream(side)  # not a plain MLP: leave it in line
        st.off = True
        return
    st.real, st.pending = real, (x, _version(x), y)
    block._modules[st.name] = st.standin
    body = _body(x.device)
    body.wait_stream(main)
    st.caller = main
    torch.cuda.set_stream(body)


def _join(block, args, kwargs, output) -> None:
    st: Optional[_State] = block.__dict__.get(_KEY)
    if st is None:
        return
    if block._modules.get(st.name) is st.standin:
        block._modules[st.name], st.real = st.real, None
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
        block.__dict__[_KEY] = _State(name, off)
        block.register_forward_pre_hook(_fork, with_kwargs=True)
        block.register_forward_hook(_join, with_kwargs=True, always_call=True)
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
