"""Glyd's GPU kernels through ctypes: decode packed tensors on the GPU and run
linear layers straight from packed weights.

The symbols are the glyd_gpu_* functions of include/glyd.h (declared here on
first use, on the library that glyd._lib loads). Every call enqueues work on
the current torch stream of the tensors' device and returns without
synchronizing, so it can be captured in CUDA graphs.

    dw = DeviceTensor(glyd.pack(w_cpu))     # planes copied to the GPU once
    p = pack(w_cuda)                         # packed on the GPU: == glyd.pack(w_cuda.cpu())
    w = dw.decode()                          # bf16, bit-identical to glyd.unpack
    t = dw.decode_rows(row0, rows)           # rows [row0, row0 + rows) of it, bit-identical
    y = dw.linear(x, bias)                   # y = x @ w.T + bias, w never materialized whole

DeviceTensor.linear has two paths (the one choice, shared by
glyd.transformers.gpu_linear):
  - fewer than PROMPT_ROWS rows of x (decode steps, small batches): Glyd's
    fused kernel (glyd_gpu_linear) decodes the weight in registers inside the
    matmul; the bf16 weight is never written to memory;
  - PROMPT_ROWS rows or more (prompts, large batches), fixed12 2-D weights:
    the prompt path. The weight is decoded a tile of rows at a time
    (decode_rows, bit-exact) into a bf16 workspace, and each tile is
    multiplied by cuBLAS (torch.mm / torch.addmm writing straight into its
    column slice of the output). The extra work is the decode (1.5 bytes per
    weight read, 2 written). Tiles are large (PROMPT_TILE_MB, 256 MiB: a whole
    Qwen3-8B weight) because cuBLAS needs wide GEMMs to fill the GPU: on the
    H200, L2-sized tiles (12-15 MiB) cost 35-50% more at 512 tokens than one
    whole-weight tile (docs/PERFORMANCE.md). At most one tile of a layer is
    decoded at a time.
  PROMPT_ROWS is by default SM90_PROMPT_ROWS (769) on sm_90 GPUs (H100,
  H200: the fused prompt tiles beat this path to 512 rows, 5.53 vs 5.76 ms for
  12 Qwen3-8B layers at 512, and lose from 1,024) and 65 on the others (the
  mma.sync kernel and this path tie at 64 rows, 2.73 vs 2.77x bf16, measured
  on the H200); environment GLYD_PROMPT_ROWS, read at import,
  0 = never; set_prompt_rows() for benchmarks. GLYD_PROMPT_TILE_MB
  / set_prompt_tile_mb() set the tile size.

Mixtures of experts (glyd.transformers.gpu_experts) add four kernels around the
grouped linear, none of which synchronizes with the host:

    offs, tok, rows = moe_route(ids, topk, experts)   # pairs sorted by expert
    h = moe_silu_mul(proj)                            # silu(gate) * up, torch's bf16 bits
    out = moe_combine(x, d, w, ids, rows, experts)    # weighted sum per token, slot order
    ids = moe_row_experts(x, rows_per_expert)         # Llama 4: the expert of each non-zero row

On sm_90 the fused kernels are programmatic dependent launches (each starts in
its predecessor's tail); GLYD_PDL=0 launches them plainly.
"""

from __future__ import annotations

import ctypes
import os
import threading
import warnings
from ctypes import POINTER, c_char, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p

import torch

from . import _lib
from .errors import InvalidArgumentError

__all__ = ["DeviceTensor", "MultiLinear", "available", "describe", "device_info", "linear_kernel", "linear_split", "linear_configs", "force_kernel", "pack",
           "pack_planes", "pack_device", "set_prompt_rows", "prompt_rows", "set_prompt_tile_mb", "PROMPT_KERNEL", "moe_route",
           "moe_combine", "moe_silu_mul", "moe_row_experts", "moe_top1", "moe_gather_scale"]

LAYOUT_FIXED12 = 1
LAYOUT_SMALLEST = 2
LAYOUT_FIXED12_TILED = 3  # device planes only: fixed12 with sm and code in 16-row x 64-k tiles (DeviceTensor.tile)
DTYPE_BF16 = 1


class GpuInfo(ctypes.Structure):
    """struct glyd_gpu_info."""

    _fields_ = [
        ("name", c_char * 256),
        ("cc_major", c_int),
        ("cc_minor", c_int),
        ("multiprocessors", c_int),
        ("shared_optin", c_int),
        ("shared_per_sm", c_int),
        ("l2_bytes", c_int),
        ("clock_khz", c_int),
        ("mem_clock_khz", c_int),
        ("bus_width", c_int),
        ("driver_version", c_int),
        ("total_mem", c_uint64),
    ]


class GpuTensor(ctypes.Structure):
    """struct glyd_gpu_tensor."""

    _fields_ = [
        ("layout", c_int),
        ("dtype", c_int),
        ("ndim", c_size_t),
        ("shape", c_int64 * _lib.MAX_DIMS),
        ("groups", POINTER(_lib.Group)),
        ("num_groups", c_size_t),
        ("planes", c_void_p * _lib.NUM_PLANES),
        ("esc_rows", c_void_p),
    ]


