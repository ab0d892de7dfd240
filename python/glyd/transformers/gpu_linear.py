"""GlydLinear on the GPU: the one implementation of ``GPU_HOOKS["linear"]``.

A packed ``nn.Linear`` (:class:`glyd.transformers.modules.GlydLinear`) whose
input is on a CUDA device calls :func:`linear_forward`. Two paths (D9):

* default (``module.exact`` False), fixed12 bf16 weight: the packed planes are
  read and decoded on the GPU as part of the matmul, the whole bf16 weight is
  never written to memory. Results are within bf16 rounding of the bf16 model
  and deterministic. Which kernels run depends on the rows of the input
  (tokens), the choice of ``glyd._gpu.DeviceTensor.linear`` (one
  implementation for both):

  - below ``glyd._gpu.prompt_rows()`` (769 on sm_90 GPUs, 65 on others;
    decode steps, small batches, short prompts): Glyd's fused kernel
    (``glyd_gpu_linear``) decodes the weight in registers inside the matmul
    (wgmma on sm_90; from 65 rows, and from 33 on weights of 6,144+ rows,
    the prompt tiles: 128 or 192 weight rows by 64, 128 or 256 tokens per
    block);
  - from ``prompt_rows()`` rows on (prompts): the weight is decoded a tile of
    rows at a time (``glyd_gpu_decode_rows``, bit-exact; tiles of 256 MiB of
    bf16, so most weights are one tile: cuBLAS needs wide GEMMs) into a
    workspace, and each tile is multiplied by cuBLAS (``torch.mm`` /
    ``torch.addmm`` into its column slice of the output).
    ``GLYD_PROMPT_ROWS`` (0 = never) and ``GLYD_PROMPT_TILE_MB`` change the
    threshold and the tile size.
* ``exact=True`` (and layouts without a fused kernel, ``smallest``): the
  weight is decoded to bf16 just in time into a temporary buffer from torch's
  caching allocator (decode kernel, bit-exact), then the very op of the bf16
  model runs: ``F.linear(x, w, bias)``. Outputs are bit-identical to the bf16
  model's on the same GPU. The temporary is freed after the call (only one
  layer's bf16 weight is ever resident).

Weights that are not bf16 (fp16 checkpoints) or have a compute dtype other
than bf16 fall back to ``F.linear(x, module.weight, bias)`` (decoded once and
cached, the behaviour of modules.PackedWeight.decode).

Siblings (default mode): packed linears of one parent module with the same
input features (q/k/v of an attention, gate/up of an MLP) form a
:class:`_Siblings` group at ``prepare``. When one of them is called, a single
launch computes every member's output for that input
(``glyd._gpu.MultiLinear``, one fused kernel instead of three or two: at a few
tokens the small k and v weights alone leave most of the GPU idle); the other
members' outputs wait in the group and are returned when they are called with
the very same tensor, unmodified (its version counter; inference-mode
tensors have none, their identity decides). A member called with another input is
dropped from the group (o_proj, or k/v of a cross-attention): that costs one
wasted product on the first forward, then nothing. Members' outputs are within
bf16 rounding of their own kernel's (the configuration is chosen for the
launch), and deterministic. Not under torch.compile, autograd, ``exact`` or
the prompt path, where every linear runs alone.

torch.compile: the layer is the custom op ``torch.ops.glyd.linear`` (defined
here with torch.library.custom_op and a fake implementation for shapes).
Under torch.compile, :func:`linear_forward` emits that op, so dynamo traces a
GlydLinear without a graph break; the op itself is opaque to the compiler
(inductor does not fuse into it). In eager mode the same implementation is
called directly, skipping the dispatcher (a few microseconds per layer),
unless autograd needs the op's backward (grad enabled and the input or the
bias requires grad: weights are frozen, grads flow to the input and bias).
A GlydLinear that was never prepared (no handle yet) costs one graph break
the first time it is traced.

CUDA graphs: both paths are capturable. A call enqueues kernels on the current
stream, allocates only its output (and a workspace for split-K's partial
sums and the prompt tiles' copy of x; for the prompt path, one weight tile;
for exact, the decoded weight) from torch's
caching allocator, and never synchronizes
with the host. A weight's device state (its planes tiled for the fused
kernels, gpu_relayout, and the escape index they read) is built once, outside
any capture: at load (``prepare``, run by the ``attach`` hook of a loaded
model) or at the first eager call; a call inside a capture that would have to
build it raises instead (warm up first, as CUDA graph capture requires
anyway).

Bad input raises glyd.InvalidArgumentError naming the argument: ``input`` on
another device than the weight, of another dtype than the weight's compute
dtype (outside autocast) or the wrong last dimension, ``bias`` of the wrong
dtype, device or size. A non-contiguous input is
copied (like nn.Linear, which accepts any strides); an input that is not
16-byte aligned is copied too (the fused kernel's fast path needs 16 bytes).
"""

