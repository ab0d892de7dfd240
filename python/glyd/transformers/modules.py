"""Packed modules: how a transformers module keeps its weights packed.

Glyd does not re-implement the math of any model. A module whose weights are
packed keeps its own class, ``forward``, activation and gating; Glyd only takes
the packed parameters out of ``_parameters`` and puts a :class:`PackedWeight`
child in their place (``q_proj.weight`` -> ``q_proj.packed_weight``,
``experts.gate_up_proj`` -> ``experts.packed_gate_up``). Reading the old
attribute (``module.weight``, ``experts.gate_up_proj``) returns the weight
decoded to its exact bf16 bits, so every line of the family's code, including
code that reads ``.weight`` directly (routers, Mamba projections, LongCat's
classifier), runs unchanged and gives bit-identical results on the CPU.

How the weight is decoded (dispatch, per call):

* planes on the meta device -> a meta tensor of the right shape and dtype;
* planes on the CPU -> libglyd decodes. Linear weights are cached by default
  (decoded once, reused: the CPU runs at bf16 speed); expert weights are decoded
  per call, and only the experts the tokens are routed to (``unpack_group``)
  into a scratch buffer shared by the layers;
* planes on a GPU -> the hooks :data:`GPU_HOOKS` (filled by the CUDA code):
  ``"linear"(module, x)`` replaces GlydLinear's forward (it handles ``exact``
  itself: glyd.transformers.gpu_linear); ``"embedding"(module, ids)`` replaces
  GlydEmbedding's forward (the looked-up rows decoded, bit-exact:
  gpu_embedding); ``"experts"(module, *args, **kwargs)``
  replaces the whole forward when ``module.exact`` is False; ``"decode"(holder, groups)``
  decodes planes on the device. Without hooks the planes are copied to the CPU,
  decoded there and the bf16 weight is cached on the GPU (decode-on-load).

``exact=True`` (a flag on every packed module) always takes the decode path:
decode to bf16, then the very torch op of the bf16 model (D9 of the design).
"""

from __future__ import annotations

import contextlib
import copyreg
import inspect
import re
import threading
import weakref
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from ..tensor import PLANE_NAMES, PackedTensor

#: Hooks for the GPU path, filled by the CUDA code (glyd.gpu):
#:   "linear":  fn(module: GlydLinear, x) -> y         fused decode+matmul, or exact
#:              (decode just in time + F.linear) when module.exact (gpu_linear.py)
#:   "embedding": fn(module: GlydEmbedding, ids) -> rows   the looked-up rows decoded
#:              (gpu_embedding.py)
#:   "experts": fn(module, *args, **kwargs) -> y        fused experts forward
#:   "decode":  fn(holder: PackedWeight, groups) -> bf16 tensor on the planes' device
#: and, for experts (glyd.transformers.gpu_experts):
#:   "decode_groups": fn(holder, groups) -> the expert weights with `groups` (None: all)
#:                    decoded on the device, in a scratch buffer (experts decoded per call)
#:   "routed_groups": fn(module, args, kwargs) -> the experts a call reads (list), or None
#:   "attach":        fn(model) -> None: patch modules whose routing lives outside the
#:                    packed module (DBRX), called once the model is loaded
#:   "relayout":      fn(holder, relaid: bool) -> planes: every group transposed, on the
#:                    device (gpu_relayout; PackedWeight.relay)
GPU_HOOKS: dict = {"linear": None, "embedding": None, "experts": None, "decode": None, "decode_groups": None,
                   "routed_groups": None, "attach": None, "relayout": None}

#: Names of the attributes a packed tensor replaces, and the child that holds
#: it. The child names avoid the substrings transformers' checkpoint conversions
#: search for (``gate_up_proj``, ``down_proj``, ``experts.N.``).
_ALIASES = {"gate_up_proj": "gate_up", "down_proj": "down", "up_proj": "up", "gate_proj": "gate"}


def holder_name(attr: str) -> str:
    """Child-module name holding the packed form of parameter ``attr``."""
    return "packed_" + _ALIASES.get(attr, attr)


def packed_tensor_name(module_name: str, attr: str) -> str:
    """Name of the packed tensor of ``module_name.attr`` in a checkpoint; its
    planes are ``f"{name}.glyd_{plane}"`` = the holder's parameters."""
    return f"{module_name}.{holder_name(attr)}" if module_name else holder_name(attr)


