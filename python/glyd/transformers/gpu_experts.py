"""Mixtures of experts from packed weights on the GPU: only the routed experts are read.

This module fills the experts hooks of :data:`glyd.transformers.modules.GPU_HOOKS`
(registered when glyd.transformers.modules is imported):

* ``"experts"(module, *args, **kwargs)`` -- the default (fused) path: replaces
  the forward of a packed experts module whose input is on a CUDA device.
  Three ways, none of which decodes an expert that gets no token:

  - *grouped kernel* (decode steps and short prompts: fewer than
    ``NOSYNC_PAIRS_PER_EXPERT`` pairs per expert; fixed12 weights the kernels
    read aligned): pairs sorted by expert on the device (``glyd_gpu_moe_route``:
    one kernel for the sort, the offsets and each pair's row), then ONE grouped launch (``glyd_gpu_linear_experts``,
    its tile chosen by the mean rows per expert) for gate/up and one for down
    over all routed experts, the weighted sum per token in one more kernel
    (``glyd_gpu_moe_combine``), each routed expert's
    packed weights read once and decoded inside the kernel (tensor cores for
    the linear layout ``[E, out, in]``). Weights stored transposed,
    ``[E, in, out]`` as gpt-oss, Llama 4 and Aria keep them, are re-laid in
    that layout on the GPU the first time they are seen there
    (gpu_relayout: exact, the holder shows the stored orientation to
    everything else); where that is refused (GLYD_MOE_RELAYOUT=0, exact
    modules, shapes, out of memory) a CUDA-core kernel reads them as stored,
    splitting the input rows and adding the fp32 partial sums in order. Llama 4
    (all-experts layout, below the same pairs per expert, or
    ``ALL_EXPERTS_GROUPED_TOKENS`` tokens for experts not re-laid): the rows
    with a non-zero router score are gathered on the device first, except in
    blocks with top-1 routing, whose forward attach() replaces
    (``_top1_block_forward``: the router's top-1 routed directly, the same
    bits in 10 kernels fewer). No host synchronization: the block can be
    captured in a CUDA graph.
  - *no-sync decode-all* (prompts with many pairs per expert, and Llama 4
    prompts on a GPU, their rows gathered as above): every expert decoded in
    two launches (``glyd_gpu_decode_experts``), then torch's ``grouped_mm``
    over the pairs, offsets on the device.
  - *routed* (everything else: ``smallest``, DBRX's 2-D weights, Aria and
    JetMoE, shapes the kernels cannot read aligned, or
    GLYD_MOE_GROUPED=0): pairs sorted by expert with one host
    synchronization (the per-expert counts); for each expert that receives
    tokens, gate/up and down
  run as Glyd's fused packed linear (``glyd._gpu.DeviceTensor.linear``: the
  weight is decoded inside the matmul and never written to memory) on that
  expert's rows, written into one buffer for all pairs; the family's own
  gating (``_apply_gate``: clamps, gpt-oss interleave and alpha, Step 3.7 limits)
  or activation (NemotronH relu²) runs once over all rows; routing weights are
  applied and the k outputs of every token are summed in fp32 in a fixed order
  (deterministic: the same inputs give the same bits, no atomics).
  On this path weights stored transposed and not re-laid, and the ``smallest``
  layout, have no fused kernel: the routed expert is decoded into a reusable
  workspace and multiplied with torch.
* ``"routed_groups"(module, args, kwargs)`` and ``"decode_groups"(holder,
  groups)`` -- the ``exact=True`` path: the family's own forward runs
  unchanged (hence the very torch ops of the bf16 model under the same experts
  implementation), reading its expert weights from a device scratch buffer
  where only the experts that receive tokens were decoded (decode kernel,
  bit-exact; during a CUDA graph capture all of them, the routing being
  unreadable on the host). Outputs are torch.equal to the bf16 model's.
* ``"linear"``: filled by glyd.transformers.gpu_linear (register() calls it):
  GlydLinear through the fused kernel or, exact, decode + F.linear (shared
  experts, dense layers, Switch/NLLB experts).

Layouts (decided by the packed attributes, not the family name):

=================  =============================================  ==================================
kind               attributes                                     families
=================  =============================================  ==================================
``fused``          ``gate_up_proj``/``up_proj`` + ``down_proj``   the decorated families, Step 3.7,
                   3-D, ``[E,out,in]`` or transposed              LongCat (E+Z rows), gpt-oss,
                                                                  NemotronH (no gate), Llama 4
``grouped``        ``weight [E,out,in]`` / ``[E,in,out]``,        JetMoE (MoE and attention experts),
                   forward(inputs, tokens_per_expert)             Aria (``fc1``/``fc2``)
``glu2d``          ``w1, v1, w2 [E*I, H]`` (DbrxExpertGLU); the   DBRX
                   parent DbrxExperts is patched by attach()
=================  =============================================  ==================================

Bad input: routing indices outside ``[0, E)`` (``[0, E+Z)`` with zero experts)
are dropped like expert-parallel sentinels; with ``GLYD_VALIDATE=1`` in the
environment, or ``module.glyd_validate = True``, they raise
glyd.InvalidArgumentError before any kernel runs (never a device fault).
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from typing import Optional

import torch

from ..errors import InvalidArgumentError
from . import modules as _m

logger = logging.getLogger(__name__)

__all__ = ["experts_forward", "attach", "routed_groups", "decode_groups", "expert_weights",
           "validate_enabled", "register", "grouped_kernel", "prepare_experts"]

_LOCK = threading.Lock()

#: Tests only: run the default (fused) path on the CPU too (experts decoded by libglyd).
_FORCE = False


# ---- validation ---------------------------------------------------------------------------

def validate_enabled(module) -> bool:
    """Routing validation: module.glyd_validate if set, else env GLYD_VALIDATE=1."""
    v = module.__dict__.get("glyd_validate")
    if v is None:
        return os.environ.get("GLYD_VALIDATE", "") not in ("", "0", "false", "False")
    return bool(v)


def _capturing() -> bool:
    """Whether the current CUDA stream is being captured into a graph (False
    without a usable GPU: torch's query raises on a machine without a driver)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _check_routing(module, idx: torch.Tensor, limit: int, what: str = "expert index") -> None:
    if idx.numel() == 0:
        return
    if idx.is_cuda and _capturing():
        raise InvalidArgumentError(
            1, f"{type(module).__name__}: routing validation (GLYD_VALIDATE / glyd_validate) reads the routing on the "
               f"host, which a CUDA graph capture does not allow: validate in an eager call, capture without it")
    if idx.is_floating_point():
        raise InvalidArgumentError(1, f"{type(module).__name__}: routing indices must be integers, not {idx.dtype}")
    bad = (idx < 0) | (idx >= limit)
    if bool(bad.any()):
        first = idx[bad].reshape(-1)[:4].tolist()
        raise InvalidArgumentError(
            1, f"{type(module).__name__}: {int(bad.sum())} routing {what}(s) outside [0, {limit}) "
               f"(first: {first}); the module has {limit} experts")


# ---- per-holder device state ------------------------------------------------------------------

def expert_planes(groups, planes: dict, e: int):
    """Group e of a packed tensor as a one-group tensor: (its Group with offsets
    0, {plane: slice of that plane}), views without copies. Groups are coded
    independently (escape indices and chunk offsets are relative to the group)."""
    from ..tensor import PLANE_NAMES, Group

    grp = groups[e]
    nxt = groups[e + 1] if e + 1 < len(groups) else None
    sl = {}
    for i, name in enumerate(PLANE_NAMES):
        p = planes[name]
        start = grp.offsets[i]
        end = nxt.offsets[i] if nxt is not None else p.numel()
        sl[name] = p[start:end] if end > start else p[:0]
    return Group(grp.elements, grp.escapes, (0,) * len(PLANE_NAMES), grp.base, grp.table), sl


class ExpertWeights:
    """One packed experts tensor (a PackedWeight with one group per expert) seen as
    E matrices: y = x @ W[e].T (linear layout) or y = x @ W[e] (transposed), in
    the orientation its planes hold (``transposed`` is False for experts stored
    transposed whose holder is relaid: gpu_relayout).

    On a CUDA device: fused packed linear per expert (fixed12, linear layout),
    else decode of that expert into a reusable workspace + torch matmul. On the
    CPU (tests, and a reference for the grouping logic): libglyd decodes the
    expert (unpack_group) and torch multiplies."""

    def __init__(self, holder, transposed: bool):
        self.holder = holder
        self.stored_transposed = transposed
        self.relaid = holder.relaid
        self.transposed = transposed and not holder.relaid
        self.num = holder.num_groups
        g = holder.num_groups
        shape = holder.device_shape
        rows = shape[0] // g
        self.expert_shape = tuple(shape[1:]) if rows == 1 else (rows, *shape[1:])
        if len(self.expert_shape) != 2:
            raise InvalidArgumentError(1, f"experts tensor {holder.attr!r} of shape {shape}: "
                                          f"each expert must be a matrix")
        a, b = self.expert_shape
        self.in_features, self.out_features = (a, b) if self.transposed else (b, a)
        self._key = None
        self._full = None       # DeviceTensor of all groups (decode)
        self._experts = None    # per-expert single-group DeviceTensors (fused linear)
        self._grouped = None    # glyd._gpu.DeviceExperts: experts table (one-launch decode, grouped linear)

    def __reduce__(self):
        # A copied or pickled holder builds its own on demand: this one points at
        # the original's planes (and its device tensors hold ctypes pointers).
        return (type(None), ())

    # -- device tensors --
    def _refresh(self):
        key = self.holder._planes_key()
        if key == self._key:
            return
        self._full, self._experts, self._grouped, self._key = None, None, None, key

    def full(self):
        from .. import _gpu

        self._refresh()
        if self._full is None:
            h = self.holder
            self._full = _gpu.DeviceTensor(layout=h.layout, shape=h.device_shape, groups=h.groups, planes=h.planes(),
                                           device=h.device)
        return self._full

    def grouped(self, required: bool = True):
        """The glyd._gpu.DeviceExperts of this tensor (its experts table built
        once), or None where the experts kernels do not apply (not fixed12/bf16
        on a GPU, or planes the grouped kernel cannot read aligned). The table
        cannot be built during a CUDA graph capture: then a RuntimeError saying
        so, or None when not required (the caller has another way)."""
        from .. import _gpu

        h = self.holder
        if h.device.type != "cuda" or h.layout != "fixed12" or h.dtype != torch.bfloat16:
            return None
        self._refresh()
        if self._grouped is None:
            if _capturing():
                if not required:
                    return None
                raise RuntimeError(
                    f"glyd: the packed experts {h.attr!r} {h.shape} were never used on {h.device} before this CUDA "
                    f"graph capture; their experts table must be built outside the capture: run one forward pass "
                    f"first (warm-up), or load the model with glyd.from_pretrained (attach builds them)")
            self._grouped = _gpu.DeviceExperts(self.full(), transposed=self.transposed)
        return self._grouped

    def grouped_linear_ok(self) -> bool:
        """True if the grouped kernels can run this tensor: fixed12 bf16 on a GPU,
        shapes they read aligned (linear layout: in % 16 == 0 and experts of a
        multiple of 32 elements; transposed: out % 8 == 0)."""
        return self._kernels_apply() and _grouped_reads(self.expert_shape, self.transposed)

    def expert(self, e: int):
        """Group e as a one-group DeviceTensor over slices of the planes (no copy)."""
        from .. import _gpu

        self._refresh()
        if self._experts is None:
            self._experts = [None] * self.num
        dt = self._experts[e]
        if dt is None:
            g0, sl = expert_planes(self.holder.groups, self.holder.planes(), e)
            dt = _gpu.DeviceTensor(layout=self.holder.layout, shape=self.expert_shape, groups=[g0], planes=sl,
                                   device=self.holder.device)
            self._experts[e] = dt
        return dt

    # -- math --
    def decode(self, e: int, out: torch.Tensor) -> torch.Tensor:
        """Expert e's matrix (bf16, exact bits) into out (shape expert_shape)."""
        h = self.holder
        if h.device.type == "cuda":
            self.full().decode(out=out, group=e)
        else:
            h.packed().unpack_group(e, out=out)
        return out

    def _kernels_apply(self) -> bool:
        """fixed12 bf16 planes on a GPU, and the kernels not turned off (GLYD_MOE_NO_FUSED)."""
        h = self.holder
        return (h.device.type == "cuda" and h.layout == "fixed12" and h.dtype == torch.bfloat16
                and _kernels_on())

    def fused(self) -> bool:
        """True if the per-expert fused linear (glyd_gpu_linear) can run this tensor."""
        return not self.transposed and self._kernels_apply()

    def linear(self, e: int, x: torch.Tensor, out: torch.Tensor, ws) -> torch.Tensor:
        """out = x @ W[e].T (linear layout) or x @ W[e] (transposed); x, out 2-D contiguous."""
        if x.shape[0] == 0:
            return out
        if self.fused() and x.dtype == torch.bfloat16:
            dt = self.expert(e)
            return dt.linear(x, out=out, workspace=ws.linear(dt, x.shape[0], x.device), checked=True)
        w = ws.weight(self.expert_shape, self.holder.dtype, x.device)
        self.decode(e, w)
        if w.dtype != x.dtype:
            w = w.to(x.dtype)
        if self.transposed:
            torch.mm(x, w, out=out)
        else:
            torch.mm(x, w.t(), out=out)
        return out


def _kernels_on() -> bool:
    """The experts kernels are not turned off (GLYD_MOE_NO_FUSED)."""
    return os.environ.get("GLYD_MOE_NO_FUSED", "") in ("", "0")


def _grouped_reads(expert_shape, transposed: bool) -> bool:
    """The grouped kernels read experts of this shape (as held) aligned: linear
    layout [out, in]: in % 16 == 0 and a multiple of 32 elements; transposed
    [in, out]: out % 8 == 0."""
    a, b = expert_shape
    if transposed:
        return b % 8 == 0 and (a * b) % 8 == 0
    return b % 16 == 0 and (a * b) % 32 == 0


class _Workspace:
    """Reusable device buffers (per thread and device): one decoded expert
    matrix, and the fused linear's split-K workspace. Work on one stream runs
    in order, so consecutive experts may reuse them."""

    def __init__(self):
        self.bufs = {}

    def weight(self, shape, dtype, device) -> torch.Tensor:
        n = shape[0] * shape[1]
        key = ("w", dtype, device)
        b = self.bufs.get(key)
        if b is None or b.numel() < n:
            b = torch.empty(n, dtype=dtype, device=device)
            self.bufs[key] = b
        return b[:n].view(shape)

    def linear(self, dt, rows: int, device):
        need = dt.workspace_bound(rows)
        if need == 0:
            return None
        key = ("l", device)
        b = self.bufs.get(key)
        if b is None or b.numel() < need:
            b = torch.empty(max(need, 1 << 20), dtype=torch.uint8, device=device)
            self.bufs[key] = b
        return b


_WS = threading.local()


def _workspace() -> _Workspace:
    ws = getattr(_WS, "ws", None)
    if ws is None:
        ws = _WS.ws = _Workspace()
    return ws


def expert_weights(module, attr: str, transposed: bool) -> ExpertWeights:
    """The ExpertWeights of module.attr, stored transposed or not (cached on the
    holder). Experts stored transposed are re-laid for the tensor-core kernels
    the first time they are seen on a GPU (_relay_once)."""
    holder = _holder(module, attr)
    if transposed and "_glyd_relay_checked" not in holder.__dict__:
        _relay_once(module, holder)
    return _weights_of(holder, transposed)


def _holder(module, attr: str):
    return module._modules[module.__dict__["_glyd_attrs"][attr]]


def _weights_of(holder, transposed: Optional[bool] = None) -> ExpertWeights:
    """The holder's cached ExpertWeights, rebuilt if its orientation changed
    (transposed None: as cached, else the linear layout)."""
    ew = holder.__dict__.get("_glyd_ew")
    if transposed is None:
        transposed = ew.stored_transposed if ew is not None else False
    if ew is None or ew.stored_transposed != transposed or ew.relaid != holder.relaid:
        ew = ExpertWeights(holder, transposed)
        holder.__dict__["_glyd_ew"] = ew
    return ew


# ---- layouts ----------------------------------------------------------------------------------

class _Spec:
    kind = "fused"          # fused | grouped | glu2d
    w_in = "gate_up_proj"   # gate_up_proj | up_proj
    has_gate = True
    gate = "glu"            # fused kind: plain act(proj) | own module._apply_gate | silu | glu act(gate) * up
    transposed = False
    bias_in = None          # attribute names of raw biases, or None
    bias_out = None
    all_experts = False     # Llama 4: forward(hidden) over every expert, input pre-scaled
    num_experts = 0         # experts with weights (down groups)
    num_total = 0           # + zero (identity) experts (LongCat)


def _nparams(fn) -> int:
    try:
        return len([p for p in inspect.signature(fn).parameters if p != "self"])
    except (TypeError, ValueError):
        return -1


def _family_forward(module):
    """The forward of the family's own class (not of the Glyd mixins)."""
    for c in type(module).__mro__:
        if not issubclass(c, _m.GlydModule) and "forward" in c.__dict__:
            return c.__dict__["forward"]
    return type(module).forward


def spec_of(module) -> _Spec:
    s = module.__dict__.get("_glyd_moe_spec")
    if s is not None:
        return s
    attrs = module.__dict__.get("_glyd_attrs") or {}
    holders = {a: module._modules[h] for a, h in attrs.items()}
    s = _Spec()
    cls_name = type(module).__name__
    if "down_proj" in holders and ("gate_up_proj" in holders or "up_proj" in holders):
        s.kind = "fused"
        s.w_in = "gate_up_proj" if "gate_up_proj" in holders else "up_proj"
        s.has_gate = s.w_in == "gate_up_proj" and bool(getattr(module, "has_gate", True))
        wi, wd = holders[s.w_in].shape, holders["down_proj"].shape
        if len(wi) != 3 or len(wd) != 3:
            raise InvalidArgumentError(1, f"{cls_name}: expert weights must be 3-D, got {wi} and {wd}")
        flag = getattr(module, "is_transposed", None)
        if flag is None:
            # linear layout: in [E, N1, H], down [E, H, I]; transposed: in [E, H, N1], down [E, I, H]
            lin = wi[2] == wd[1]
            tr = wi[1] == wd[2]
            if lin == tr:
                raise InvalidArgumentError(1, f"{cls_name}: cannot tell the layout of {s.w_in} {wi} / down_proj {wd}")
            flag = tr
        s.transposed = bool(flag)
        n1 = wi[1] if s.transposed else wi[2]   # input features of w_in (hidden)
        i1 = wi[2] if s.transposed else wi[1]   # 2I or I
        hd, idim = (wd[2], wd[1]) if s.transposed else (wd[1], wd[2])
        need_i = i1 // 2 if s.has_gate else i1
        if n1 != hd or need_i != idim or (s.has_gate and i1 % 2):
            raise InvalidArgumentError(1, f"{cls_name}: {s.w_in} {wi} and down_proj {wd} disagree "
                                          f"(hidden {n1} vs {hd}, intermediate {need_i} vs {idim})")
        s.num_total = holders[s.w_in].num_groups
        s.num_experts = holders["down_proj"].num_groups
        if s.num_total < s.num_experts:
            raise InvalidArgumentError(1, f"{cls_name}: {s.w_in} has {s.num_total} experts, down_proj "
                                          f"{s.num_experts}")
        p = module._parameters
        bi = s.w_in + "_bias"
        s.bias_in = bi if p.get(bi) is not None else None
        s.bias_out = "down_proj_bias" if p.get("down_proj_bias") is not None else None
        s.all_experts = _nparams(_family_forward(module)) == 1
        if not s.has_gate:
            s.gate = "plain"
        elif _own_gate(module):
            s.gate = "own"
        elif _is_silu(_act_or_none(module)):
            s.gate = "silu"  # the Glyd kernel on a GPU
    elif set(holders) >= {"w1", "v1", "w2"}:
        s.kind = "glu2d"
        s.num_experts = s.num_total = holders["w1"].num_groups
    elif set(holders) == {"weight"} and len(holders["weight"].shape) == 3:
        s.kind = "grouped"
        w = holders["weight"].shape
        if hasattr(module, "in_features") and hasattr(module, "out_features"):
            s.transposed = (w[1], w[2]) == (module.in_features, module.out_features)
        elif hasattr(module, "input_size") and hasattr(module, "output_size"):
            s.transposed = not ((w[1], w[2]) == (module.output_size, module.input_size))
        s.num_experts = s.num_total = holders["weight"].num_groups
    else:
        s.kind = "unknown"
    module.__dict__["_glyd_moe_spec"] = s
    return s


def _act_or_none(module):
    for a in ("act_fn", "activation_fn", "activation"):
        f = getattr(module, a, None)
        if f is not None:
            return f
    return None


def _act(module):
    f = _act_or_none(module)
    if f is None:
        raise InvalidArgumentError(1, f"{type(module).__name__}: no activation function found")
    return f


def _is_silu(act) -> bool:
    from transformers.activations import SiLUActivation

    return type(act) in (torch.nn.SiLU, SiLUActivation)


def _own_gate(module) -> bool:
    """Whether the family gates with a function of its own (gpt-oss, Step 3.7 clamps), not
    act(gate) * up (transformers' experts decorator gives the others _default_apply_gate)."""
    fn = getattr(type(module), "_apply_gate", None)
    if fn is None:
        return False
    try:
        from transformers.integrations.moe import _default_apply_gate
    except ImportError:  # pragma: no cover - other transformers versions
        return True
    return fn is not _default_apply_gate


def _gate(module, spec: _Spec, proj: torch.Tensor) -> torch.Tensor:
    """The expert MLP's gating of proj, as spec_of classified it once per module."""
    if spec.gate == "plain":
        return _act(module)(proj)
    if spec.gate == "own":
        return module._apply_gate(proj)
    if (spec.gate == "silu" and proj.is_cuda and proj.dtype == torch.bfloat16 and proj.dim() == 2
            and proj.is_contiguous() and proj.data_ptr() % 16 == 0 and proj.shape[1] % 2 == 0):
        from .. import _gpu

        return _gpu.moe_silu_mul(proj)  # one pass, the same bits as below (two over strided halves)
    gate, up = proj.chunk(2, dim=-1)
    return _act(module)(gate) * up


# ---- the default (fused) path -----------------------------------------------------------------

def _route(module, idx: torch.Tensor, num_total: int):
    """Sort the (token, k) pairs by expert. Returns (perm, ids_sorted, counts list of
    num_total + 1: the last bucket holds dropped ids)."""
    flat = idx.reshape(-1).to(torch.int64)
    if validate_enabled(module):
        _check_routing(module, flat, num_total)
    ok = (flat >= 0) & (flat < num_total)
    ids = torch.where(ok, flat, torch.full_like(flat, num_total))
    ids_sorted, perm = torch.sort(ids, stable=True)
    # (torch.bincount would synchronize twice more on CUDA, for the min and max of ids)
    counts = torch.zeros(num_total + 1, dtype=torch.int64, device=ids.device).scatter_add_(
        0, ids, torch.ones_like(ids)).tolist()  # the one host synchronization
    return perm, ids_sorted, counts


def _grouped_apply(ew: ExpertWeights, x: torch.Tensor, counts, out: torch.Tensor) -> torch.Tensor:
    """out[rows of expert e] = x[rows of expert e] @ W[e] for consecutive groups of rows."""
    ws = _workspace()
    s = 0
    for e, c in enumerate(counts):
        if c:
            ew.linear(e, x[s:s + c], out[s:s + c], ws)
        s += c
    return out


def _ffn(module, spec: _Spec, xs: torch.Tensor, counts, ids_sorted: Optional[torch.Tensor]) -> torch.Tensor:
    """The expert MLP of rows xs already grouped by expert (counts per expert)."""
    rows = xs.shape[0]
    if spec.kind == "glu2d":
        w1 = expert_weights(module, "w1", False)
        v1 = expert_weights(module, "v1", False)
        w2 = expert_weights(module, "w2", True)
        g = xs.new_empty(rows, w1.out_features)
        u = xs.new_empty(rows, v1.out_features)
        _grouped_apply(w1, xs, counts, g)
        _grouped_apply(v1, xs, counts, u)
        h = _act(module)(g) * u
        d = xs.new_empty(rows, w2.out_features)
        return _grouped_apply(w2, h, counts, d)
    wi = expert_weights(module, spec.w_in, spec.transposed)
    wd = expert_weights(module, "down_proj", spec.transposed)
    dense = _decode_all(module, spec, counts, xs)
    proj = _project(wi, xs, counts, dense)
    if spec.bias_in is not None:
        proj += getattr(module, spec.bias_in)[ids_sorted]
    h = _gate(module, spec, proj)
    if h.dtype != xs.dtype:
        h = h.to(xs.dtype)
    if not h.is_contiguous():
        h = h.contiguous()
    d = _project(wd, h, counts, dense)
    if spec.bias_out is not None:
        d += getattr(module, spec.bias_out)[ids_sorted]
    return d


def _project(ew: ExpertWeights, x: torch.Tensor, counts, dense) -> torch.Tensor:
    """x's rows (sorted by expert, counts per expert) times their experts' weights:
    through `dense` (every expert decoded, _decode_all) when given, else grouped."""
    if dense is not None:
        return dense(ew, x)
    return _grouped_apply(ew, x, counts, x.new_empty(x.shape[0], ew.out_features))


#: Default path with many routed experts (prompts): when at least this many
#: experts, and half of all, receive tokens, decode them all in one call and run
#: one grouped matmul (torch grouped_mm) instead of one fused call per expert,
#: whose host cost grows with the experts hit. GLYD_MOE_DECODE_ALL overrides
#: (0: never).
DECODE_ALL_MIN = 24


def _decode_all(module, spec: _Spec, counts, xs):
    if xs.device.type != "cuda" or spec.all_experts:
        return None
    lim = int(os.environ.get("GLYD_MOE_DECODE_ALL", DECODE_ALL_MIN))
    hit = sum(1 for c in counts if c)
    if lim <= 0 or hit < lim or 2 * hit < spec.num_experts:
        return None
    from transformers.integrations.moe import _grouped_linear

    cum, t = [], 0
    for c in counts:
        t += c
        cum.append(t)
    offs = torch.tensor(cum, dtype=torch.int32).to(xs.device, non_blocking=True)

    def run(ew: ExpertWeights, x: torch.Tensor) -> torch.Tensor:
        w = decoded_all(ew)
        if ew.num > len(counts):  # LongCat: rows of zero experts are never multiplied
            w = w[:len(counts)]
        return _grouped_linear(x, w, offs, is_transposed=ew.transposed)

    return run


#: From this many (token, expert) pairs per expert on, the default path decodes
#: every expert (two launches) and runs one torch grouped_mm over the pairs
#: sorted by expert, offsets on the device; below, the grouped kernel reads only
#: the routed experts (both without host synchronization). On the H200 with the
#: grouped kernel's 16/32/64-row tiles (session 3, docs/PERFORMANCE.md): at 32
#: pairs per expert the grouped kernel wins (Mixtral-8x7B 128 tokens 1.65 vs
#: 2.45 ms, Qwen3-30B-A3B 512 tokens 1.22 vs 1.35), at 128 decode-all wins
#: (Mixtral 512 tokens 3.19 vs 4.07); the crossover interpolates to ~78.
NOSYNC_PAIRS_PER_EXPERT = 64
#: The same on sm_90, whose grouped kernel has wgmma tiles of 16, 64 and 128
#: rows (session 6): at 128 pairs per expert the grouped kernel wins (Mixtral
#: 512 tokens 2.62 vs 3.17 ms), at 256 decode-all (Mixtral 1024 tokens 4.20 vs
#: 3.53); the crossover interpolates to ~186.
NOSYNC_PAIRS_PER_EXPERT_SM90 = 192


def nosync(spec: _Spec, pairs: int, device) -> bool:
    """True when the default path for `pairs` (token, expert) pairs never waits for
    the host (decode all experts + grouped_mm), hence can be captured in a CUDA graph.
    Decided from the shapes and the GPU's architecture; GLYD_MOE_NOSYNC_PAIRS
    overrides the pairs per expert (0: never decode-all)."""
    if (device.type != "cuda" and not _FORCE) or spec.kind != "fused" or spec.all_experts or not spec.num_experts:
        return False
    per = _nosync_pairs_per_expert(device)
    return per > 0 and pairs >= per * spec.num_experts


def _nosync_pairs_per_expert(device) -> int:
    default = NOSYNC_PAIRS_PER_EXPERT
    if device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0):
        default = NOSYNC_PAIRS_PER_EXPERT_SM90
    return int(os.environ.get("GLYD_MOE_NOSYNC_PAIRS", default))