from __future__ import annotations

import logging
import weakref
from typing import List, Optional

import torch
from torch.nn import functional as F

from ..errors import InvalidArgumentError
from . import modules as _m

logger = logging.getLogger(__name__)

__all__ = ["linear_forward", "decode_weight", "prepare", "register", "device_tensor", "fused_supported"]

OP_NAME = "glyd::linear"

# handle (int) -> weakref to the PackedWeight; the op carries the handle, not the object.
_HOLDERS: dict = {}
_NEXT = [1]


def _handle(holder) -> int:
    h = holder.__dict__.get("_glyd_handle")
    ref = _HOLDERS.get(h) if h is not None else None
    if ref is None or ref() is not holder:  # new, or copied from another holder (deepcopy)
        h = _NEXT[0]
        _NEXT[0] += 1
        _HOLDERS[h] = weakref.ref(holder, lambda _r, h=h: _HOLDERS.pop(h, None))
        holder.__dict__["_glyd_handle"] = h
    return h


_handle_eager = torch.compiler.disable(_handle)


def _holder_of(handle: int):
    ref = _HOLDERS.get(int(handle))
    h = ref() if ref is not None else None
    if h is None:
        raise InvalidArgumentError(1, f"glyd::linear: weight handle {handle} names no live packed weight")
    return h


def weight_holder(module):
    """The PackedWeight of a packed module's ``weight`` (a GlydLinear's or GlydEmbedding's)."""
    return module._modules[module.__dict__["_glyd_attrs"]["weight"]]


def fused_supported(holder) -> bool:
    """True if the fused kernel can run this weight (fixed12, bf16, 2-D, bf16 compute)."""
    return (holder.layout == "fixed12" and holder.dtype == torch.bfloat16 and len(holder.shape) == 2
            and holder.compute_dtype in (None, torch.bfloat16) and holder.num_groups == 1)


def _decodable(holder) -> bool:
    """True if the GPU decode kernel can decode this weight (bf16, fixed12 or smallest)."""
    return holder.dtype == torch.bfloat16 and holder.layout in ("fixed12", "smallest")


# ---- per-weight device state ------------------------------------------------------------------

class _State:
    """The DeviceTensor of one PackedWeight (planes as they are now)."""

    __slots__ = ("key", "dt")

    def __init__(self, key, dt):
        self.key, self.dt = key, dt

    def __reduce__(self):
        # A copied or pickled holder rebuilds its own state on demand: this one
        # points at the original's planes (and holds ctypes pointers).
        return (type(None), ())


def _state(holder) -> _State:
    key = holder._planes_key()
    st = holder.__dict__.get("_glyd_state")
    if st is not None and st.key == key:
        return st
    from .. import _gpu

    dev = holder.device
    if dev.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"glyd: the packed weight {holder.attr!r} {holder.shape} was never used on {dev} before this CUDA "
            f"graph capture; its device state (escape index) must be built outside the capture: run one "
            f"forward pass first (warm-up) or call glyd.transformers.gpu_linear.prepare(model)")
    dt = _gpu.DeviceTensor(layout=holder.layout, shape=holder.shape, groups=holder.groups, planes=holder.planes(),
                           device=dev, tiled=holder.tiled)
    st = _State(key, dt)
    holder.__dict__["_glyd_state"] = st
    return st


def device_tensor(holder):
    """The glyd._gpu.DeviceTensor over a PackedWeight's planes (cached while the planes stay put)."""
    return _state(holder).dt