class PackedWeight(nn.Module):
    """Holds one packed tensor: its byte planes as uint8 parameters
    (``glyd_sm``, ``glyd_code``, ...) plus what the descriptor says of it.

    ``relaid``: on a GPU, the planes may hold the arrangement the kernels read
    best instead of the stored one (gpu_relayout): experts stored transposed
    every group transposed (``device_shape``; set by prepare_experts), the
    weight of a fused linear its sm and code planes in 16-row x 64-column
    tiles (``tiled``; set by gpu_linear the first time it runs on a GPU).
    Everything that takes the planes elsewhere sees the stored arrangement:
    ``packed()``, ``state_dict()``, pickling and copies, ``.to()`` another
    device, and the decoded weight. Planes put in place from outside (an
    accelerate offload hook added after loading copies the stored planes in at
    every call) end it: see ``relaid``."""

    def __init__(self, attr: str, layout: str, dtype: torch.dtype, shape, groups, checksum: int,
                 plane_lengths: dict, device="meta", scratch_key: str = ""):
        super().__init__()
        self.attr = attr
        self.layout = layout
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.groups = list(groups)
        self.checksum = int(checksum)
        self.compute_dtype: Optional[torch.dtype] = None  # cast after decoding (from_pretrained(dtype=...))
        self.cache_decoded = True
        self.cache_armed = False  # set once the planes hold their final data (after loading)
        self.scratch_key = scratch_key
        for name in PLANE_NAMES:
            if name in plane_lengths:
                p = torch.empty(int(plane_lengths[name]), dtype=torch.uint8, device=device)
                self.register_parameter("glyd_" + name, nn.Parameter(p, requires_grad=False))
        self._packed: Optional[PackedTensor] = None
        self._packed_key = None
        self._decoded: Optional[torch.Tensor] = None
        self._decoded_key = None

    def __getstate__(self):
        # copy.deepcopy and pickling keep the planes, not the caches built from
        # them (the PackedTensor view holds ctypes pointers): a copy rebuilds
        # them from its own planes, in the stored orientation.
        state = self.__dict__.copy()
        state.update(_packed=None, _packed_key=None, _decoded=None, _decoded_key=None)
        if self.relaid:
            params = state["_parameters"] = dict(state["_parameters"])
            for k, v in self.stored_planes().items():
                if params.get("glyd_" + k) is not None:
                    params["glyd_" + k] = nn.Parameter(v, requires_grad=False)
            state.pop("_glyd_relay_checked", None)  # the copy is re-laid again where it runs
        state.pop("_glyd_relaid_planes", None)
        state.pop("relaid", None)  # holders pickled before it was a property
        return state

    @classmethod
    def from_packed(cls, attr: str, packed: PackedTensor, scratch_key: str = "") -> "PackedWeight":
        """A holder around an existing PackedTensor (used when packing in memory)."""
        planes = packed.planes
        h = cls(attr, packed.layout, packed.dtype, packed.shape, packed.groups, packed.checksum,
                {k: v.numel() for k, v in planes.items()}, device="cpu", scratch_key=scratch_key)
        for k, v in planes.items():
            getattr(h, "glyd_" + k).data = v
        h._packed, h._packed_key = packed, h._planes_key()
        h.cache_armed = True
        return h

    # ---- the packed tensor ---------------------------------------------------------
    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @property
    def device(self) -> torch.device:
        return self.glyd_sm.device

    def planes(self) -> dict:
        out = {}
        for name in PLANE_NAMES:
            p = self._parameters.get("glyd_" + name)
            ok = p is not None and (p.numel() > 0 or p.device == self.device)
            out[name] = p.data if ok else torch.empty(0, dtype=torch.uint8, device=self.device)
        return out

    def materialize_empty_planes(self) -> None:
        """Empty planes (e.g. no escapes) hold no bytes to load, so transformers leaves
        them on the meta device: give them a real empty tensor beside the others."""
        dev = self.device
        for name, p in self._parameters.items():
            if p is not None and p.numel() == 0 and p.device != dev:
                self._parameters[name] = nn.Parameter(torch.empty(0, dtype=torch.uint8, device=dev),
                                                      requires_grad=False)

    def _planes_key(self):
        return tuple((p.data_ptr(), p.numel(), p.device) for p in self._parameters.values()) + (self.relaid,)

    # ---- the planes' arrangement on a GPU (gpu_relayout) -------------------------------
    @property
    def relaid(self) -> bool:
        """The planes hold the kernels' arrangement (relay). Only while they are
        the very tensors relay() put in place: planes that something else put
        there (an accelerate offload hook added after loading, which copies
        the state dict's stored planes in at every call) hold the stored
        arrangement, so the holder takes them as such and keeps it from then
        on (``_glyd_keep_stored``), instead of reading them as re-laid."""
        mine = self.__dict__.get("_glyd_relaid_planes")
        if mine is None:
            return False
        sm = self._parameters["glyd_sm"]
        if mine[0]() is sm and mine[1] == sm.data_ptr():
            return True
        del self.__dict__["_glyd_relaid_planes"]
        self.__dict__["_glyd_keep_stored"] = True
        self._decoded = None
        return False

    def _plane_identity(self) -> tuple:
        # The sm plane's parameter object (weakly: a swapped-out plane must be
        # freed) and storage: accelerate replaces every plane's parameter,
        # `p.data = ...` the storage; either means the planes are no longer
        # the re-laid ones. One plane is checked: the property runs at every
        # call of the module (0.3 us on the dev CPU, against 1.2 for all five).
        sm = self._parameters["glyd_sm"]
        return weakref.ref(sm), sm.data_ptr()

    @property
    def tiled(self) -> bool:
        """A relaid matrix: its sm and code planes in 16-row x 64-column tiles."""
        return self.relaid and len(self.shape) == 2

    @property
    def device_shape(self) -> tuple:
        """The shape the planes hold: shape, with the last two axes swapped while
        relaid experts."""
        s = self.shape
        return (*s[:-2], s[-1], s[-2]) if self.relaid and not self.tiled else s

    def relay(self, relaid: bool) -> None:
        """Re-lay the planes in place on their GPU: relaid=True the kernels'
        arrangement (experts: every group transposed; a matrix: tiled), False
        the stored one. Exact (a permutation of each group's elements); the old
        planes are freed once the new ones exist. A matrix whose shape has no
        tiled arrangement stays as it is."""
        if bool(relaid) == self.relaid:
            return
        fn = GPU_HOOKS.get("relayout")
        if fn is None:
            raise RuntimeError("glyd: re-laying packed planes needs the GPU code (glyd._gpu)")
        planes = fn(self, bool(relaid))
        if planes is None:
            return
        for k, v in planes.items():
            if self._parameters.get("glyd_" + k) is not None:
                self._parameters["glyd_" + k] = nn.Parameter(v, requires_grad=False)
        if relaid:
            self.__dict__["_glyd_relaid_planes"] = self._plane_identity()
        else:
            self.__dict__.pop("_glyd_relaid_planes", None)
        self._decoded = None

    def stored_planes(self) -> dict:
        """The planes in the stored orientation, on their device (new tensors
        while relaid, else the planes themselves)."""
        if not self.relaid:
            return self.planes()
        return GPU_HOOKS["relayout"](self, False)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        if not self.relaid or getattr(_STATE_AS_HELD, "on", False):
            return super()._save_to_state_dict(destination, prefix, keep_vars)
        for k, v in self.stored_planes().items():
            if self._parameters.get("glyd_" + k) is not None:
                destination[prefix + "glyd_" + k] = v

    def _load_from_state_dict(self, *args, **kwargs):
        self.relay(False)  # loaded planes are in the stored orientation
        self.__dict__.pop("_glyd_relay_checked", None)  # re-laid again at the next use, if wanted
        return super()._load_from_state_dict(*args, **kwargs)

    def packed(self) -> PackedTensor:
        """The planes as a glyd.PackedTensor (CPU planes wrapped without a copy;
        GPU planes copied to the CPU; stored orientation)."""
        key = self._planes_key()
        if self._packed is None or self._packed_key != key:
            planes = {k: v.detach().cpu() for k, v in self.stored_planes().items()}
            self._packed = PackedTensor.from_planes(self.layout, self.dtype, self.shape, self.groups, planes,
                                                    self.checksum)
            self._packed_key = key
        return self._packed

    def verify(self) -> None:
        """Decode and compare with the checksum of the original bytes (ChecksumError)."""
        self.packed().verify()

    # ---- decoding ----------------------------------------------------------------------
    def _group_view(self, t: torch.Tensor) -> torch.Tensor:
        # view[g] is group g (one expert), contiguous, shaped as unpack_group returns it:
        # shape[1:] for one group per index of axis 0, else (rows, *shape[1:]) (DBRX's 2-D w1/v1/w2).
        g = self.num_groups
        rows = self.shape[0] // g
        return t if rows == 1 else t.view(g, rows, *self.shape[1:])

    def decode(self, groups=None) -> torch.Tensor:
        """The weight in its original dtype (or compute_dtype), on the planes' device.

        groups: None for all of it; else the groups (experts) that must be right,
        the others hold stale values (the caller routes no token to them)."""
        dev = self.device
        if dev.type == "meta":
            return torch.empty(self.shape, dtype=self.compute_dtype or self.dtype, device="meta")
        key = self._planes_key()
        if self._decoded is not None and self._decoded_key == key:
            return self._decoded
        if groups is not None and self.num_groups > 1 and not self.cache_decoded and dev.type == "cpu":
            return self._decode_groups(groups)
        dg = GPU_HOOKS.get("decode_groups")
        if dg is not None and dev.type == "cuda" and self.num_groups > 1 and not self.cache_decoded:
            w = dg(self, groups)
            if self.compute_dtype is not None and w.dtype != self.compute_dtype:
                w = w.to(self.compute_dtype)
            return w
        hook = GPU_HOOKS.get("decode")
        if self.relaid and not self.tiled:  # decode_groups turns the groups back (its buffer is shared: copy it)
            w = dg(self, None).clone()
        elif dev.type != "cpu" and hook is not None:
            w = hook(self, None)
        else:
            w = self.packed().unpack()
            if dev.type != "cpu":
                w = w.to(dev)
        if self.compute_dtype is not None and w.dtype != self.compute_dtype:
            w = w.to(self.compute_dtype)
        if self.cache_armed and (self.cache_decoded or dev.type != "cpu"):
            self._decoded, self._decoded_key = w, key
        return w

    def _decode_groups(self, groups) -> torch.Tensor:
        buf = _scratch(self.scratch_key, self.shape, self.dtype)
        view = self._group_view(buf)
        p = self.packed()
        n = self.num_groups
        for g in groups:  # ids >= n are EP sentinels or LongCat's zero experts: no weights
            g = int(g)
            if 0 <= g < n:
                p.unpack_group(g, out=view[g])
        if self.compute_dtype is not None and buf.dtype != self.compute_dtype:
            return buf.to(self.compute_dtype)
        return buf

    def drop_cache(self) -> None:
        self._decoded = None

    def extra_repr(self) -> str:
        return (f"attr={self.attr!r}, layout={self.layout}, shape={self.shape}, dtype={self.dtype}, "
                f"groups={self.num_groups}")

    def _apply(self, fn, recurse=True):
        # .to()/.cuda(): the planes move; a decoded copy would be stale. Relaid
        # planes go elsewhere in the stored orientation.
        self._decoded = None
        if ((self.relaid or "_glyd_relay_checked" in self.__dict__)
                and fn(self.glyd_sm.data[:0]).device != self.device):
            self.relay(False)
            self.__dict__.pop("_glyd_relay_checked", None)  # re-laid again where it goes, if wanted
        return super()._apply(fn, recurse)


