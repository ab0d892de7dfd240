"""Packed tensors: glyd.pack, glyd.unpack and glyd.PackedTensor."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from . import _lib
from .errors import DTypeError, InvalidArgumentError

#: Plane names, indexed by glyd_plane (include/glyd.h); checkpoints store plane
#: p of tensor N as the U8 tensor f"{N}.glyd_{PLANE_NAMES[p]}".
PLANE_NAMES = ("sm", "code", "code2", "code3", "chunks", "escidx", "escexp")
LAYOUTS = {"raw": 0, "fixed12": 1, "smallest": 2}
_LAYOUT_NAMES = {v: k for k, v in LAYOUTS.items()}
_DTYPES = {torch.bfloat16: 1, torch.float16: 2}
_DTYPE_BY_CODE = {v: k for k, v in _DTYPES.items()}


@dataclass(frozen=True)
class Group:
    """One independently decodable slice of a packed tensor along axis 0 (the
    whole tensor, or one expert)."""

    elements: int
    escapes: int
    offsets: tuple  # byte offset of the group in each plane, by PLANE_NAMES
    base: int
    table: tuple

    @classmethod
    def _from_c(cls, g: _lib.Group) -> "Group":
        return cls(int(g.elements), int(g.escapes), tuple(int(x) for x in g.offsets), int(g.base), tuple(int(x) for x in g.table))

    def _to_c(self) -> _lib.Group:
        g = _lib.Group()
        g.elements, g.escapes, g.base = self.elements, self.escapes, self.base
        for i, v in enumerate(self.offsets):
            g.offsets[i] = v
        for i, v in enumerate(self.table):
            g.table[i] = v
        return g


def layout_code(layout: str) -> int:
    try:
        return LAYOUTS[layout]
    except KeyError:
        raise InvalidArgumentError(1, f"unknown layout {layout!r}; expected 'fixed12' or 'smallest'") from None


def dtype_code(dtype: torch.dtype) -> int:
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise DTypeError(18, f"Glyd packs bfloat16 and float16 tensors, not {dtype}") from None


def _shape_array(shape: Sequence[int]):
    arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    return arr, len(shape)


class PackedTensor(_lib.Handle):
    """A losslessly packed bf16/fp16 tensor held by libglyd.

    Make one with glyd.pack, Reader.packed or PackedTensor.from_planes.
    """

    _free = "glyd_packed_destroy"
    _kind = "PackedTensor"

    def __init__(self, handle: int, keepalive=None):
        super().__init__(handle)
        self._keepalive = keepalive  # memory the planes live in (tensors, a reader)
        info = _lib.TensorInfo()
        _lib.check(_lib.load().glyd_packed_describe(self._h, ctypes.byref(info)))
        self.layout: str = _LAYOUT_NAMES[info.layout]
        self.dtype: torch.dtype = _DTYPE_BY_CODE[info.dtype]
        self.shape: tuple = tuple(int(info.shape[i]) for i in range(info.ndim))
        self.numel: int = int(info.elements)
        self.num_groups: int = int(info.num_groups)
        self.checksum: int = int(info.checksum)
        self.packed_bytes: int = int(info.packed_bytes)
        self.original_bytes: int = int(info.original_bytes)
        self.escapes: int = int(info.escapes)
        self.bits_per_weight: float = float(info.bits_per_weight)
        self._groups = None
        self._planes = None

    @property
    def escape_fraction(self) -> float:
        return self.escapes / self.numel if self.numel else 0.0

    @property
    def groups(self) -> list:
        if self._groups is None:
            lib = _lib.load()
            out = []
            for g in range(self.num_groups):
                cg = _lib.Group()
                _lib.check(lib.glyd_packed_group(self._open(), g, ctypes.byref(cg)))
                out.append(Group._from_c(cg))
            self._groups = out
        return self._groups

    @property
    def planes(self) -> dict:
        """Plane name -> 1-D uint8 CPU tensor (a copy owned by Python)."""
        if self._planes is None:
            lib = _lib.load()
            out = {}
            for i, name in enumerate(PLANE_NAMES):
                ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
                _lib.check(lib.glyd_packed_plane(self._open(), i, ctypes.byref(ptr), ctypes.byref(n)))
                t = torch.empty(n.value, dtype=torch.uint8)
                if n.value:
                    ctypes.memmove(t.data_ptr(), ptr.value, n.value)
                out[name] = t
            self._planes = out
        return self._planes

    def unpack(self, out: torch.Tensor | None = None, workers: int = 0) -> torch.Tensor:
        """Decode to a CPU tensor of the original dtype and shape."""
        out = _check_out(out, self.shape, self.dtype)
        _lib.check(_lib.load().glyd_packed_unpack(self._open(), out.data_ptr(), out.numel() * 2, workers))
        return out

    def unpack_group(self, g: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """Decode group g alone, e.g. one expert. Its shape is shape[1:] when there
        is one group per index of axis 0 (experts), else (shape[0] // num_groups, *shape[1:])."""
        if not 0 <= g < self.num_groups:
            raise InvalidArgumentError(1, f"group {g} out of range: the tensor has {self.num_groups}")
        shape = self.shape
        if self.num_groups > 1:
            rows = shape[0] // self.num_groups
            shape = tuple(shape[1:]) if rows == 1 else (rows, *shape[1:])
        out = _check_out(out, shape, self.dtype)
        _lib.check(_lib.load().glyd_packed_unpack_group(self._open(), g, out.data_ptr(), out.numel() * 2))
        return out

    def verify(self, workers: int = 0) -> None:
        """Decode and compare with the checksum of the original (raises ChecksumError)."""
        _lib.check(_lib.load().glyd_packed_verify(self._open(), workers))

    @classmethod
    def from_planes(
        cls,
        layout: str,
        dtype: torch.dtype,
        shape: Sequence[int],
        groups: Sequence[Group],
        planes: Mapping[str, torch.Tensor],
        checksum: int,
    ) -> "PackedTensor":
        """Wrap uint8 CPU tensors (e.g. loaded parameters) as a packed tensor, without
        copying. The structure is validated; the checksum only by verify()."""
        lib = _lib.load()
        keep = []
        ptrs = (ctypes.c_void_p * _lib.NUM_PLANES)()
        lens = (ctypes.c_size_t * _lib.NUM_PLANES)()
        for i, name in enumerate(PLANE_NAMES):
            t = planes.get(name)
            if t is None:
                raise InvalidArgumentError(1, f"plane {name!r} is missing")
            if t.dtype != torch.uint8 or t.device.type != "cpu":
                raise InvalidArgumentError(1, f"plane {name!r} must be a uint8 CPU tensor, not {t.dtype} on {t.device}")
            t = t.contiguous()
            keep.append(t)
            ptrs[i] = t.data_ptr() if t.numel() else None
            lens[i] = t.numel()
        garr = (_lib.Group * max(len(groups), 1))(*[g._to_c() for g in groups])
        sarr, ndim = _shape_array(shape)
        h = ctypes.c_void_p()
        _lib.check(
            lib.glyd_packed_import(
                layout_code(layout), dtype_code(dtype), sarr, ndim, garr, len(groups), ptrs, lens,
                checksum, ctypes.byref(h),
            )
        )
        p = cls(h.value, keepalive=keep)
        p._planes = dict(zip(PLANE_NAMES, keep))
        return p

    def __repr__(self) -> str:
        return (
            f"PackedTensor(layout={self.layout!r}, dtype={self.dtype}, shape={self.shape}, "
            f"groups={self.num_groups}, bits_per_weight={self.bits_per_weight:.3f})"
        )


def _check_out(out, shape, dtype):
    if out is None:
        return torch.empty(shape, dtype=dtype)
    if out.dtype != dtype or tuple(out.shape) != tuple(shape) or out.device.type != "cpu" or not out.is_contiguous():
        raise InvalidArgumentError(
            1, f"out must be a contiguous CPU {dtype} tensor of shape {tuple(shape)}, got {out.dtype} {tuple(out.shape)} on {out.device}"
        )
    return out


def pack(tensor: torch.Tensor, layout: str = "fixed12", groups: int = 1, workers: int = 0) -> PackedTensor:
    """Pack a bfloat16 or float16 tensor losslessly.

    CPU tensors pack on `workers` threads (0 = all cores); bfloat16 CUDA tensors
    pack on their GPU (the same bytes; planes returned in host memory).
    groups > 1 splits axis 0 into independently decodable slices (experts).
    """
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentError(1, f"glyd.pack takes a torch.Tensor, not {type(tensor).__name__}")
    if tensor.device.type == "cuda":
        if tensor.dtype == torch.bfloat16:
            from . import _gpu  # the GPU packer writes the same bytes

            layout_code(layout)
            return _gpu.pack(tensor.detach().contiguous(), layout=layout, groups=groups or 1)
        tensor = tensor.cpu()  # the GPU packer takes bf16 only
    if tensor.device.type != "cpu":
        raise InvalidArgumentError(1, f"glyd.pack takes a CPU or CUDA tensor, got one on {tensor.device}")
    code = dtype_code(tensor.dtype)
    t = tensor.detach().contiguous()
    sarr, ndim = _shape_array(t.shape)
    h = ctypes.c_void_p()
    _lib.check(
        _lib.load().glyd_pack(
            t.data_ptr() if t.numel() else None, t.numel() * 2, code, sarr, ndim, layout_code(layout),
            groups, workers, ctypes.byref(h),
        )
    )
    return PackedTensor(h.value)


def unpack(packed: PackedTensor, out: torch.Tensor | None = None, workers: int = 0) -> torch.Tensor:
    """Decode a PackedTensor to its exact original CPU tensor."""
    if not isinstance(packed, PackedTensor):
        raise InvalidArgumentError(1, f"glyd.unpack takes a glyd.PackedTensor, not {type(packed).__name__}")
    return packed.unpack(out=out, workers=workers)