def _fused_state(holder) -> _State:
    """_state for the fused kernels: the planes tiled first, the first time
    the weight runs on its GPU (gpu_relayout) — never later, since a CUDA graph
    captured since holds the planes' addresses. Not planes that must keep
    their stored arrangement (modules.keep_stored: a table an embedding reads
    too, a tied lm_head's; planes an offload hook swaps in), nor with
    glyd._gpu.TILED off (GLYD_TILED=0). Out of GPU memory for the new planes:
    a warning, and the planes stay row-major."""
    if ("_glyd_relay_checked" not in holder.__dict__ and holder.device.type == "cuda"
            and not torch.cuda.is_current_stream_capturing()):
        from .. import _gpu

        holder.__dict__["_glyd_relay_checked"] = True
        if _gpu.TILED and not holder.relaid and not holder.__dict__.get("_glyd_keep_stored"):
            try:
                holder.relay(True)  # stays row-major where the shape has no tiled arrangement
            except torch.cuda.OutOfMemoryError:
                logger.warning("glyd: out of GPU memory tiling the planes of %s %s; the fused kernels read "
                               "them row-major", holder.attr, holder.shape)
    return _state(holder)


def embedding_table(holder) -> None:
    """The holder is an embedding's table (perhaps a tied lm_head's weight
    too): its planes stay row-major, which the gather kernel reads."""
    holder.__dict__["_glyd_keep_stored"] = True
    if holder.relaid:
        holder.relay(False)


def decode_weight(holder, groups=None) -> torch.Tensor:
    """GPU_HOOKS["decode"]: the whole weight decoded on its device (a new tensor,
    bit-exact), cast to the holder's compute dtype by the caller. Weights the
    kernels do not take (fp16) are decoded by libglyd on the CPU and copied."""
    if holder.device.type == "cuda" and _decodable(holder):
        return _state(holder).dt.decode()
    return holder.packed().unpack().to(holder.device)


def prepare(model, siblings: bool = True) -> int:
    """Build the device state of every packed linear and embedding of ``model`` whose planes
    are on a CUDA device (before CUDA graph capture), give every packed linear
    its handle for torch.ops.glyd.linear, and group siblings (linears of one
    parent with the same input features, see :class:`_Siblings`; on any
    device, so a model moved later keeps them). ``siblings=False`` ungroups
    them instead: every linear runs alone. Returns how many states were
    built."""
    n = 0
    mods = [m for _, m in _m.iter_packed_modules(model) if isinstance(m, (_m.GlydLinear, _m.GlydEmbedding))]
    for m in mods:  # tables first: a tied lm_head shares one
        if isinstance(m, _m.GlydEmbedding):
            embedding_table(weight_holder(m))
    for m in mods:
        h = weight_holder(m)
        _handle(h)  # torch.compile reads it
        if h.device.type == "cuda" and _decodable(h):
            fused = isinstance(m, _m.GlydLinear) and not m.exact and fused_supported(h)
            (_fused_state if fused else _state)(h)
            n += 1
    if not siblings:
        for m in model.modules():
            sib = m.__dict__.get("_glyd_siblings")
            if sib is not None:
                sib.drop(m)
        return n
    for parent in model.modules():
        by_k: dict = {}
        for m in parent.children():
            if (isinstance(m, _m.GlydLinear) and "_glyd_siblings" not in m.__dict__ and not m.exact
                    and fused_supported(weight_holder(m))):
                by_k.setdefault(weight_holder(m).shape[1], []).append(m)
        for members in by_k.values():
            if len(members) > 1:
                _Siblings(members)
    return n