_STATE_AS_HELD = threading.local()


@contextlib.contextmanager
def planes_as_held():
    """Within it, state_dict() gives relaid planes as they are, not re-laid back
    (glyd.save_pretrained: it reads the state dict for its keys and raw
    tensors, and takes packed planes from PackedWeight.packed())."""
    prev = getattr(_STATE_AS_HELD, "on", False)
    _STATE_AS_HELD.on = True
    try:
        yield
    finally:
        _STATE_AS_HELD.on = prev


_SCRATCH: dict = {}
_SCRATCH_LOCK = threading.Lock()


def _scratch(key: str, shape, dtype) -> torch.Tensor:
    """A CPU buffer per (role, shape, dtype), shared by the layers: expert
    weights decoded for one call live here until the next layer's call."""
    k = (threading.get_ident(), key, tuple(shape), dtype)
    with _SCRATCH_LOCK:
        buf = _SCRATCH.get(k)
        if buf is None:
            buf = torch.zeros(shape, dtype=dtype)
            _SCRATCH[k] = buf
    return buf


def clear_scratch() -> None:
    """Free the shared expert scratch buffers."""
    with _SCRATCH_LOCK:
        _SCRATCH.clear()


# ---- packed modules ------------------------------------------------------------------------

class GlydModule:
    """Mixin of every packed module: attributes named in ``_glyd_attrs`` decode
    from their PackedWeight child. ``exact`` selects the decode-then-torch path."""

    exact: bool = False
    # Packed weights come from the checkpoint: transformers' weight init must skip
    # these modules (it would decode the weights only to overwrite them, slowly).
    _is_hf_initialized = True

    def __getattr__(self, name):
        d = self.__dict__
        attrs = d.get("_glyd_attrs")
        if attrs is not None and name in attrs:
            holder = d["_modules"][attrs[name]]
            return holder.decode(d.get("_glyd_active"))
        return super().__getattr__(name)

    def glyd_weights(self) -> dict:
        """attr -> PackedWeight of this module."""
        return {a: self._modules[h] for a, h in self.__dict__["_glyd_attrs"].items()}