def grouped_kernel(module, spec: _Spec, device) -> bool:
    """True when the default path runs Glyd's grouped kernel (glyd_gpu_linear_experts):
    one launch per projection over every routed expert, the routing read on the
    device, no host synchronization (capturable in CUDA graphs). Used below the
    nosync() threshold (decode steps, short prompts); weights in the linear
    layout, fixed12. GLYD_MOE_GROUPED=0 turns it off (then: one host
    synchronization and one fused call per routed expert)."""
    if (device.type != "cuda" or spec.kind != "fused" or not spec.num_experts
            or os.environ.get("GLYD_MOE_GROUPED", "") in ("0", "false", "False")):
        return False
    return (expert_weights(module, spec.w_in, spec.transposed).grouped_linear_ok()
            and expert_weights(module, "down_proj", spec.transposed).grouped_linear_ok())


def _offsets_for(ew: ExpertWeights, offs: torch.Tensor) -> torch.Tensor:
    """offs (one entry per expert with weights) for a tensor of ew.num groups:
    groups past them (LongCat's rows of zero experts) get no rows."""
    extra = ew.num - offs.numel()
    return torch.cat([offs, offs[-1:].expand(extra)]) if extra > 0 else offs


def _routed_forward_nosync(module, spec: _Spec, x: torch.Tensor, idx2: torch.Tensor, w2: torch.Tensor,
                           grouped: bool = False):
    """As _routed_forward, with no host synchronization: every expert decoded and
    torch's grouped_mm (prompts, as transformers' grouped_mm), or, `grouped`,
    Glyd's grouped kernel reading only the routed experts (few pairs)."""
    T, k = idx2.shape
    H = x.shape[-1]
    E, Z = spec.num_experts, spec.num_total
    flat = idx2.reshape(-1).to(torch.int64)
    if validate_enabled(module):
        _check_routing(module, flat, Z)
    if grouped and _route_on_device(spec, x, flat.numel()):
        return _grouped_forward_routed_on_device(module, spec, x, flat, w2)
    ok = (flat >= 0) & (flat < Z)
    ids = torch.where(ok, flat, torch.full_like(flat, Z))      # dropped ids sort last
    ids_sorted, perm = torch.sort(ids, stable=True)
    counts = torch.histc(ids_sorted.int() if x.device.type == "cuda" else ids_sorted.float(), bins=E, min=0, max=E - 1)
    offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
    real = (ids_sorted < E).unsqueeze(-1)
    xs = x.index_select(0, perm // k)
    ids_c = ids_sorted.clamp(max=E - 1)
    wi = expert_weights(module, spec.w_in, spec.transposed)
    wd = expert_weights(module, "down_proj", spec.transposed)
    if grouped:
        proj = wi.grouped().linear(xs, _offsets_for(wi, offs))
    else:
        from transformers.integrations.moe import _grouped_linear

        w_in = decoded_all(wi)[:E]
        proj = _grouped_linear(xs.masked_fill(~real, 0), w_in, offs, is_transposed=wi.transposed)
    if spec.bias_in is not None:
        proj = proj + getattr(module, spec.bias_in)[ids_c]
    proj = proj.masked_fill(~real, 0)  # rows past offs[-1] are left uninitialized by grouped_mm
    h = _gate(module, spec, proj)
    if h.dtype != x.dtype:
        h = h.to(x.dtype)
    if grouped:
        d = wd.grouped().linear(h.contiguous(), _offsets_for(wd, offs))
    else:
        d = _grouped_linear(h.contiguous(), decoded_all(wd), offs, is_transposed=wd.transposed)
    if spec.bias_out is not None:
        d = d + getattr(module, spec.bias_out)[ids_c]
    wsel = w2.reshape(-1)[perm].float().unsqueeze(-1)
    out = torch.where(real, d.float(), xs.float()) * wsel          # identity for zero experts
    out = out.masked_fill((ids_sorted >= Z).unsqueeze(-1), 0)      # dropped pairs
    pairs = torch.empty_like(out)
    pairs.index_copy_(0, perm, out)
    return pairs.view(T, k, H).sum(dim=1)


def _route_on_device(spec: _Spec, x: torch.Tensor, pairs: int) -> bool:
    """Whether the grouped path can route and combine with Glyd's two routing kernels
    (glyd._gpu.moe_route / moe_combine) instead of ~30 small torch kernels: bf16 on a
    GPU, within the kernels' limits."""
    from .. import _gpu

    return (x.device.type == "cuda" and x.dtype == torch.bfloat16 and x.data_ptr() % 16 == 0
            and pairs <= _gpu.MOE_ROUTE_MAX_PAIRS
            and spec.num_total <= _gpu.MOE_ROUTE_MAX_EXPERTS)


def _grouped_forward_routed_on_device(module, spec: _Spec, x: torch.Tensor, flat: torch.Tensor,
                                      w2: torch.Tensor) -> torch.Tensor:
    """The grouped-kernel path with the routing on the device: sort the pairs
    (moe_route), gather their rows, the two grouped linears (expert biases added per
    sorted row, its expert found from the offsets), then the weighted sum per token
    (moe_combine: identity experts add x, dropped pairs nothing). Rows past the
    routed experts are never read, so they need no masking."""
    from .. import _gpu

    E, Z = spec.num_experts, spec.num_total
    offs, tok, rows = _gpu.moe_route(flat.contiguous(), w2.shape[1], E, Z)
    xs = x.index_select(0, tok)
    wi = expert_weights(module, spec.w_in, spec.transposed)
    wd = expert_weights(module, "down_proj", spec.transposed)
    proj = wi.grouped().linear(xs, _offsets_for(wi, offs))
    ids = None
    if spec.bias_in is not None or spec.bias_out is not None:  # gpt-oss: a bias per sorted row
        ids = torch.searchsorted(offs, torch.arange(tok.numel(), device=x.device, dtype=torch.int32),
                                 right=True).clamp_(max=E - 1)
    if spec.bias_in is not None:
        proj = proj + getattr(module, spec.bias_in)[ids]
    h = _gate(module, spec, proj)
    if h.dtype != x.dtype:
        h = h.to(x.dtype)
    d = wd.grouped().linear(h.contiguous(), _offsets_for(wd, offs))
    if spec.bias_out is not None:
        d = d + getattr(module, spec.bias_out)[ids]
    return _gpu.moe_combine(x, d.to(x.dtype), w2.float().contiguous(), flat, rows, E, Z)


def _routed_forward(module, spec: _Spec, hidden: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor):
    """hidden [..., H], idx/weights [T, k]: sum_k w[t,k] * expert_{idx[t,k]}(x[t])."""
    H = hidden.shape[-1]
    x = hidden.reshape(-1, H)
    if not x.is_contiguous():
        x = x.contiguous()
    T = x.shape[0]
    k = idx.shape[-1] if idx.dim() > 1 else 1
    idx2 = idx.reshape(T, k)
    w2 = weights.reshape(T, k)
    if nosync(spec, T * k, x.device):
        return _routed_forward_nosync(module, spec, x, idx2, w2).to(hidden.dtype).view(hidden.shape)
    if grouped_kernel(module, spec, x.device):
        return _routed_forward_nosync(module, spec, x, idx2, w2, grouped=True).to(hidden.dtype).view(hidden.shape)
    perm, ids_sorted, counts = _route(module, idx2, spec.num_total)
    n_real = sum(counts[:spec.num_experts])
    n_zero = sum(counts[spec.num_experts:spec.num_total])
    tok = perm // k
    pairs = torch.zeros(T * k, H, dtype=torch.float32, device=x.device)
    if n_real:
        xs = x.index_select(0, tok[:n_real])
        d = _ffn(module, spec, xs, counts[:spec.num_experts], ids_sorted[:n_real])
        wsel = w2.reshape(-1)[perm[:n_real]]
        pairs.index_copy_(0, perm[:n_real], d.float() * wsel.float().unsqueeze(-1))
    if n_zero:  # LongCat's zero (identity) experts: x * w
        sel = perm[n_real:n_real + n_zero]
        wsel = w2.reshape(-1)[sel]
        pairs.index_copy_(0, sel, x.index_select(0, tok[n_real:n_real + n_zero]).float() * wsel.float().unsqueeze(-1))
    out = pairs.view(T, k, H).sum(dim=1).to(hidden.dtype)
    return out.view(hidden.shape)


#: Llama 4 (all-experts layout) with experts the transposed (CUDA-core) kernel
#: reads (not re-laid: gpu_relayout): up to this many tokens, the grouped
#: kernel without a host synchronization (rows with a non-zero score gathered
#: on the device); above, on a GPU, every expert decoded and torch's
#: grouped_mm over the gathered rows, also without one (elsewhere one
#: synchronization and per-expert calls). Re-laid experts switch where the
#: routed families do (the pairs per expert of nosync()). The env variable
#: GLYD_MOE_ALL_EXPERTS_GROUPED_TOKENS overrides both.
#: Llama-4-Scout block on the H200 (session 12, transposed grouped kernel vs
#: decode-all): 17 tokens 0.95 vs 3.12 ms, 32 1.29 vs 3.23, 64 2.23 vs 3.42,
#: 128 3.26 vs 3.56, 256 6.03 vs 3.58. Re-laid (session 13): 512 tokens 2.11
#: vs 3.76.
ALL_EXPERTS_GROUPED_TOKENS = 128


def _all_experts_path(module, spec: _Spec, hidden: torch.Tensor) -> str:
    """Llama 4's default path for this call (path_of's names): "grouped-kernel"
    where the grouped kernel reads the weights, up to ALL_EXPERTS_GROUPED_TOKENS
    tokens (transposed experts) or the nosync() pairs per expert (re-laid ones);
    "nosync" above on a GPU within the routing kernels' limits, else "all-experts"."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    T = flat.shape[0] // max(spec.num_experts, 1)
    if _all_experts_small(module, spec, T, hidden.device):
        return "grouped-kernel" if grouped_kernel(module, spec, hidden.device) else "all-experts"
    if flat.device.type == "cuda" and _route_on_device(spec, flat, T * spec.num_experts):
        return "nosync"
    return "all-experts"


def _all_experts_small(module, spec: _Spec, T: int, device) -> bool:
    """Whether T tokens of Llama 4's experts take the grouped kernel: up to the
    nosync() pairs per expert for re-laid experts, ALL_EXPERTS_GROUPED_TOKENS for
    experts read as stored (GLYD_MOE_ALL_EXPERTS_GROUPED_TOKENS overrides both)."""
    env = os.environ.get("GLYD_MOE_ALL_EXPERTS_GROUPED_TOKENS")
    if env is not None:
        return T <= int(env)
    if device.type == "cuda" and not expert_weights(module, spec.w_in, spec.transposed).transposed:
        E = max(spec.num_experts, 1)
        k = module.__dict__.get("_glyd_top_k") or E
        per = _nosync_pairs_per_expert(device)
        return per <= 0 or T * min(k, E) < per * E
    return T <= ALL_EXPERTS_GROUPED_TOKENS


def _all_experts_grouped(module, spec: _Spec, hidden: torch.Tensor) -> Optional[torch.Tensor]:
    """Llama 4 through the grouped kernel (decode steps) or decode-all + grouped_mm
    (prompts), both without a host synchronization; None when neither applies."""
    E = spec.num_experts
    H = hidden.shape[-1]
    path = _all_experts_path(module, spec, hidden)
    if path == "all-experts":
        return None
    flat = hidden.reshape(-1, H).contiguous()
    T = flat.shape[0] // E
    if path == "nosync":
        from transformers.integrations.moe import _grouped_linear

        def decoded_mm(ew: ExpertWeights, x: torch.Tensor, offs: torch.Tensor, out=None) -> torch.Tensor:
            y = _grouped_linear(x, decoded_all(ew), offs, is_transposed=ew.transposed)
            return y if out is None else out.copy_(y)

        return _all_experts_on_device(module, spec, flat, T, decoded_mm)
    if _route_on_device(spec, flat, E * T):
        return _all_experts_on_device(module, spec, flat, T, _grouped_mm)
    k = module.__dict__.get("_glyd_top_k") or E
    R = min(E * T, T * k)  # rows with a non-zero score: at most top_k per token
    nz = (flat != 0).any(dim=-1)
    eid = torch.arange(E, device=flat.device).repeat_interleave(T)
    key = torch.where(nz, eid, torch.full_like(eid, E))     # zero rows sort last
    _, perm = torch.sort(key, stable=True)
    offs = torch.cumsum(nz.view(E, T).sum(dim=1), dim=0, dtype=torch.int32)
    sel = perm[:R]
    xs = flat.index_select(0, sel)
    wi = expert_weights(module, spec.w_in, spec.transposed)
    wd = expert_weights(module, "down_proj", spec.transposed)
    proj = wi.grouped().linear(xs, offs)
    real = (torch.arange(R, device=flat.device) < offs[-1]).unsqueeze(-1)
    h = _gate(module, spec, proj.masked_fill(~real, 0))
    if h.dtype != flat.dtype:
        h = h.to(flat.dtype)
    d = wd.grouped().linear(h.contiguous(), offs)
    out = torch.zeros_like(flat)
    out.index_copy_(0, sel, d.masked_fill(~real, 0))
    return out


def _all_experts_on_device(module, spec: _Spec, flat: torch.Tensor, T: int, mm) -> torch.Tensor:
    """Llama 4 with the routing on the device: every row of flat [E*T, H] a pair of
    its own (top-1), routed to its expert or, if zero, dropped (sorted last); the
    first R sorted rows gathered, mm(expert weights, rows, offsets[, out]) for gate/up
    and down (down into the first R rows of the combine's input), then moe_combine
    puts each row back in place (zero rows 0). The kernels get only the R rows: their
    grids and splits are sized by the rows they are given."""
    from .. import _gpu

    E = spec.num_experts
    k = module.__dict__.get("_glyd_top_k") or E
    R = min(E * T, T * k)  # rows with a non-zero score: at most top_k per token
    ids = _gpu.moe_row_experts(flat, T)  # the expert of each non-zero row, -1 for zero rows
    offs, tok, rows = _gpu.moe_route(ids, 1, E)
    d = torch.empty_like(flat)  # rows past R are never read (only routed rows are)
    _sorted_ffn(module, spec, flat.index_select(0, tok[:R]), offs, mm, out=d[:R])
    ones = torch.ones(E * T, 1, dtype=torch.float32, device=flat.device)
    return _gpu.moe_combine(flat, d, ones, ids, rows, E)


def _grouped_mm(ew: ExpertWeights, x: torch.Tensor, offs: torch.Tensor, out=None) -> torch.Tensor:
    """Rows sorted by expert (offs: each expert's end row) times their experts,
    through Glyd's grouped kernel."""
    return ew.grouped().linear(x, offs, out=out)


def _sorted_ffn(module, spec: _Spec, xs: torch.Tensor, offs: torch.Tensor, mm, out=None) -> torch.Tensor:
    """The experts' gate/up, the family's gating and down over rows sorted by
    expert (no expert biases: Llama 4), mm(expert weights, rows, offs[, out]) the
    grouped product; down's rows into `out` when given."""
    wi = expert_weights(module, spec.w_in, spec.transposed)
    wd = expert_weights(module, "down_proj", spec.transposed)
    h = _gate(module, spec, mm(wi, xs, offs))
    if h.dtype != xs.dtype:
        h = h.to(xs.dtype)
    return mm(wd, h.contiguous(), offs, out=out)


def _all_experts_forward(module, spec: _Spec, hidden: torch.Tensor) -> torch.Tensor:
    """Llama 4: hidden [E*T, H] holds every token once per expert, scaled by its
    router score (0 for experts the token is not routed to). Only non-zero rows
    are computed; zero rows give zero (as in the bf16 model for finite weights)."""
    E = spec.num_experts
    H = hidden.shape[-1]
    x = hidden.reshape(E, -1, H)
    T = x.shape[1]
    nz = (x != 0).any(dim=-1)                       # [E, T]
    counts = nz.sum(dim=1).tolist()                 # the one host synchronization
    rows = _nonzero(nz.reshape(-1), sum(counts))    # expert-major, so grouped by expert
    out = torch.zeros(E * T, H, dtype=hidden.dtype, device=hidden.device)
    if rows.numel():
        xs = hidden.reshape(-1, H).index_select(0, rows)
        d = _ffn(module, spec, xs, counts, None)
        out.index_copy_(0, rows, d.to(out.dtype))
    return out


def _top1_block_ok(block, flat: torch.Tensor) -> bool:
    """Whether a Llama 4 MoE block (patched by attach) takes _top1_block_forward for
    this input: top-1 routing, bf16 on a GPU (the router too), not exact, no
    autograd, the grouped kernel for this many tokens, and no hooks on the router
    or the experts (the fast path calls neither)."""
    ex, router = block._modules.get("experts"), block._modules.get("router")
    if (not isinstance(ex, _m.GlydExperts) or not isinstance(router, torch.nn.Linear) or ex.exact
            or getattr(block, "top_k", None) != 1 or flat.device.type != "cuda" or flat.dtype != torch.bfloat16
            or flat.dim() != 2 or not flat.is_contiguous() or (torch.is_grad_enabled() and flat.requires_grad)
            or not _supported(ex, flat)
            or torch.compiler.is_compiling()):
        return False
    if any(m._forward_hooks or m._forward_pre_hooks or "forward" in m.__dict__ for m in (ex, router)):
        return False
    spec = spec_of(ex)
    return (spec.kind == "fused" and spec.all_experts and router.weight.shape == (spec.num_experts, flat.shape[1])
            and router.weight.dtype == torch.bfloat16 and (router.bias is None or router.bias.dtype == torch.bfloat16)
            and _route_on_device(spec, flat, flat.shape[0]) and grouped_kernel(ex, spec, flat.device)
            and _all_experts_small(ex, spec, flat.shape[0], flat.device))


def _top1_block_forward(self, hidden_states):
    """Llama4TextMoe.forward for top-1 routing with packed experts on a GPU, in
    fewer kernels: the family builds every token once per expert (repeat, times
    the router scores: 0 for the experts not chosen), the experts find the
    non-zero rows, and the routed outputs of all experts are summed per token.
    Here the router's top-1 is routed directly (glyd._gpu.moe_route), only the
    chosen rows are scaled, and the down projection's rows are gathered back in
    token order: after the router's GEMM, three Glyd kernels (top-1 and its
    sigmoid, the sort by expert, the scaled rows) where the family's forward
    over Glyd's experts ran eleven.
    Same bits as the family's forward over Glyd's experts: the same router
    GEMM, torch.topk's choice, torch's sigmoid and bf16 products, the same
    sorted rows for the grouped kernels, and a sum of one non-zero row per
    token is that row."""
    flat = hidden_states.reshape(-1, self.hidden_dim)
    if not _top1_block_ok(self, flat):
        return type(self).forward(self, hidden_states)
    from .. import _gpu

    ex, router = self.experts, self.router
    spec = spec_of(ex)
    logits = torch.nn.functional.linear(flat, router.weight, router.bias)
    idx, score = _gpu.moe_top1(logits)  # topk(1) and sigmoid in one kernel
    offs, tok, rows = _gpu.moe_route(idx, 1, spec.num_experts)
    xs = _gpu.moe_gather_scale(flat, tok, score)  # (flat * score)[tok]
    d = _sorted_ffn(ex, spec, xs, offs, _grouped_mm)
    out = self.shared_expert(flat)
    out.add_(d.index_select(0, rows))
    return out, logits


def _nonzero(mask: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the True elements of a 1-D mask whose count the host knows
    (nonzero_static: no second synchronization)."""
    try:
        return torch.nonzero_static(mask, size=count).squeeze(1)
    except (RuntimeError, NotImplementedError, AttributeError):  # pragma: no cover - older torch
        return mask.nonzero().squeeze(1)


def _grouped_forward(module, spec: _Spec, inputs: torch.Tensor, counts) -> torch.Tensor:
    """JetMoE / Aria: rows of inputs already grouped by expert, counts per expert."""
    if torch.is_tensor(counts):
        counts = counts.tolist()
    counts = [int(c) for c in counts]
    if validate_enabled(module) and (len(counts) != spec.num_experts or any(c < 0 for c in counts)
                                     or sum(counts) > inputs.shape[0]):
        raise InvalidArgumentError(1, f"{type(module).__name__}: tokens per expert {counts[:8]}... do not fit "
                                      f"{spec.num_experts} experts and {inputs.shape[0]} rows")
    counts = counts[:spec.num_experts]
    ew = expert_weights(module, "weight", spec.transposed)
    x = inputs if inputs.is_contiguous() else inputs.contiguous()
    total = sum(counts)
    if total > x.shape[0]:
        raise InvalidArgumentError(1, f"{type(module).__name__}: {total} routed rows but {x.shape[0]} inputs")
    out = x.new_empty(x.shape[0], ew.out_features)
    if total < x.shape[0]:
        out[total:].zero_()
    return _grouped_apply(ew, x, counts, out)


def _supported(module, x: torch.Tensor) -> bool:
    if x.dtype != torch.bfloat16:
        return False
    for h in module.glyd_weights().values():
        if h.dtype != torch.bfloat16 or h.compute_dtype not in (None, torch.bfloat16):
            return False
    return True


@torch.no_grad()
def experts_forward(module, *args, **kwargs):
    """GPU_HOOKS["experts"]: the fused forward of a packed experts module
    (inference only: no autograd graph, like every packed module)."""
    x = args[0]
    spec = spec_of(module)
    if spec.kind == "unknown" or not _supported(module, x):
        return _exact_forward(module, args, kwargs)
    if spec.kind == "grouped":
        counts = args[1] if len(args) > 1 else next(iter(kwargs.values()))
        return _grouped_forward(module, spec, x, counts)
    if spec.kind == "fused" and spec.all_experts:
        out = _all_experts_grouped(module, spec, x)
        return out if out is not None else _all_experts_forward(module, spec, x)
    if spec.kind == "fused":
        idx, w = _routing_args(module, args, kwargs)
        if idx is None:
            return _exact_forward(module, args, kwargs)
        return _routed_forward(module, spec, x, idx, w)
    return _exact_forward(module, args, kwargs)


def path_of(module, args, kwargs) -> str:
    """Which default path experts_forward takes for this call: "grouped" (JetMoE,
    Aria), "all-experts" (Llama 4), "grouped-kernel", "routed", "nosync", or "exact" (fallback:
    unsupported dtype or layout)."""
    x = args[0]
    spec = spec_of(module)
    if spec.kind == "unknown" or not _supported(module, x):
        return "exact"
    if spec.kind == "grouped":
        return "grouped"
    if spec.kind == "fused" and spec.all_experts:
        return _all_experts_path(module, spec, x)
    if spec.kind == "fused":
        idx, _ = _routing_args(module, args, kwargs)
        if idx is None:
            return "exact"
        if nosync(spec, idx.numel(), x.device):
            return "nosync"
        return "grouped-kernel" if grouped_kernel(module, spec, x.device) else "routed"
    return "exact"


def _routing_args(module, args, kwargs):
    pos = type(module).__dict__.get("_glyd_routing_arg", getattr(module, "_glyd_routing_arg", None))
    if pos is None:
        return None, None
    idx = args[pos] if len(args) > pos else next((kwargs[k] for k in _m._ROUTING_NAMES if k in kwargs), None)
    w = args[pos + 1] if len(args) > pos + 1 else None
    if w is None:
        rest = [v for k, v in kwargs.items() if k not in _m._ROUTING_NAMES and torch.is_tensor(v)]
        w = rest[0] if rest else None
    if idx is None or w is None:
        return None, None
    return idx, w


def _exact_forward(module, args, kwargs):
    """The family's own forward with only the routed experts decoded."""
    groups = routed_groups(module, args, kwargs)
    module.__dict__["_glyd_active"] = groups
    try:
        return super(_m.GlydExperts, module).forward(*args, **kwargs)
    finally:
        module.__dict__["_glyd_active"] = None


# ---- the exact path ---------------------------------------------------------------------------

def routed_groups(module, args, kwargs):
    """GPU_HOOKS["routed_groups"]: the experts (groups) a call reads, as a list of
    ints, or None for all. One host synchronization; none under CUDA graph
    capture, where the routing cannot be read on the host: AllGroups (every
    expert decoded on the device, each replay)."""
    spec = spec_of(module)
    capturing = _capturing()
    if spec.kind == "grouped":
        counts = args[1] if len(args) > 1 else next(iter(kwargs.values()), None)
        if counts is None:
            return None
        if torch.is_tensor(counts):
            if capturing:
                return AllGroups()
            counts = counts.tolist()
        if validate_enabled(module) and (len(counts) > spec.num_experts or any(int(c) < 0 for c in counts)):
            raise InvalidArgumentError(1, f"{type(module).__name__}: bad tokens per expert {list(counts)[:8]}")
        return [e for e, c in enumerate(counts) if int(c) > 0]
    if spec.kind == "fused" and spec.all_experts:
        if capturing:
            return AllGroups()
        x = args[0]
        E = spec.num_experts
        nz = (x.reshape(E, -1, x.shape[-1]) != 0).any(dim=-1).any(dim=-1)
        return nz.nonzero().reshape(-1).tolist()
    idx, _ = _routing_args(module, args, kwargs)
    if idx is None:
        return None
    n = spec.num_total or max((h.num_groups for h in module.glyd_weights().values()), default=0)
    if validate_enabled(module):
        _check_routing(module, idx, n)
    if capturing or nosync(spec, idx.numel(), idx.device):
        return AllGroups()  # prompts, graphs: every expert, decoded without waiting for the routing
    ids = torch.unique(idx.detach().reshape(-1)).tolist()
    groups = [i for i in ids if 0 <= i < n]
    if len(groups) != len(ids) and n:
        # expert-parallel sentinels: batched_mm clamps them to the last expert (weight 0)
        groups.append(n - 1)
    return groups


class AllGroups:
    """Every group, decoded once per call (a new object per call)."""

    def __iter__(self):
        raise TypeError("AllGroups means every group")


_SCRATCH: dict = {}


def _scratch(key: str, shape, dtype, device) -> torch.Tensor:
    k = (threading.get_ident(), key, tuple(shape), dtype, device)
    with _LOCK:
        buf = _SCRATCH.get(k)
        if buf is None:
            buf = torch.zeros(shape, dtype=dtype, device=device)
            _SCRATCH[k] = buf
    return buf


def clear_scratch() -> None:
    with _LOCK:
        _SCRATCH.clear()


def decode_groups(holder, groups) -> torch.Tensor:
    """GPU_HOOKS["decode_groups"]: the expert weights with (at least) `groups`
    decoded bit-exactly, in the stored orientation, in a device scratch buffer
    shared by the layers (the other experts hold stale values: no token is
    routed to them). groups None: all."""
    dev = holder.device
    if holder.dtype != torch.bfloat16 and dev.type != "cpu":  # the GPU kernels take bf16: decode on the CPU
        w = holder.packed().unpack()
        return w.to(dev)
    buf = _scratch(holder.scratch_key, holder.shape, holder.dtype, dev)
    # Eager experts loops read the weight once per routed expert within one call:
    # decode the call's experts once (the same groups object for the whole call).
    key = holder._planes_key()
    memo = holder.__dict__.get("_glyd_memo")
    if groups is not None and memo is not None and memo[0] is groups and memo[1] == key and memo[2] is buf:
        return buf
    sel = None if groups is None or isinstance(groups, AllGroups) else \
        [int(g) for g in groups if 0 <= int(g) < holder.num_groups]
    if dev.type == "cpu":  # tests of this module's logic without a GPU
        if sel is None:
            holder.packed().unpack(out=buf)
        for g in sel or ():
            holder.packed().unpack_group(g, out=holder._group_view(buf)[g])
    elif holder.relaid:  # decoded as held, each expert transposed back
        held = _decode_held(holder, sel, _held_scratch(holder))
        if sel is None:
            buf.copy_(held.transpose(1, 2))
        for g in sel or ():
            buf[g].copy_(held[g].t())
    else:
        _decode_held(holder, sel, buf)
    if groups is not None:
        holder.__dict__["_glyd_memo"] = (groups, key, buf)
    return buf


def decoded_all(ew: ExpertWeights) -> torch.Tensor:
    """Every expert of ew decoded in the orientation its planes hold (ew.transposed
    says which), in a device scratch buffer shared by the layers."""
    h = ew.holder
    if not h.relaid:
        return decode_groups(h, None)
    return _decode_held(h, None, _held_scratch(h))


def _held_scratch(holder) -> torch.Tensor:
    return _scratch(holder.scratch_key + "#held", holder.device_shape, holder.dtype, holder.device)


def _decode_held(holder, sel, out: torch.Tensor) -> torch.Tensor:
    """Decode the groups sel (None: all, in two launches where the experts table
    exists) of a GPU holder into out, in the planes' own orientation."""
    ew = _weights_of(holder)
    if sel is None:
        # an exact warm-up decodes per group and never builds the experts
        # table, which a capture cannot: then one launch over the tensor
        de = ew.grouped(required=False)
        if de is not None:
            de.decode(out=out)
        else:
            ew.full().decode(out=out)
        return out
    view = holder._group_view(out)
    for g in sel:
        ew.full().decode(out=view[g], group=g)
    return out


# ---- DBRX: the routing lives in the parent (DbrxExperts) --------------------------------------

def _dbrx_forward(self, hidden_states, top_k_index, top_k_weights):
    mlp = self.mlp
    cuda = hidden_states.device.type == "cuda" or _FORCE
    if cuda and not mlp.exact and _supported(mlp, hidden_states):
        spec = spec_of(mlp)
        with torch.no_grad():
            out = _routed_forward(mlp, spec, hidden_states.reshape(-1, self.hidden_size), top_k_index,
                                  top_k_weights)
        return out.view(hidden_states.shape[0], -1, self.hidden_size)
    if validate_enabled(mlp):
        _check_routing(mlp, top_k_index, spec_of(mlp).num_experts)
    mlp.__dict__["_glyd_active"] = _m._RoutedGroups(top_k_index)
    try:
        return type(self).forward(self, hidden_states, top_k_index, top_k_weights)
    finally:
        mlp.__dict__["_glyd_active"] = None


class _BlockForward:
    """A block's forward replaced by fn(block, *args): an instance attribute that,
    unlike a bound method, survives pickling (fn by its name, the block by reference)
    and deepcopy (bound to the copy)."""

    def __init__(self, fn, block):
        self.fn, self.block = fn, block

    def __call__(self, *args, **kwargs):
        return self.fn(self.block, *args, **kwargs)


def attach(model) -> None:
    """Patch the modules whose routing lives outside the packed module (DBRX's
    DbrxExperts around the packed DbrxExpertGLU): they then read only routed
    experts, on the GPU (fused) and the CPU (decoded); give Llama 4's MoE blocks
    their top-1 forward (_top1_block_forward); run shared experts on a side
    stream (gpu_shared). Idempotent."""
    for _, m in model.named_modules():
        child = m._modules.get("mlp") if hasattr(m, "_modules") else None
        if child is None or not isinstance(child, _m.GlydModule) or "forward" in m.__dict__:
            continue
        if spec_of(child).kind != "glu2d" or _nparams(type(m).forward) != 3:
            continue
        m.forward = _BlockForward(_dbrx_forward, m)
    for _, m in model.named_modules():  # Llama 4's MoE blocks: top-1 routed directly
        if (type(m).__name__ == "Llama4TextMoe" and "forward" not in m.__dict__ and _nparams(type(m).forward) == 1
                and isinstance(m._modules.get("experts"), _m.GlydExperts)
                and type(m._modules.get("router")).__name__ == "Llama4Router"):
            m.forward = _BlockForward(_top1_block_forward, m)
    prepare_experts(model)
    from . import gpu_shared

    gpu_shared.attach(model)  # shared experts beside the routed ones


def prepare_experts(model) -> int:
    """Build the experts table of every packed experts module of `model` that the
    grouped kernel runs (before any CUDA graph capture; attach() calls it at
    load), re-laying experts stored transposed for the tensor-core kernels
    first (relay_wanted). Returns how many tensors got a table."""
    n = 0
    for _, m in _m.iter_packed_modules(model):
        if not isinstance(m, _m.GlydExperts):
            continue
        spec = spec_of(m)
        if spec.kind != "fused":
            continue
        for attr in (spec.w_in, "down_proj"):
            ew = expert_weights(m, attr, spec.transposed)
            if ew.grouped_linear_ok():
                ew.grouped()
                n += 1
    # Llama 4: the experts see every token of every expert; top_k (of the parent)
    # bounds the rows with a non-zero score, which sizes the grouped kernel's grid.
    for _, m in model.named_modules():
        ex = m._modules.get("experts") if hasattr(m, "_modules") else None
        if isinstance(ex, _m.GlydExperts) and getattr(m, "top_k", None):
            ex.__dict__["_glyd_top_k"] = int(m.top_k)
    return n


def _relay_once(module, holder) -> None:
    """Re-lay experts stored transposed (gpu_relayout) the first time they are
    seen on a GPU (prepare_experts at load, else the first forward), if
    relay_wanted; never later, since a CUDA graph captured since holds the
    planes it saw. Moving the holder to another device clears the mark."""
    holder.__dict__["_glyd_relay_checked"] = True
    if not relay_wanted(module, holder):
        return
    try:
        holder.relay(True)
    except torch.cuda.OutOfMemoryError:
        logger.warning("glyd: out of GPU memory re-laying %s %s for the tensor-core kernels; it keeps the "
                       "CUDA-core kernel of transposed experts", holder.attr, holder.shape)


def relay_wanted(module, holder) -> bool:
    """Whether experts stored transposed get re-laid (gpu_relayout): planes the
    kernels read (fixed12 bf16 on a GPU, GLYD_MOE_NO_FUSED unset), a re-laid
    shape the tensor-core grouped kernel reads, a module not exact (its decoded
    weights would be transposed back on every call), planes that may leave
    their stored arrangement (modules.keep_stored), no CUDA graph being
    captured, and GLYD_MOE_RELAYOUT not 0."""
    from .gpu_relayout import relayable

    if (holder.relaid or module.exact or holder.__dict__.get("_glyd_keep_stored")
            or os.environ.get("GLYD_MOE_RELAYOUT", "") in ("0", "false", "False")):
        return False
    if not relayable(holder) or _capturing():
        return False
    _, a, b = holder.shape  # [E, in, out]: re-laid [E, out, in]
    return _kernels_on() and _grouped_reads((b, a), False)


# ---- registration --------------------------------------------------------------------------------

def _interface_fn(self, hidden_states, top_k_index, top_k_weights):
    """experts_implementation="glyd": packed experts on a GPU run the fused path;
    anything else runs transformers' grouped_mm implementation."""
    if isinstance(self, _m.GlydExperts) and hidden_states.device.type == "cuda" and not self.exact \
            and _supported(self, hidden_states):
        with torch.no_grad():
            return _routed_forward(self, spec_of(self), hidden_states, top_k_index, top_k_weights)
    from transformers.integrations.moe import grouped_mm_experts_forward

    return grouped_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)


def register() -> None:
    """Fill GPU_HOOKS (the linear and decode hooks through gpu_linear) and register the "glyd"
    experts implementation with transformers (when installed)."""
    hooks = _m.GPU_HOOKS
    hooks["experts"] = experts_forward
    hooks["routed_groups"] = routed_groups
    hooks["decode_groups"] = decode_groups
    from .gpu_relayout import relayout

    hooks["relayout"] = relayout
    hooks["attach"] = attach
    from . import gpu_linear  # GlydLinear on the GPU (fused / exact), the "linear" and "decode" hooks

    gpu_linear.register()
    try:
        from transformers.integrations.moe import ExpertsInterface

        ExpertsInterface.register("glyd", _interface_fn)
    except Exception:  # transformers missing or too old: the hooks still work
        pass


# ---- packing a module in memory (tests, benchmarks) ------------------------------------------------

def pack_module(module, layout: str = "fixed12", workers: int = 0, exact: bool = False):
    """Pack the weights of ``module`` (a model or a block such as a MoE layer) in
    place, exactly as a Glyd checkpoint would hold them (same rules as
    glyd.save_pretrained: linears and experts packed, routers kept), without
    writing files. The planes stay on the module's device. Returns the module."""
    from ..tensor import pack
    from .families import pack_plan
    from .modules import PackedWeight, install, scratch_key

    by_module: dict = {}
    for it in pack_plan(module):
        by_module.setdefault(it.module, []).append(it)
    for name, items in by_module.items():
        m = module.get_submodule(name)
        dev = None
        holders = {}
        for it in items:
            p = m._parameters[it.attr]
            dev = p.device
            packed = pack(p.detach().to("cpu"), layout=layout, groups=it.groups, workers=workers)
            h = PackedWeight.from_packed(it.attr, packed, scratch_key=scratch_key(name, it.attr))
            h.cache_decoded = not it.experts
            holders[it.attr] = h
        install(m, name, holders, experts=items[0].experts, exact=exact)
        if dev is not None and dev.type != "cpu":
            for h in holders.values():
                h.to(dev)
                h.materialize_empty_planes()
    _m.attach(module)  # the GPU_HOOKS["attach"] chain: routing outside the module, linears prepared
    return module


def packed_bytes(module, experts_only: bool = True) -> tuple:
    """(bf16 bytes, packed bytes) of the packed weights of module (experts only by default)."""
    orig = packed = 0
    for _, m in _m.iter_packed_modules(module):
        if experts_only and not isinstance(m, _m.GlydExperts):
            continue
        for h in m.glyd_weights().values():
            n = 1
            for s in h.shape:
                n *= s
            orig += n * 2
            packed += sum(p.numel() for p in h._parameters.values() if p is not None)
    return orig, packed