class _Siblings:
    """Packed linears of one parent with the same input features, computed
    together (module docstring, "Siblings"). ``pending`` holds the outputs
    computed for members not called yet: member -> (input, its version, output)."""

    def __init__(self, members):
        self.members = list(members)
        self.pending: dict = {}
        self._multi = None  # (member states, glyd._gpu.MultiLinear over them)
        for m in self.members:
            m.__dict__["_glyd_siblings"] = self

    def __getstate__(self):
        # deepcopy / pickle: the members (copied with the model), not the
        # launch state (ctypes pointers to the original's planes) or outputs.
        return {"members": self.members}

    def __setstate__(self, state):
        self.members, self.pending, self._multi = state["members"], {}, None

    def drop(self, module) -> None:
        """``module`` is not called with its siblings' input: it runs alone from now on."""
        self.members.remove(module)
        module.__dict__.pop("_glyd_siblings", None)
        self.pending.pop(module, None)
        self._multi = None
        if len(self.members) < 2:
            for m in self.members:
                m.__dict__.pop("_glyd_siblings", None)
            self.members, self.pending = [], {}

    def forward(self, module, x: torch.Tensor) -> Optional[torch.Tensor]:
        """``module``'s output from the group, or None when it must run alone."""
        got = self.pending.pop(module, None)
        if got is not None:
            if got[0] is x and got[1] == _version(x):
                return got[2]
            self.drop(module)  # called with another input
            return None
        for m in list(self.pending):  # members not called since the last group launch
            self.drop(m)
        if module not in self.members or module.exact:
            return None
        _check(weight_holder(module), x, module.bias)
        holders = [weight_holder(m) for m in self.members]
        if x.dtype != torch.bfloat16 or any(h.device != x.device for h in holders):
            return None
        rows = x.numel() // holders[0].shape[1]
        states = tuple(_fused_state(h) for h in holders)
        if rows and states[0].dt.prompt_path(rows):
            return None  # prompts: each linear alone (decode tiles + cuBLAS)
        if self._multi is None or self._multi[0] != states:
            from .. import _gpu

            self._multi = (states, _gpu.MultiLinear([st.dt for st in states]))
        biases = []
        for m, h in zip(self.members, holders):
            if m is not module:  # module's own arguments were checked above
                _check(h, x, m.bias)
            biases.append(m.bias.contiguous() if m.bias is not None else None)
        outs = self._multi[1].linear(x, biases)
        mine = None
        for m, y in zip(self.members, outs):
            if m is module:
                mine = y
            else:
                self.pending[m] = (x, _version(x), y)
        return mine


def _version(x: torch.Tensor) -> int:
    """x's version counter (bumped by in-place changes); inference tensors have
    none: their identity alone ties a sibling's output to its input."""
    return -1 if x.is_inference() else x._version


# ---- the computation -----------------------------------------------------------------------------

def _check(holder, x: torch.Tensor, bias: Optional[torch.Tensor]) -> None:
    k = holder.shape[-1]
    dt = holder.compute_dtype or holder.dtype
    if not torch.is_tensor(x):
        raise InvalidArgumentError(1, f"input must be a torch.Tensor, not {type(x).__name__}")
    if x.device != holder.device:
        raise InvalidArgumentError(1, f"input is on {x.device}, the packed weight {holder.shape} on {holder.device}")
    if x.dtype != dt and not torch.is_autocast_enabled(x.device.type):  # autocast: F.linear casts
        raise InvalidArgumentError(1, f"input is {x.dtype}, the packed weight computes in {dt}")
    if x.dim() == 0 or x.shape[-1] != k:
        raise InvalidArgumentError(1, f"input has shape {tuple(x.shape)}, the last dimension must be {k}")
    if bias is not None:
        n = holder.shape[0]
        if bias.device != holder.device or bias.dtype != dt or bias.dim() != 1 or bias.shape[0] != n:
            raise InvalidArgumentError(1, f"bias must be {dt} [{n}] on {holder.device}, got {bias.dtype} "
                                          f"{tuple(bias.shape)} on {bias.device}")