_T = POINTER(GpuTensor)
_SIGNATURES = {
    "glyd_gpu_init": (c_int, []),
    "glyd_gpu_device_count": (c_int, [POINTER(c_int)]),
    "glyd_gpu_device_info": (c_int, [c_int, POINTER(GpuInfo)]),
    "glyd_gpu_decode": (c_int, [c_int, c_void_p, _T, c_int64, c_void_p, c_size_t]),
    "glyd_gpu_decode_rows": (c_int, [c_int, c_void_p, _T, c_int64, c_int64, c_void_p, c_size_t]),
    "glyd_gpu_decode_gather": (c_int, [c_int, c_void_p, _T, c_void_p, c_int64, c_void_p, c_size_t]),
    "glyd_gpu_tile": (c_int, [c_int, c_void_p, _T, c_void_p, c_void_p]),
    "glyd_gpu_escape_index_bytes": (c_int, [_T, POINTER(c_size_t)]),
    "glyd_gpu_build_escape_index": (c_int, [c_int, c_void_p, _T, c_void_p, c_size_t]),
    "glyd_gpu_linear_workspace_bound": (c_int, [_T, c_int64, POINTER(c_size_t)]),
    "glyd_gpu_linear": (c_int, [c_int, c_void_p, c_void_p, c_int64, _T, c_void_p, c_void_p, c_void_p, c_size_t]),
    "glyd_gpu_linear_many_workspace_bound": (c_int, [_T, c_size_t, c_int64, POINTER(c_size_t)]),
    "glyd_gpu_linear_many": (c_int, [c_int, c_void_p, c_void_p, c_int64, _T, c_size_t, POINTER(c_void_p), c_void_p,
                                     c_void_p, c_size_t]),
    "glyd_gpu_linear_kernel": (c_int, [c_int, _T, c_int64, POINTER(c_char_p)]),
    "glyd_gpu_linear_split": (c_int, [c_int, _T, c_int64, POINTER(c_int), POINTER(c_int)]),
    "glyd_gpu_force_kernel": (c_int, [c_char_p]),
    "glyd_gpu_linear_configs": (c_int, [POINTER(c_char_p)]),
    "glyd_gpu_pack_workspace_bytes": (c_int, [c_int, c_int, POINTER(c_int64), c_size_t, c_int64, POINTER(c_size_t)]),
    "glyd_gpu_pack_bound": (c_int, [c_int, c_void_p, c_void_p, c_int, c_int, POINTER(c_int64), c_size_t, c_int64,
                                    c_void_p, c_size_t, POINTER(c_uint64)]),
    "glyd_gpu_pack": (c_int, [c_int, c_void_p, c_void_p, c_int, c_int, POINTER(c_int64), c_size_t, c_int64,
                              c_void_p, c_size_t, POINTER(c_void_p), POINTER(c_uint64), POINTER(_lib.Group),
                              POINTER(ctypes.c_uint32)]),
    "glyd_gpu_experts_table_bytes": (c_int, [_T, POINTER(c_size_t)]),
    "glyd_gpu_build_experts_table": (c_int, [c_int, c_void_p, _T, c_void_p, c_size_t]),
    "glyd_gpu_decode_experts": (c_int, [c_int, c_void_p, _T, c_void_p, c_void_p, c_size_t]),
    "glyd_gpu_experts_workspace_bound": (c_int, [_T, c_int64, c_int, POINTER(c_size_t)]),
    "glyd_gpu_linear_experts": (c_int, [c_int, c_void_p, c_void_p, c_int64, _T, c_int, c_void_p, c_void_p, c_void_p,
                                        c_void_p, c_void_p, c_size_t]),
    "glyd_gpu_moe_route": (c_int, [c_int, c_void_p, c_void_p, c_int64, c_int64, c_int64, c_int64, c_void_p, c_void_p,
                                   c_void_p]),
    "glyd_gpu_moe_combine": (c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_int64,
                                     c_int64, c_int64, c_int64, c_int64, c_void_p]),
    "glyd_gpu_moe_silu_mul": (c_int, [c_int, c_void_p, c_void_p, c_int64, c_int64, c_void_p]),
    "glyd_gpu_moe_row_experts": (c_int, [c_int, c_void_p, c_void_p, c_int64, c_int64, c_int64, c_void_p]),
    "glyd_gpu_moe_top1": (c_int, [c_int, c_void_p, c_void_p, c_int64, c_int64, c_void_p, c_void_p]),
    "glyd_gpu_moe_gather_scale": (c_int, [c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_int64, c_int64,
                                          c_void_p]),
}

_lock = threading.Lock()
_declared = None


def _gpu():
    """libglyd with the glyd_gpu_* symbols declared."""
    global _declared
    if _declared is not None:
        return _declared
    with _lock:
        if _declared is None:
            lib = _lib.load()
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _declared = lib
    return _declared


def available() -> bool:
    """True if libglyd finds a CUDA driver and at least one device."""
    try:
        lib = _gpu()
        n = c_int()
        return lib.glyd_gpu_init() == 0 and lib.glyd_gpu_device_count(ctypes.byref(n)) == 0 and n.value > 0
    except Exception:
        return False


def device_info(device: int = 0) -> dict:
    """Properties of a CUDA device as libglyd's driver layer sees them."""
    lib = _gpu()
    info = GpuInfo()
    _lib.check(lib.glyd_gpu_device_info(device, ctypes.byref(info)))
    d = {k: getattr(info, k) for k, _ in GpuInfo._fields_}
    d["name"] = info.name.decode()
    return d


def describe() -> str:
    """One line saying which GPU Glyd would use, or why none."""
    lib = _gpu()
    st = lib.glyd_gpu_init()
    if st != 0:
        return "no GPU: " + lib.glyd_last_error().decode("utf-8", "replace")
    n = c_int()
    _lib.check(lib.glyd_gpu_device_count(ctypes.byref(n)))
    if n.value == 0:
        return "no GPU: the CUDA driver reports no device"
    d = device_info(0)
    v = d["driver_version"]
    return (f"{d['name']} (compute capability {d['cc_major']}.{d['cc_minor']}, {d['multiprocessors']} SMs, "
            f"{d['total_mem'] / 2**30:.0f} GiB; driver supports CUDA {v // 1000}.{v % 1000 // 10}); {n.value} device(s)")


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


# ---- the prompt path of DeviceTensor.linear -------------------------------------------------------

def _env_number(name: str, default, kind, minimum):
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        x = kind(v)
        if x < minimum:
            raise ValueError(v)
        return x
    except ValueError:
        warnings.warn(f"glyd: ignoring {name}={v!r} (want a number >= {minimum}); using {'the default' if default is None else default}", stacklevel=2)
        return default


#: Rows of x (tokens) from which DeviceTensor.linear takes the prompt path
#: (decode_rows tiles + cuBLAS) instead of the fused kernel; 0 = never, None =
#: the GPU's default (prompt_rows()). Environment GLYD_PROMPT_ROWS (read at
#: import); set_prompt_rows() at run time.
PROMPT_ROWS: int | None = _env_number("GLYD_PROMPT_ROWS", None, int, 0)
#: The default of prompt_rows() on sm_90: Glyd's prompt tiles (t128 to 128
#: rows, t256 beyond) beat decode tiles + cuBLAS at 128-512 rows and lose
#: from 1,024 (Qwen3-8B shapes on the H200, session 11).
SM90_PROMPT_ROWS = 769
#: MiB of bf16 weight rows per tile of the prompt path.
#: Environment GLYD_PROMPT_TILE_MB; set_prompt_tile_mb().
PROMPT_TILE_MB: float = _env_number("GLYD_PROMPT_TILE_MB", 256.0, float, 1e-9)
#: What linear_kernel() reports for the prompt path.
PROMPT_KERNEL = "decode tiles + cuBLAS"
#: Tiles hold a multiple of this many weight rows (and at least this many).
TILE_ROW_MULTIPLE = 128
#: Whether the fused linears' weights get their planes tiled when they are
#: placed on a GPU (DeviceTensor.tile; glyd.transformers.gpu_relayout).
#: Environment GLYD_TILED=0 keeps them row-major.
TILED: bool = os.environ.get("GLYD_TILED", "").strip().lower() not in ("0", "false", "no")

_FORCED = [False]  # force_kernel(name) benchmarks the fused kernel: no prompt path then
_FORCE_GEN = [0]  # bumped by force_kernel: the workspace bounds cached per row count depend on the kernel


def set_prompt_rows(rows: int | None) -> int | None:
    """Rows from which linear() takes the prompt path (0 = never, None = the GPU's
    default). Returns the previous value. For benchmarks and tuning; not
    thread-safe with concurrent linear() calls."""
    global PROMPT_ROWS
    if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 0):
        raise InvalidArgumentError(1, f"prompt rows must be an integer >= 0 or None, not {rows!r}")
    old, PROMPT_ROWS = PROMPT_ROWS, rows
    return old