class GlydLinear(GlydModule, nn.Linear):
    """nn.Linear whose weight is packed. CPU: F.linear on the decoded bf16 weight
    (identical to nn.Linear); GPU: the "linear" hook, which honours ``exact``
    (glyd.transformers.gpu_linear: fused kernel, or decode just in time + F.linear)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        hook = GPU_HOOKS.get("linear")
        if hook is not None and input.device.type == "cuda":
            return hook(self, input)
        return F.linear(input, self.weight, self.bias)


class GlydEmbedding(GlydModule, nn.Embedding):
    """nn.Embedding whose table is packed. CPU: F.embedding on the decoded table
    (identical to nn.Embedding); GPU: the "embedding" hook
    (glyd.transformers.gpu_embedding: only the looked-up rows are decoded,
    bit-exact, so the default and exact paths are one)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        hook = GPU_HOOKS.get("embedding")
        if hook is not None and input.device.type == "cuda":
            return hook(self, input)
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)


class GlydExperts(GlydModule):
    """Mixin for experts modules: the family's own forward runs; when its call
    names the routed experts (``forward(hidden_states, top_k_index,
    top_k_weights)``, the v5 experts signature), only those are decoded."""

    _glyd_routing_arg: Optional[int] = None  # position of top_k_index in forward's args

    def forward(self, *args, **kwargs):
        cuda = bool(args) and torch.is_tensor(args[0]) and args[0].device.type == "cuda"
        hook = GPU_HOOKS.get("experts")
        if hook is not None and not self.exact and cuda:
            return hook(self, *args, **kwargs)
        routed = GPU_HOOKS.get("routed_groups") if cuda else None
        if routed is not None:  # exact on a GPU: decode only the experts this call reads
            groups = routed(self, args, kwargs)
            if groups is None:  # unknown here (e.g. set by a parent module): leave it
                return super().forward(*args, **kwargs)
            prev = self.__dict__.get("_glyd_active")
            self.__dict__["_glyd_active"] = groups
            try:
                return super().forward(*args, **kwargs)
            finally:
                self.__dict__["_glyd_active"] = prev
        pos = self._glyd_routing_arg
        if pos is None:
            return super().forward(*args, **kwargs)
        idx = args[pos] if len(args) > pos else next(
            (kwargs[k] for k in _ROUTING_NAMES if k in kwargs), None)
        if idx is None or not torch.is_tensor(idx) or idx.device.type == "meta":
            return super().forward(*args, **kwargs)
        self.__dict__["_glyd_active"] = _RoutedGroups(idx)
        try:
            return super().forward(*args, **kwargs)
        finally:
            self.__dict__["_glyd_active"] = None