def _fused(holder, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    return _fused_state(holder).dt.linear(x, bias, checked=True)  # _check made the arguments


def decoded_weight(holder, device: torch.device) -> torch.Tensor:
    """The whole weight for a call on `device`: decoded just in time on a GPU
    (a temporary), else the holder's own decode (cached), in the compute dtype."""
    if device.type == "cuda" and _decodable(holder):
        w = _state(holder).dt.decode()
        if holder.compute_dtype is not None and holder.compute_dtype != w.dtype:
            w = w.to(holder.compute_dtype)
        return w
    return holder.decode()  # CPU, or weights the GPU kernels do not take


def _decoded(holder, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """exact: decode just in time, then the bf16 model's own op."""
    return F.linear(x, decoded_weight(holder, x.device), bias)


def _impl(holder, x: torch.Tensor, bias: Optional[torch.Tensor], exact: bool) -> torch.Tensor:
    _check(holder, x, bias)
    if not exact and x.device.type == "cuda" and fused_supported(holder) and x.dtype == torch.bfloat16:
        return _fused(holder, x, bias)
    return _decoded(holder, x, bias)


# ---- the custom op (torch.compile) ----------------------------------------------------------------

def _define_op():
    try:
        return torch.ops.glyd.linear  # defined already (module imported twice)
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op(OP_NAME, mutates_args=())
    def glyd_linear(x: torch.Tensor, planes: List[torch.Tensor], bias: Optional[torch.Tensor], weight: int,
                    out_features: int, exact: bool) -> torch.Tensor:
        """y = x @ W.T (+ bias), W the packed weight registered as handle `weight`
        (its planes are passed too, so the graph depends on them)."""
        return _impl(_holder_of(weight), x, bias, exact)

    @glyd_linear.register_fake
    def _(x, planes, bias, weight, out_features, exact):
        return x.new_empty((*x.shape[:-1], out_features))

    @torch.library.custom_op("glyd::decode", mutates_args=())
    def glyd_decode(planes: List[torch.Tensor], weight: int, shape: List[int], dtype: torch.dtype) -> torch.Tensor:
        """The packed weight `weight` decoded (bit-exact), in `dtype` (a new tensor)."""
        h = _holder_of(weight)
        w = decode_weight(h) if h.device.type == "cuda" else h.packed().unpack()
        return w.to(dtype)

    @glyd_decode.register_fake
    def _(planes, weight, shape, dtype):
        return torch.empty(shape, dtype=dtype, device=planes[0].device)

    # Backward (the weights are frozen): grad x = grad y @ W, grad bias = sum of grad y.
    def setup_context(ctx, inputs, output):
        x, planes, bias, weight, out_features, exact = inputs
        ctx.planes, ctx.weight, ctx.k, ctx.dtype = planes, weight, x.shape[-1], x.dtype
        ctx.bias = bias is not None

    def backward(ctx, gy):
        w = torch.ops.glyd.decode(ctx.planes, ctx.weight, [gy.shape[-1], ctx.k], ctx.dtype)
        gx = gy @ w
        gb = gy.reshape(-1, gy.shape[-1]).sum(0) if ctx.bias else None
        return gx, [None] * len(ctx.planes), gb, None, None, None

    glyd_linear.register_autograd(backward, setup_context=setup_context)
    return torch.ops.glyd.linear


def linear_forward(module, x: torch.Tensor) -> torch.Tensor:
    """GPU_HOOKS["linear"]: forward of a GlydLinear whose input is on a CUDA device."""
    holder = weight_holder(module)
    bias = module.bias
    exact = bool(module.exact)
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and (
            x.requires_grad or (bias is not None and bias.requires_grad))):
        # the op: dynamo sees it (no graph break), autograd gets its backward (grad of x and bias)
        handle = holder.__dict__.get("_glyd_handle")
        if handle is None:  # not prepared: register outside the trace (one graph break, first trace only)
            handle = _handle_eager(holder)
        planes = [p for p in holder._parameters.values() if p is not None]
        return torch.ops.glyd.linear(x, planes, bias, handle, holder.shape[0], exact)
    sib = module.__dict__.get("_glyd_siblings")
    if sib is not None and not exact:
        y = sib.forward(module, x)
        if y is not None:
            return y
    return _impl(holder, x, bias, exact)


_PREV_ATTACH: list = [None]


def _attach(model) -> None:
    """GPU_HOOKS["attach"] (run once a model is loaded): the previous attach hook
    (experts routing, gpu_experts.attach), then prepare(model)."""
    if _PREV_ATTACH[0] is not None:
        _PREV_ATTACH[0](model)
    prepare(model)


def register() -> None:
    """Define the custom op and fill GPU_HOOKS["linear"], ["embedding"]
    (gpu_embedding) and ["decode"]; chain
    prepare() after the "attach" hook (idempotent)."""
    try:
        _define_op()
    except Exception as e:  # pragma: no cover - an older torch: eager and CUDA graphs still work
        import logging

        logging.getLogger("glyd.transformers").warning("glyd: torch.ops.glyd.linear not defined (%s); "
                                                       "torch.compile will not trace packed linears", e)
    from .gpu_embedding import embedding_forward

    hooks = _m.GPU_HOOKS
    hooks["linear"] = linear_forward
    hooks["embedding"] = embedding_forward
    hooks["decode"] = decode_weight
    if hooks.get("attach") is not _attach:
        _PREV_ATTACH[0] = hooks.get("attach")
        hooks["attach"] = _attach