_DEFAULT_PROMPT_ROWS: dict[int, int] = {}  # by CUDA device index: linear() asks on every call


def prompt_rows(device: "torch.device | int | None" = None) -> int:
    """The rows from which linear() on `device` takes the prompt path (0 = never):
    PROMPT_ROWS if set, else SM90_PROMPT_ROWS on sm_90 GPUs (the wgmma and
    prompt-tile kernels) and 65 on others."""
    if PROMPT_ROWS is not None:
        return PROMPT_ROWS
    if isinstance(device, int):
        index = device
    else:
        index = None if device is None else torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
    rows = _DEFAULT_PROMPT_ROWS.get(index)
    if rows is None:
        rows = SM90_PROMPT_ROWS if torch.cuda.get_device_capability(index) == (9, 0) else 65
        _DEFAULT_PROMPT_ROWS[index] = rows
    return rows


def set_prompt_tile_mb(mb) -> float:
    """MiB of bf16 weight per tile of the prompt path. Returns the previous value."""
    global PROMPT_TILE_MB
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0:
        raise InvalidArgumentError(1, f"prompt tile MiB must be a number > 0, not {mb!r}")
    old, PROMPT_TILE_MB = PROMPT_TILE_MB, float(mb)
    return old


def tile_rows(k: int) -> int:
    """Weight rows per tile of the prompt path for rows of k bf16 weights:
    PROMPT_TILE_MB over 2*k bytes, rounded down to a multiple of
    TILE_ROW_MULTIPLE, at least TILE_ROW_MULTIPLE."""
    r = int(PROMPT_TILE_MB * 2**20) // (2 * max(int(k), 1)) // TILE_ROW_MULTIPLE * TILE_ROW_MULTIPLE
    return max(r, TILE_ROW_MULTIPLE)


def _check_input(x, k: int, device: torch.device) -> None:
    """The fused linears' input check: x must be bf16 [..., k] on device."""
    if not torch.is_tensor(x) or x.dtype != torch.bfloat16 or x.device != device or x.shape[-1] != k:
        raise InvalidArgumentError(1, f"x must be bfloat16 [..., {k}] on {device}, got "
                                      f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))} "
                                      f"on {getattr(x, 'device', None)}")


def _input_rows(x: torch.Tensor, k: int) -> torch.Tensor:
    """x as the fused kernels read it: [rows, k], contiguous and 16-byte aligned."""
    x2 = x.reshape(-1, k)
    if not x2.is_contiguous() or x2.data_ptr() % 16:
        x2 = x2.clone(memory_format=torch.contiguous_format)  # a fresh block: contiguous and aligned
    return x2


def _cached_bound(bounds: dict, rows: int, query) -> int:
    """bounds[(rows, force generation)], from query(rows, byref(c_size_t)) (a
    glyd_gpu_*workspace_bound call) on a miss. The bound depends on the kernel,
    so force_kernel starts a new generation (a stale bound once failed
    test_linear_every_config)."""
    key = (rows, _FORCE_GEN[0])
    b = bounds.get(key)
    if b is None:
        n = c_size_t()
        _lib.check(query(rows, ctypes.byref(n)))
        b = bounds[key] = n.value
    return b