class _RoutedGroups:
    """The experts named by a routing tensor, computed once per call."""

    def __init__(self, idx: torch.Tensor):
        self.idx = idx
        self._list = None

    def __iter__(self):
        if self._list is None:
            self._list = torch.unique(self.idx.detach().reshape(-1)).tolist()
        return iter(self._list)


_CLASS_CACHE: dict = {}


class _PackedClass(type):
    """Metaclass of the subclasses packed_class makes at load. They live in no
    module, so pickle cannot find them by name; they are pickled as the call
    that makes them, packed_class(base, experts) (copyreg below), and
    torch.save / pickle of a model with packed modules works."""


copyreg.pickle(_PackedClass, lambda c: (packed_class, (c._glyd_base, c._glyd_experts)))


def _routing_arg_position(cls) -> Optional[int]:
    try:
        sig = inspect.signature(cls.forward)
    except (TypeError, ValueError):
        return None
    names = [p for p in sig.parameters if p != "self"]
    if len(names) >= 3 and names[1] in _ROUTING_NAMES:
        return 1
    return None


#: Names of the routing argument of experts forwards (v5: top_k_index; gpt-oss: router_indices).
_ROUTING_NAMES = ("top_k_index", "router_indices", "selected_experts", "top_k_indices")


def packed_class(cls: type, experts: bool) -> type:
    """The packed subclass of a module class (cached): GlydLinear for nn.Linear,
    GlydEmbedding for nn.Embedding, Glyd<Class> = (GlydExperts|GlydModule,
    Class) for the others."""
    if cls is nn.Linear:
        return GlydLinear
    if cls is nn.Embedding:
        return GlydEmbedding
    if issubclass(cls, GlydModule):
        return cls
    key = (cls, experts)
    new = _CLASS_CACHE.get(key)
    if new is None:
        bases = (GlydExperts, cls) if experts else (GlydModule, cls)
        ns = {"__module__": __name__, "__qualname__": "Glyd" + cls.__name__,
              "_glyd_base": cls, "_glyd_experts": experts}
        if experts:
            ns["_glyd_routing_arg"] = _routing_arg_position(cls)
        new = _PackedClass("Glyd" + cls.__name__, bases, ns)
        _CLASS_CACHE[key] = new
    return new


_DIGITS = re.compile(r"\.\d+(?=\.|$)")


def scratch_key(module_name: str, attr: str) -> str:
    """Role of a tensor, the same for every layer: model.layers.*.mlp.experts.gate_up_proj."""
    return _DIGITS.sub(".*", f"{module_name}.{attr}")


def install(module: nn.Module, module_name: str, holders: dict, experts: bool, exact: bool = False) -> nn.Module:
    """Make ``module`` a packed module in place: remove the parameters named in
    ``holders`` (attr -> PackedWeight) and add the holders as children."""
    attrs = dict(module.__dict__.get("_glyd_attrs") or {})
    for attr, holder in holders.items():
        old = module._parameters.get(attr)
        if old is None:
            old = module._buffers.get(attr)
        if old is not None and tuple(old.shape) != tuple(holder.shape):
            from ..errors import CorruptError

            raise CorruptError(12, f"packed tensor {packed_tensor_name(module_name, attr)!r} has shape "
                                   f"{tuple(holder.shape)}, but {type(module).__name__} at {module_name!r} "
                                   f"expects {tuple(old.shape)} from the model's configuration")
        if attr in module._parameters:
            del module._parameters[attr]
        elif attr in module._buffers:
            del module._buffers[attr]
        hname = holder_name(attr)
        module._modules[hname] = holder
        attrs[attr] = hname
    module.__dict__["_glyd_attrs"] = attrs
    module.__dict__["_glyd_active"] = None
    module.__class__ = packed_class(type(module), experts)
    module.exact = exact
    return module


def iter_packed_modules(model: nn.Module):
    """(name, module) of every packed module of a model."""
    for name, m in model.named_modules():
        if isinstance(m, GlydModule):
            yield name, m


def set_exact(model: nn.Module, exact: bool) -> None:
    """Switch every packed module of model to exact=True (decode + the bf16
    model's torch ops) or the default path. Experts re-laid for the kernels
    (PackedWeight.relaid) go back to the stored orientation that the exact path
    reads, and are re-laid at the next default call: capture CUDA graphs after
    switching."""
    for _, m in iter_packed_modules(model):
        m.exact = exact
        for h in m.glyd_weights().values():
            if exact:
                h.relay(False)
            h.__dict__.pop("_glyd_relay_checked", None)


def attach(model: nn.Module) -> None:
    """Run the "attach" hook on a loaded model (see GPU_HOOKS), after
    keep_stored."""
    keep_stored(model)
    fn = GPU_HOOKS.get("attach")
    if fn is not None:
        fn(model)


def keep_stored(model: nn.Module) -> None:
    """Mark the packed weights of ``model`` whose planes an accelerate offload
    hook (``device_map`` with "cpu" or "disk") puts in place at every call:
    their planes keep the stored arrangement (``PackedWeight.relay`` would be
    undone by the hook's next copy, and the kernels would read stored planes
    as re-laid). A hook added after loading is caught at the first call it
    swaps the planes (``PackedWeight.relaid``)."""
    for m in model.modules():
        hook = getattr(m, "_hf_hook", None)
        hooks = getattr(hook, "hooks", None) or ([hook] if hook is not None else [])
        if any(getattr(h, "offload", False) for h in hooks):
            for sub in m.modules():
                if isinstance(sub, PackedWeight):
                    sub.__dict__["_glyd_keep_stored"] = True


def _register_gpu_experts() -> None:
    try:
        from . import gpu_experts
    except Exception:  # pragma: no cover - the CPU path never needs it
        return
    gpu_experts.register()


_register_gpu_experts()