class DeviceTensor:
    """A packed tensor placed on a CUDA device: its planes as uint8 CUDA tensors
    plus the codec metadata. Made from a glyd.PackedTensor (planes copied once),
    or from planes already on the device (e.g. loaded parameters). tiled: the
    sm and code planes are in the tiled arrangement (tile()), not the stored
    row-major one. esc_rows: the escape index already built for these planes
    (in either arrangement: it does not move), else it is built here."""

    def __init__(self, packed=None, device="cuda", *, layout=None, shape=None, groups=None, planes=None,
                 tiled: bool = False, esc_rows: torch.Tensor | None = None):
        if packed is not None:
            layout, shape, groups = packed.layout, packed.shape, packed.groups
            if packed.dtype != torch.bfloat16:
                raise InvalidArgumentError(1, f"the GPU kernels take bfloat16 tensors, not {packed.dtype}")
            planes = {k: v.to(device, non_blocking=False) for k, v in packed.planes.items()}
        if layout not in ("fixed12", "smallest"):
            raise InvalidArgumentError(1, f"layout {layout!r} has no GPU kernel")
        from .tensor import PLANE_NAMES

        dev = torch.device(device)
        if dev.type != "cuda":
            raise InvalidArgumentError(1, f"DeviceTensor needs a CUDA device, not {dev}")
        self.device = torch.device("cuda", dev.index if dev.index is not None else torch.cuda.current_device())
        self.layout = layout
        self.tiled = bool(tiled)
        if self.tiled and layout != "fixed12":
            raise InvalidArgumentError(1, f"tiled planes are fixed12 planes, not {layout}")
        self.shape = tuple(int(s) for s in shape)
        self.groups = list(groups)
        self.planes = {}
        for name in PLANE_NAMES:
            t = planes.get(name)
            if t is None:
                t = torch.empty(0, dtype=torch.uint8, device=self.device)
            if t.dtype != torch.uint8 or t.device != self.device or not t.is_contiguous():
                raise InvalidArgumentError(1, f"plane {name!r} must be a contiguous uint8 tensor on {self.device}")
            self.planes[name] = t
        self.numel = 1
        for s in self.shape:
            self.numel *= s
        self.escapes = sum(g.escapes for g in self.groups)
        # decode_rows works on it, and linear() may take the prompt path
        self._matrix = (layout == "fixed12" and len(self.shape) == 2 and len(self.groups) == 1
                          and self.shape[0] > 0 and self.shape[1] > 0)

        c = GpuTensor()
        c.layout = LAYOUT_SMALLEST if layout == "smallest" else LAYOUT_FIXED12_TILED if self.tiled else LAYOUT_FIXED12
        c.dtype = DTYPE_BF16
        c.ndim = len(self.shape)
        for i, s in enumerate(self.shape):
            c.shape[i] = s
        self._garr = (_lib.Group * len(self.groups))(*[g._to_c() for g in self.groups])
        c.groups = ctypes.cast(self._garr, POINTER(_lib.Group))
        c.num_groups = len(self.groups)
        for i, name in enumerate(PLANE_NAMES):
            t = self.planes[name]
            c.planes[i] = t.data_ptr() if t.numel() else None
        c.esc_rows = None
        self._c = c
        self._bounds = {}  # workspace_bound per row count
        self.esc_rows = None
        if esc_rows is not None:
            self.esc_rows = esc_rows
            c.esc_rows = esc_rows.data_ptr()
        elif len(self.groups) == 1 and len(self.shape) >= 2 and self.escapes:
            lib = _gpu()
            n = c_size_t()
            _lib.check(lib.glyd_gpu_escape_index_bytes(ctypes.byref(c), ctypes.byref(n)))
            self.esc_rows = torch.empty(n.value, dtype=torch.uint8, device=self.device)
            with torch.cuda.device(self.device):
                _lib.check(lib.glyd_gpu_build_escape_index(
                    self.device.index, _stream(self.device), ctypes.byref(c), self.esc_rows.data_ptr(), n.value))
            c.esc_rows = self.esc_rows.data_ptr()

    @property
    def nbytes(self) -> int:
        return sum(t.numel() for t in self.planes.values()) + (self.esc_rows.numel() if self.esc_rows is not None else 0)

    def tile(self, tiled: bool = True) -> "DeviceTensor":
        """This tensor with its sm and code planes in the tiled arrangement
        (tiled=True: 16-row x 64-column tiles, which the fused linears read in
        longer runs; docs/FORMAT.md, "Planes on the GPU") or row-major (False):
        a new DeviceTensor over new sm and code planes (the other planes
        shared), or self when it is so already. Bit-exact: it decodes and
        multiplies as before. UnsupportedError where the arrangement does not
        exist: not a fixed12 matrix of one group with rows % 16 == 0 and K % 64
        == 0."""
        if bool(tiled) == self.tiled:
            return self
        planes = dict(self.planes)
        planes["sm"] = torch.empty_like(self.planes["sm"])
        planes["code"] = torch.empty_like(self.planes["code"])
        with torch.cuda.device(self.device):
            _lib.check(_gpu().glyd_gpu_tile(self.device.index, _stream(self.device), ctypes.byref(self._c),
                                            planes["sm"].data_ptr() or None, planes["code"].data_ptr() or None))
        return DeviceTensor(None, self.device, layout=self.layout, shape=self.shape, groups=self.groups,
                            planes=planes, tiled=tiled, esc_rows=self.esc_rows)

    def decode(self, out: torch.Tensor | None = None, group: int = -1) -> torch.Tensor:
        """The bf16 tensor (or group `group` of it), bit-identical to glyd.unpack."""
        if group == -1:
            shape = self.shape
        else:
            g = len(self.groups)
            shape = (self.shape[0] // g, *self.shape[1:]) if g > 1 else self.shape
        out = _bf16_out(out, shape, self.device)
        _lib.check(_gpu().glyd_gpu_decode(self.device.index, _stream(self.device), ctypes.byref(self._c), group,
                                          out.data_ptr(), out.numel() * 2))
        return out

    def decode_rows(self, row0: int, rows: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows [row0, row0 + rows) of this tensor seen as the matrix [product of
        all but the last dimension, K], decoded to bf16 [rows, K]: bit-identical
        to glyd.unpack(...).reshape(-1, K)[row0:row0 + rows]. fixed12, one group
        (UnsupportedError otherwise: use decode()). out: a contiguous bf16 tensor
        of rows*K elements on this device (16-byte aligned for the fast kernel)."""
        if len(self.shape) < 2:
            raise InvalidArgumentError(1, f"decode_rows needs a tensor of >= 2 dimensions, this one is {self.shape}")
        for name, v in (("row0", row0), ("rows", rows)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidArgumentError(1, f"{name} must be an int, not {type(v).__name__}")
        k = self.shape[-1]
        n = _numel(self.shape[:-1])
        if row0 < 0 or rows < 0 or row0 + rows > n:
            raise InvalidArgumentError(1, f"row0={row0}, rows={rows}: rows [row0, row0 + rows) must lie in "
                                          f"[0, {n}]")
        out = _bf16_out(out, (rows, k), self.device)
        _lib.check(_gpu().glyd_gpu_decode_rows(self.device.index, _stream(self.device), ctypes.byref(self._c), row0,
                                               rows, out.data_ptr() if out.numel() else None, out.numel() * 2))
        return out

    def gather(self, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``ids`` of this tensor seen as the matrix [product of all but the
        last dimension, K], decoded to bf16 [*ids.shape, K]: an embedding lookup
        from a packed table, bit-identical to glyd.unpack(...).reshape(-1, K)[ids].
        ids: an int64 tensor on this device; they are read on the device only
        (no synchronization: CUDA graph capture works), so an id outside
        [0, rows) is not refused: its row of the result is zeros. fixed12, one
        group, K a multiple of 8 (UnsupportedError otherwise: use decode()).
        out: a contiguous bf16 tensor of ids.numel() * K elements on this device."""
        if len(self.shape) < 2:
            raise InvalidArgumentError(1, f"gather needs a tensor of >= 2 dimensions, this one is {self.shape}")
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.device != self.device:
            got = f"{ids.dtype} on {ids.device}" if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise InvalidArgumentError(1, f"ids must be an int64 tensor on {self.device}, got {got}")
        k = self.shape[-1]
        ids = ids.contiguous()
        count = ids.numel()
        out = _bf16_out(out, (*ids.shape, k), self.device)
        _lib.check(_gpu().glyd_gpu_decode_gather(self.device.index, _stream(self.device), ctypes.byref(self._c),
                                                 ids.data_ptr() if count else None, count,
                                                 out.data_ptr() if out.numel() else None, out.numel() * 2))
        return out

    def prompt_path(self, rows: int) -> bool:
        """True if linear() of `rows` rows takes the prompt path (decode tiles +
        cuBLAS): rows >= prompt_rows() > 0, a fixed12 2-D single-group weight, no
        forced kernel (force_kernel)."""
        return 0 < prompt_rows(self.device) <= rows and self._matrix and not _FORCED[0]

    def tile_rows(self) -> int:
        """Weight rows per tile of the prompt path (at most N)."""
        return min(tile_rows(self.shape[-1]), self.shape[0])

    def linear_tiles(self, x2: torch.Tensor, bias: torch.Tensor | None, y2: torch.Tensor) -> torch.Tensor:
        """The prompt path: y2 = x2 @ W.T (+ bias) with W decoded a tile of rows
        at a time into one reused workspace (torch's caching allocator), each
        tile multiplied by cuBLAS into its column slice of y2. The one
        implementation (DeviceTensor.linear and glyd.transformers.gpu_linear call
        it); callers check the arguments: x2 bf16 [rows, K], y2 bf16 [rows, N]
        contiguous, bias bf16 [N] contiguous or None, all on this device. Work
        is enqueued on the current stream without host synchronization (CUDA
        graph capture works). Results are within bf16 rounding of x2 @ W.T (the
        GEMM is cuBLAS's; not bit-identical to the fused kernel's)."""
        n, k = self.shape
        tr = self.tile_rows()
        if bias is not None:
            bias = bias.view(-1)
        tile = torch.empty(tr * k, dtype=torch.bfloat16, device=self.device)
        decode = _gpu().glyd_gpu_decode_rows
        dev, stream, c, ptr = self.device.index, _stream(self.device), ctypes.byref(self._c), tile.data_ptr()
        with torch.no_grad():  # out= takes no autograd; the glyd::linear op has its own backward
            for n0 in range(0, n, tr):
                r = min(tr, n - n0)
                st = decode(dev, stream, c, n0, r, ptr, r * k * 2)
                if st:
                    _lib.check(st)
                w = tile[:r * k].view(r, k).t()
                # out= a column slice: cuBLAS writes it in place with ldc = N (ATen's
                # addmm takes a row-major view with a leading dimension; a layout it
                # could not take would be computed aside and copied, still correct).
                if bias is None:
                    torch.mm(x2, w, out=y2[:, n0:n0 + r])
                else:
                    torch.addmm(bias[n0:n0 + r], x2, w, out=y2[:, n0:n0 + r])
        # tile goes back to the caching allocator here; the stream-ordered reuse
        # waits for the GEMMs queued above.
        return y2

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None, out: torch.Tensor | None = None,
               workspace: torch.Tensor | None = None, checked: bool = False) -> torch.Tensor:
        """y = x @ W.T (+ bias) for W [N, K] = this tensor. x: bf16 [..., K] on
        the same device; returns bf16 [..., N] (into `out` when given). Below
        PROMPT_ROWS rows the fused kernel decodes W inside the matmul (split-K
        partial sums in `workspace` when given, else in a fresh one); from
        PROMPT_ROWS rows on (fixed12) the prompt path: W decoded a tile of rows
        at a time, each tile multiplied by cuBLAS (linear_tiles; `workspace` is
        not used there). The one implementation of a fused linear call:
        ``checked=True`` skips the argument checks for callers that made the
        arguments themselves (the packed linear modules' hot path)."""
        n, k = self.shape if len(self.shape) == 2 else (0, 0)
        if not checked:
            self._check_linear(x, bias, out, workspace)
        x2 = _input_rows(x, k)
        rows = x2.shape[0]
        if out is None:
            out = torch.empty((*x.shape[:-1], n), dtype=torch.bfloat16, device=self.device)
        elif not checked and out.numel() != rows * n:
            raise InvalidArgumentError(1, f"out must be a contiguous bfloat16 tensor of {rows}x{n} elements on "
                                          f"{self.device}, got {out.dtype} {tuple(out.shape)} on {out.device}")
        if rows and self.prompt_path(rows):
            self.linear_tiles(x2, bias, out.view(rows, n))
            return out
        need = self.workspace_bound(rows) if rows else 0
        if workspace is None:
            workspace = torch.empty(need, dtype=torch.uint8, device=self.device) if need else None
        ws_n = workspace.numel() * workspace.element_size() if workspace is not None else 0
        if ws_n < need:
            raise InvalidArgumentError(1, f"workspace has {ws_n} bytes, the kernel needs {need}")
        st = _gpu().glyd_gpu_linear(
            self.device.index, _stream(self.device), x2.data_ptr(), rows, ctypes.byref(self._c),
            bias.data_ptr() if bias is not None else None, out.data_ptr(),
            workspace.data_ptr() if workspace is not None else None, ws_n)
        if st:
            _lib.check(st)
        return out

    def _check_linear(self, x, bias, out, workspace) -> None:
        if len(self.shape) != 2:
            raise InvalidArgumentError(1, f"linear needs a 2-D weight, this one is {self.shape}")
        n, k = self.shape
        _check_input(x, k, self.device)
        if out is not None and (out.dtype != torch.bfloat16 or out.device != self.device or not out.is_contiguous()):
            raise InvalidArgumentError(1, f"out must be a contiguous bfloat16 tensor on {self.device}, got "
                                          f"{out.dtype} {tuple(out.shape)} on {out.device}")
        if bias is not None and (bias.dtype != torch.bfloat16 or bias.numel() != n or not bias.is_contiguous()
                                 or bias.device != self.device):
            raise InvalidArgumentError(1, f"bias must be a contiguous bfloat16 tensor of {n} elements on {self.device}")
        if workspace is not None and (workspace.device != self.device or not workspace.is_contiguous()
                                      or workspace.data_ptr() % 16):
            raise InvalidArgumentError(1, f"workspace must be a contiguous, 16-byte aligned tensor on {self.device}")

    def workspace_bound(self, rows: int) -> int:
        """Bytes of workspace linear() needs for `rows` rows (0: none); cached per row count."""
        return _cached_bound(self._bounds, rows,
                             lambda r, n: _gpu().glyd_gpu_linear_workspace_bound(ctypes.byref(self._c), r, n))

    def linear_kernel(self, rows: int) -> str:
        """Name of what linear() runs for `rows` rows: PROMPT_KERNEL for the prompt path, else the fused kernel."""
        if rows and self.prompt_path(rows):
            return PROMPT_KERNEL
        return linear_kernel(self, rows)

    def __repr__(self):
        tiled = ", tiled" if self.tiled else ""
        return (f"DeviceTensor(layout={self.layout!r}{tiled}, shape={self.shape}, groups={len(self.groups)}, "
                f"device={self.device})")


class MultiLinear:
    """Several fixed12 weights [N_i, K] of one K that multiply the same input
    (q, k and v of a layer; gate and up): linear() computes every x @ W_i.T
    (+ b_i) with one fused launch per four weights (glyd_gpu_linear_many)
    instead of one each. The weights' DeviceTensors must stay alive and
    unchanged while this object is used."""

    def __init__(self, weights):
        weights = list(weights)
        if not weights:
            raise InvalidArgumentError(1, "MultiLinear needs at least one weight")
        w0 = weights[0]
        for i, w in enumerate(weights):
            if not isinstance(w, DeviceTensor) or not w._matrix:
                raise InvalidArgumentError(1, f"weight {i} must be a fixed12 2-D single-group DeviceTensor, got {w!r}")
            if w.device != w0.device or w.shape[1] != w0.shape[1]:
                raise InvalidArgumentError(1, f"weight {i} is {w.shape} on {w.device}; weight 0 is {w0.shape} on "
                                              f"{w0.device}: the weights need one K and one device")
        self.weights = weights
        self.device = w0.device
        self.k = w0.shape[1]
        self.n = [w.shape[0] for w in weights]
        self._arr = (GpuTensor * len(weights))(*[w._c for w in weights])
        self._bias_t = c_void_p * len(weights)
        self._bounds = {}

    def workspace_bound(self, rows: int) -> int:
        return _cached_bound(self._bounds, rows, lambda r, n: _gpu().glyd_gpu_linear_many_workspace_bound(
            self._arr, len(self.weights), r, n))

    def linear(self, x: torch.Tensor, biases=None) -> list:
        """[x @ W_i.T (+ biases[i]) for every weight]: bf16 [..., N_i] each,
        contiguous (views of one buffer). x: bf16 [..., K] on the weights'
        device; biases: None or one bf16 [N_i] tensor (or None) per weight.
        Math as DeviceTensor.linear's fused kernel; the kernel configuration
        is chosen for the weights together. From prompt_rows() rows on every
        weight takes DeviceTensor.linear (the prompt path) instead."""
        k = self.k
        _check_input(x, k, self.device)
        if biases is None:
            biases = [None] * len(self.weights)
        if len(biases) != len(self.weights):
            raise InvalidArgumentError(2, f"{len(biases)} biases for {len(self.weights)} weights")
        for i, (b, n) in enumerate(zip(biases, self.n)):
            if b is not None and (b.dtype != torch.bfloat16 or b.numel() != n or not b.is_contiguous()
                                  or b.device != self.device):
                raise InvalidArgumentError(2, f"bias {i} must be a contiguous bfloat16 tensor of {n} elements on "
                                              f"{self.device}")
        x2 = _input_rows(x, k)
        rows = x2.shape[0]
        lead = tuple(x.shape[:-1])
        if rows and self.weights[0].prompt_path(rows):
            return [w.linear(x2, b).view(*lead, w.shape[0]) for w, b in zip(self.weights, biases)]
        y = torch.empty(rows * sum(self.n), dtype=torch.bfloat16, device=self.device)
        need = self.workspace_bound(rows) if rows else 0
        ws = torch.empty(need, dtype=torch.uint8, device=self.device) if need else None
        bp = None
        if any(b is not None for b in biases):
            bp = self._bias_t(*[b.data_ptr() if b is not None else None for b in biases])
        st = _gpu().glyd_gpu_linear_many(
            self.device.index, _stream(self.device), x2.data_ptr(), rows, self._arr, len(self.weights), bp,
            y.data_ptr(), ws.data_ptr() if ws is not None else None, need)
        if st:
            _lib.check(st)
        outs, off = [], 0
        for n in self.n:
            outs.append(y[off:off + rows * n].view(*lead, n))
            off += rows * n
        return outs

    def __repr__(self):
        return f"MultiLinear({len(self.weights)} weights, N={self.n}, K={self.k}, device={self.device})"


def _bf16_out(out: torch.Tensor | None, shape, device: torch.device) -> torch.Tensor:
    """The destination of a decode: out checked (a contiguous bf16 tensor of the
    result's elements on device; its own shape may differ), or a new tensor."""
    if out is None:
        return torch.empty(shape, dtype=torch.bfloat16, device=device)
    if out.dtype != torch.bfloat16 or out.device != device or not out.is_contiguous():
        raise InvalidArgumentError(1, f"out must be a contiguous bfloat16 tensor on {device}, got {out.dtype} "
                                      f"{tuple(out.shape)} on {out.device}")
    if out.numel() != _numel(shape):
        raise InvalidArgumentError(1, f"out has {out.numel()} elements, the result {_numel(shape)} {tuple(shape)}")
    return out


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def linear_kernel(w: DeviceTensor, rows: int) -> str:
    """Name of the kernel DeviceTensor.linear runs for `rows` rows."""
    s = c_char_p()
    _lib.check(_gpu().glyd_gpu_linear_kernel(w.device.index, ctypes.byref(w._c), rows, ctypes.byref(s)))
    return s.value.decode()


def linear_split(w: DeviceTensor, rows: int) -> tuple[int, bool]:
    """How DeviceTensor.linear splits K for `rows` rows: (blocks per output tile,
    whether they add their partial sums as one thread-block cluster instead of
    through the workspace and a reduce launch). Diagnostics and tests."""
    s, c = c_int(), c_int()
    _lib.check(_gpu().glyd_gpu_linear_split(w.device.index, ctypes.byref(w._c), rows, ctypes.byref(s), ctypes.byref(c)))
    return s.value, bool(c.value)


def linear_configs() -> list[str]:
    """Benchmarks only: the fused-kernel configurations force_kernel accepts (besides "generic")."""
    s = c_char_p()
    _lib.check(_gpu().glyd_gpu_linear_configs(ctypes.byref(s)))
    return s.value.decode().split("\n")


def force_kernel(name: str | None) -> None:
    """Benchmarks only: run kernel configuration `name` for every linear, or the
    grouped configuration `name` (glyd_lin_f12g*) for every experts linear (None:
    automatic for both). While a linear configuration is forced, linear() runs the
    fused kernel at every row count (no prompt path)."""
    _lib.check(_gpu().glyd_gpu_force_kernel(name.encode() if name else None))
    _FORCED[0] = bool(name) and not name.startswith("glyd_lin_f12g")
    _FORCE_GEN[0] += 1


def pack_planes(tensor: torch.Tensor, layout: str = "fixed12", groups: int = 1):
    """Packs a bfloat16 CUDA tensor on its GPU (kernels/pack.cu). Returns
    (groups, planes, checksum): planes as uint8 CUDA tensors by plane name, the
    bytes glyd.pack writes for the same tensor, layout and groups (fixed12 or
    smallest).
    Synchronizes the current stream (the plane sizes come from the GPU)."""
    from .tensor import PLANE_NAMES, Group, _shape_array, layout_code

    if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cuda":
        raise InvalidArgumentError(1, "pack needs a CUDA tensor")
    if tensor.dtype != torch.bfloat16:
        raise InvalidArgumentError(1, f"the GPU packs bfloat16 tensors, not {tensor.dtype}")
    x = tensor.contiguous()
    dev = torch.device("cuda", x.device.index if x.device.index is not None else torch.cuda.current_device())
    lib = _gpu()
    sarr, ndim = _shape_array(tuple(x.shape))
    lc = layout_code(layout)
    g = max(int(groups), 1)
    ws_n = c_size_t()
    _lib.check(lib.glyd_gpu_pack_workspace_bytes(DTYPE_BF16, lc, sarr, ndim, g, ctypes.byref(ws_n)))
    ws = torch.empty(max(ws_n.value, 8), dtype=torch.uint8, device=dev)
    src = x.data_ptr() if x.numel() else None
    sizes = (c_uint64 * _lib.NUM_PLANES)()
    with torch.cuda.device(dev):
        stream = _stream(dev)
        _lib.check(lib.glyd_gpu_pack_bound(dev.index, stream, src, DTYPE_BF16, lc, sarr, ndim, g,
                                           ws.data_ptr(), ws_n.value, sizes))
        planes = {name: torch.empty(int(sizes[i]), dtype=torch.uint8, device=dev) for i, name in enumerate(PLANE_NAMES)}
        ptrs = (c_void_p * _lib.NUM_PLANES)(*[planes[n].data_ptr() if planes[n].numel() else None for n in PLANE_NAMES])
        garr = (_lib.Group * g)()
        crc = ctypes.c_uint32()
        _lib.check(lib.glyd_gpu_pack(dev.index, stream, src, DTYPE_BF16, lc, sarr, ndim, g, ws.data_ptr(),
                                     ws_n.value, ptrs, sizes, garr, ctypes.byref(crc)))
    # ws and x must outlive the queued encoder: the caching allocator reuses
    # them only for work queued later on this stream, which runs after it.
    return [Group._from_c(garr[i]) for i in range(g)], planes, int(crc.value)


def pack(tensor: torch.Tensor, layout: str = "fixed12", groups: int = 1):
    """glyd.pack on the GPU: packs a bfloat16 CUDA tensor with the GPU kernels and
    returns a glyd.PackedTensor (planes copied to host memory) whose bytes equal
    glyd.pack(tensor.cpu(), layout=layout, groups=groups)."""
    from .tensor import PackedTensor

    grs, planes, crc = pack_planes(tensor, layout, groups)
    host = {name: t.cpu() for name, t in planes.items()}
    return PackedTensor.from_planes(layout, torch.bfloat16, tuple(tensor.shape), grs, host, crc)


def pack_device(tensor: torch.Tensor, layout: str = "fixed12", groups: int = 1) -> DeviceTensor:
    """Packs a bfloat16 CUDA tensor on its GPU and keeps the planes there: a
    DeviceTensor ready for decode() / linear(), with no host round trip of the
    planes (the escape index of a single-group matrix is built as usual)."""
    grs, planes, _ = pack_planes(tensor, layout, groups)
    return DeviceTensor(layout=layout, shape=tuple(tensor.shape), groups=grs, planes=planes,
                        device=planes["sm"].device)


class DeviceExperts:
    """An experts tensor on a GPU ([E, N, K] or [E*N, K], one group per expert,
    fixed12) with its experts table (built here, once): every expert decoded in
    two launches, and the grouped fused linear over rows sorted by expert, the
    routing read on the device (no host synchronization, CUDA graphs capture it).
    `transposed`: the experts are stored [E, in, out] and multiply as x @ W[e]."""

    def __init__(self, dt: DeviceTensor, transposed: bool = False):
        if dt.layout != "fixed12":
            raise InvalidArgumentError(1, f"the experts kernels take fixed12 tensors, not {dt.layout}")
        self.dt = dt
        self.device = dt.device
        self.transposed = bool(transposed)
        self.num_experts = len(dt.groups)
        rows = _numel(dt.shape[:-1])
        if rows % self.num_experts:
            raise InvalidArgumentError(1, f"{self.num_experts} groups do not split the {rows} rows of {dt.shape}")
        a, b = rows // self.num_experts, dt.shape[-1]
        self.in_features, self.out_features = (a, b) if self.transposed else (b, a)
        self._bounds = {}
        lib = _gpu()
        n = c_size_t()
        _lib.check(lib.glyd_gpu_experts_table_bytes(ctypes.byref(dt._c), ctypes.byref(n)))
        self.table = torch.empty(n.value, dtype=torch.uint8, device=self.device)
        with torch.cuda.device(self.device):
            _lib.check(lib.glyd_gpu_build_experts_table(self.device.index, _stream(self.device), ctypes.byref(dt._c),
                                                        self.table.data_ptr(), n.value))

    def decode(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """Every expert, bit-identical to glyd.unpack (the tensor's shape)."""
        if out is None:
            out = torch.empty(self.dt.shape, dtype=torch.bfloat16, device=self.device)
        elif (out.dtype != torch.bfloat16 or out.device != self.device or not out.is_contiguous()
              or out.numel() != self.dt.numel):
            raise InvalidArgumentError(1, f"out must be a contiguous bfloat16 tensor of {self.dt.numel} elements on "
                                          f"{self.device}")
        _lib.check(_gpu().glyd_gpu_decode_experts(self.device.index, _stream(self.device), ctypes.byref(self.dt._c),
                                                  self.table.data_ptr(), out.data_ptr(), out.numel() * 2))
        return out

    def workspace_bound(self, rows: int) -> int:
        """Bytes of workspace linear() needs for `rows` rows (0 for the linear layout)."""
        return _cached_bound(self._bounds, rows, lambda r, n: _gpu().glyd_gpu_experts_workspace_bound(
            ctypes.byref(self.dt._c), r, int(self.transposed), n))

    def linear(self, x: torch.Tensor, offsets: torch.Tensor, bias: torch.Tensor | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
        """out[r] = x[r] @ W[e].T (+ bias[e]) for the rows r of expert e (transposed:
        x[r] @ W[e], no bias): x bf16 [P, in] sorted by expert, offsets int32 [E]
        cumulative end rows on the device (torch grouped_mm's convention). Rows from
        offsets[-1] on are left as they were."""
        n, k, e = self.out_features, self.in_features, self.num_experts
        if x.dtype != torch.bfloat16 or x.device != self.device or x.dim() != 2 or x.shape[1] != k:
            raise InvalidArgumentError(1, f"x must be bfloat16 [P, {k}] on {self.device}, got {x.dtype} "
                                          f"{tuple(x.shape)} on {x.device}")
        if not x.is_contiguous() or x.data_ptr() % 16:
            x = x.clone(memory_format=torch.contiguous_format)
        if (offsets.dtype != torch.int32 or offsets.device != self.device or offsets.numel() != e
                or not offsets.is_contiguous()):
            raise InvalidArgumentError(2, f"offsets must be a contiguous int32 tensor of {e} elements on {self.device}, "
                                          f"got {offsets.dtype} {tuple(offsets.shape)} on {offsets.device}")
        if bias is not None and (bias.dtype != torch.bfloat16 or bias.device != self.device or bias.numel() != e * n
                                 or not bias.is_contiguous() or self.transposed):
            raise InvalidArgumentError(3, f"bias must be a contiguous bfloat16 tensor of {e}x{n} elements on "
                                          f"{self.device} (and None for transposed experts)")
        rows = x.shape[0]
        if out is None:
            out = torch.empty((rows, n), dtype=torch.bfloat16, device=self.device)
        elif (out.dtype != torch.bfloat16 or out.device != self.device or not out.is_contiguous()
              or out.numel() != rows * n):
            raise InvalidArgumentError(4, f"out must be a contiguous bfloat16 tensor of {rows}x{n} elements on {self.device}")
        need = self.workspace_bound(rows) if rows else 0
        ws = torch.empty(need, dtype=torch.uint8, device=self.device) if need else None
        _lib.check(_gpu().glyd_gpu_linear_experts(
            self.device.index, _stream(self.device), x.data_ptr(), rows, ctypes.byref(self.dt._c),
            int(self.transposed), self.table.data_ptr(), offsets.data_ptr(),
            bias.data_ptr() if bias is not None else None, out.data_ptr(),
            ws.data_ptr() if ws is not None else None, need))
        return out


# ---- routing of a mixture of experts on the device ------------------------------------------------

#: Limits of moe_route (GLYD_MOE_ROUTE_MAX_PAIRS / _EXPERTS of glyd.h).
MOE_ROUTE_MAX_PAIRS = 16384
MOE_ROUTE_MAX_EXPERTS = 4000


def _cuda_arg(pos: int, name: str, t: torch.Tensor, dtype, numel: int | None = None) -> None:
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda" or t.dtype != dtype or not t.is_contiguous() \
            or (numel is not None and t.numel() != numel):
        what = f"{numel} elements of " if numel is not None else ""
        got = f"{t.dtype} {tuple(t.shape)} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise InvalidArgumentError(pos, f"{name} must be a contiguous CUDA tensor of {what}{dtype}, got {got}")


def moe_route(ids: torch.Tensor, topk: int, experts: int, total: int | None = None):
    """Sorts the (token, slot) pairs of a routing by expert on the device, stably,
    with no host synchronization. ids: int64 [tokens * topk] (pair = token * topk +
    slot) on a GPU; ids in [0, experts) are routed, in [experts, total) identity
    experts, anything else dropped. Returns (offsets int32 [experts]: cumulative end
    row of each routed expert; tokens int32 [pairs]: the token of each sorted row,
    identity experts after the routed ones and dropped pairs last; rows int32
    [pairs]: the sorted row of each pair)."""
    total = experts if total is None else total
    _cuda_arg(1, "ids", ids, torch.int64)
    dev = ids.device
    pairs = ids.numel()
    offs = torch.empty(experts, dtype=torch.int32, device=dev)
    tok = torch.empty(pairs, dtype=torch.int32, device=dev)
    rows = torch.empty(pairs, dtype=torch.int32, device=dev)
    _lib.check(_gpu().glyd_gpu_moe_route(dev.index, _stream(dev), ids.data_ptr(), pairs, topk, experts, total,
                                         offs.data_ptr(), tok.data_ptr(), rows.data_ptr()))
    return offs, tok, rows


def moe_combine(x: torch.Tensor, d: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, rows: torch.Tensor,
                experts: int, total: int | None = None) -> torch.Tensor:
    """out[t] = sum over slots s in order of w[t, s] * v (fp32, then bf16): v = d[rows[pair]]
    for a routed expert, x[t] for an identity expert, nothing for a dropped pair (ids, rows
    as for moe_route). x bf16 [tokens, hidden]; d bf16 [pairs, hidden] in sorted rows; w
    fp32 [tokens, topk]. Returns bf16 [tokens, hidden]."""
    total = experts if total is None else total
    _cuda_arg(1, "x", x, torch.bfloat16)
    if x.dim() != 2:
        raise InvalidArgumentError(1, f"x must be [tokens, hidden], got {tuple(x.shape)}")
    t, h = x.shape
    _cuda_arg(3, "w", w, torch.float32)
    if w.dim() != 2 or w.shape[0] != t:
        raise InvalidArgumentError(3, f"w must be [{t}, topk], got {tuple(w.shape)}")
    k = w.shape[1]
    _cuda_arg(2, "d", d, torch.bfloat16, t * k * h)
    _cuda_arg(4, "ids", ids, torch.int64, t * k)
    _cuda_arg(5, "rows", rows, torch.int32, t * k)
    for pos, name, a in ((2, "d", d), (3, "w", w), (4, "ids", ids), (5, "rows", rows)):
        if a.device != x.device:
            raise InvalidArgumentError(pos, f"{name} is on {a.device}, x on {x.device}")
    out = torch.empty_like(x)
    _lib.check(_gpu().glyd_gpu_moe_combine(x.device.index, _stream(x.device), x.data_ptr(), d.data_ptr(),
                                           w.data_ptr(), ids.data_ptr(), rows.data_ptr(), t, k, h, experts, total,
                                           out.data_ptr()))
    return out


def moe_silu_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for x bf16 [rows, 2 * inter] (gate, then up, as x.chunk(2, -1)) on
    a GPU, in one pass: the bits of torch's bf16 expression. Returns bf16 [rows, inter]."""
    _cuda_arg(1, "x", x, torch.bfloat16)
    if x.dim() != 2 or x.shape[1] % 2 or x.data_ptr() % 16:
        raise InvalidArgumentError(1, f"x must be a 16-byte aligned [rows, 2 * inter], got {tuple(x.shape)}")
    rows, inter = x.shape[0], x.shape[1] // 2
    out = torch.empty(rows, inter, dtype=torch.bfloat16, device=x.device)
    _lib.check(_gpu().glyd_gpu_moe_silu_mul(x.device.index, _stream(x.device), x.data_ptr(), rows, inter,
                                            out.data_ptr()))
    return out


def moe_row_experts(x: torch.Tensor, rows_per_expert: int) -> torch.Tensor:
    """Routing ids of an expert-major input (Llama 4): x bf16 [rows, hidden], rows_per_expert
    rows per expert; returns int64 [rows], r // rows_per_expert where row r has an element
    other than ±0, else -1 (moe_route's ids with topk 1)."""
    _cuda_arg(1, "x", x, torch.bfloat16)
    if x.dim() != 2 or x.data_ptr() % 16:
        raise InvalidArgumentError(1, f"x must be a 16-byte aligned [rows, hidden], got {tuple(x.shape)}")
    if rows_per_expert < 1:
        raise InvalidArgumentError(2, f"rows_per_expert must be >= 1, got {rows_per_expert}")
    ids = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
    _lib.check(_gpu().glyd_gpu_moe_row_experts(x.device.index, _stream(x.device), x.data_ptr(), x.shape[0],
                                               x.shape[1], rows_per_expert, ids.data_ptr()))
    return ids


def moe_top1(logits: torch.Tensor):
    """Top-1 routing from router logits bf16 [tokens, experts] on a GPU: (ids int64
    [tokens], the expert of the largest logit in torch.topk's order, and score bf16
    [tokens, 1], torch.sigmoid(logit.float()).to(bf16) of it) — the bits of
    ``torch.topk(logits, 1, dim=1)`` and the sigmoid, in one kernel."""
    _cuda_arg(1, "logits", logits, torch.bfloat16)
    if logits.dim() != 2 or logits.shape[1] < 1:
        raise InvalidArgumentError(1, f"logits must be [tokens, experts], got {tuple(logits.shape)}")
    t, e = logits.shape
    ids = torch.empty(t, dtype=torch.int64, device=logits.device)
    score = torch.empty(t, 1, dtype=torch.bfloat16, device=logits.device)
    _lib.check(_gpu().glyd_gpu_moe_top1(logits.device.index, _stream(logits.device), logits.data_ptr(), t, e,
                                        ids.data_ptr(), score.data_ptr()))
    return ids, score


def moe_gather_scale(x: torch.Tensor, tokens: torch.Tensor, score: torch.Tensor) -> torch.Tensor:
    """(x * score)[tokens] in one pass: x bf16 [T, hidden], tokens int32 [rows] (moe_route's,
    values in [0, T)), score bf16 [T] or [T, 1]; returns bf16 [rows, hidden], each row an fp32
    product rounded to bf16 (the bits of torch's ``(x * score).index_select(0, tokens)``)."""
    _cuda_arg(1, "x", x, torch.bfloat16)
    if x.dim() != 2 or x.data_ptr() % 16:
        raise InvalidArgumentError(1, f"x must be a 16-byte aligned [tokens, hidden], got {tuple(x.shape)}")
    _cuda_arg(2, "tokens", tokens, torch.int32)
    _cuda_arg(3, "score", score, torch.bfloat16, x.shape[0])
    for pos, name, a in ((2, "tokens", tokens), (3, "score", score)):
        if a.device != x.device:
            raise InvalidArgumentError(pos, f"{name} is on {a.device}, x on {x.device}")
    rows = tokens.numel()
    out = torch.empty(rows, x.shape[1], dtype=torch.bfloat16, device=x.device)
    _lib.check(_gpu().glyd_gpu_moe_gather_scale(x.device.index, _stream(x.device), x.data_ptr(), tokens.data_ptr(),
                                                score.data_ptr(), rows, x.shape[1], out.data_ptr()))
    return out
