"""Packed checkpoint folders: glyd.Writer and glyd.Reader (docs/FORMAT.md)."""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass

import torch

from . import _lib
from .errors import InvalidArgumentError
from .tensor import _DTYPE_BY_CODE, _LAYOUT_NAMES, Group, PackedTensor, _shape_array

#: safetensors dtype name <-> torch dtype, for raw tensors.
SAFETENSORS_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "I32": torch.int32, "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64,
    "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
}
_DTYPE_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}


def parse_size(size) -> int:
    """Bytes from an int or a string like "5GB", "500MB", "2GiB" (0/None = default)."""
    if size is None:
        return 0
    if isinstance(size, int):
        if size < 0:
            raise InvalidArgumentError(1, f"max_shard_size must be >= 0, got {size}")
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*", str(size), re.IGNORECASE)
    if not m:
        raise InvalidArgumentError(1, f"cannot read size {size!r}; use e.g. 5GB or 500MB")
    unit = (m.group(2) or "B").upper()
    base = 1024 if "I" in unit else 1000
    power = {"B": 0, "K": 1, "M": 2, "G": 3, "T": 4}[unit[0]]
    return int(float(m.group(1)) * base**power)


class Writer(_lib.Handle):
    """Writes a packed checkpoint folder atomically.

    Everything goes to a temporary sibling folder (``temp_dir``, where callers
    may add their own files) and is renamed to ``directory`` on commit(). As a
    context manager it commits on success and aborts on an exception.
    """

    _free = "glyd_writer_destroy"  # aborts an uncommitted writer
    _kind = "Writer"

    def __init__(self, directory, max_shard_size=None, overwrite: bool = False):
        self.directory = os.fspath(directory)
        h = ctypes.c_void_p()
        flags = 1 if overwrite else 0
        _lib.check(_lib.load().glyd_writer_open(os.fsencode(self.directory), parse_size(max_shard_size), flags, ctypes.byref(h)))
        super().__init__(h.value)
        self.temp_dir: str = os.fsdecode(_lib.load().glyd_writer_temp_dir(h))

    def add_packed(self, name: str, packed: PackedTensor) -> None:
        if not isinstance(packed, PackedTensor):
            raise InvalidArgumentError(1, f"add_packed({name!r}) takes a glyd.PackedTensor, not {type(packed).__name__}")
        _lib.check(_lib.load().glyd_writer_add_packed(self._open(), name.encode(), packed._open()))

    def add_raw(self, name: str, tensor: torch.Tensor) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentError(1, f"add_raw({name!r}) takes a torch.Tensor, not {type(tensor).__name__}")
        try:
            dtype = _DTYPE_NAMES[tensor.dtype]
        except KeyError:
            raise InvalidArgumentError(1, f"tensor {name!r} has dtype {tensor.dtype}, which safetensors cannot store") from None
        t = tensor.detach().to("cpu").contiguous()
        sarr, ndim = _shape_array(t.shape)
        nbytes = t.numel() * t.element_size()
        _lib.check(
            _lib.load().glyd_writer_add_raw(
                self._open(), name.encode(), dtype.encode(), sarr, ndim, t.data_ptr() if nbytes else None, nbytes
            )
        )

    def commit(self) -> None:
        _lib.check(_lib.load().glyd_writer_commit(self._open()))

    def abort(self) -> None:
        if self._h:
            _lib.check(_lib.load().glyd_writer_abort(self._h))

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
            else:
                self.abort()
        finally:
            self.close()


@dataclass(frozen=True)
class TensorInfo:
    """What the checkpoint says of one tensor."""

    name: str
    layout: str  # "raw", "fixed12", "smallest"
    dtype: torch.dtype  # the original dtype (raw tensors: their own)
    raw_dtype: str  # safetensors dtype of a raw tensor, "" for packed ones
    shape: tuple
    num_groups: int
    checksum: int
    packed_bytes: int
    original_bytes: int
    bits_per_weight: float
    escapes: int


class Reader(_lib.Handle):
    """Reads a packed checkpoint folder: memory-maps and validates it on open."""

    _free = "glyd_reader_close"
    _kind = "Reader"

    def __init__(self, directory, max_format_version: int = 0):
        self.directory = os.fspath(directory)
        h = ctypes.c_void_p()
        _lib.check(_lib.load().glyd_reader_open(os.fsencode(self.directory), max_format_version, ctypes.byref(h)))
        super().__init__(h.value)
        lib = _lib.load()
        self.format: str = lib.glyd_reader_format(h).decode()
        self._names = []
        for i in range(lib.glyd_reader_count(h)):
            p = ctypes.c_char_p()
            _lib.check(lib.glyd_reader_name(h, i, ctypes.byref(p)))
            self._names.append(p.value.decode())
        self._index = {n: i for i, n in enumerate(self._names)}

    def names(self) -> list:
        return list(self._names)

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def _i(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            from .errors import NotFoundError

            raise NotFoundError(4, f"{self.directory}: no tensor named {name!r}")
        return i

    def info(self, name: str) -> TensorInfo:
        c = _lib.TensorInfo()
        _lib.check(_lib.load().glyd_reader_describe(self._open(), self._i(name), ctypes.byref(c)))
        raw = c.raw_dtype.decode()
        dtype = SAFETENSORS_DTYPES[raw] if raw else _DTYPE_BY_CODE[c.dtype]
        return TensorInfo(
            name, _LAYOUT_NAMES[c.layout], dtype, raw, tuple(int(c.shape[i]) for i in range(c.ndim)),
            int(c.num_groups), int(c.checksum), int(c.packed_bytes), int(c.original_bytes),
            float(c.bits_per_weight), int(c.escapes),
        )

    def group(self, name: str, g: int) -> Group:
        cg = _lib.Group()
        _lib.check(_lib.load().glyd_reader_group(self._open(), self._i(name), g, ctypes.byref(cg)))
        return Group._from_c(cg)

    def packed(self, name: str) -> PackedTensor:
        """The packed tensor, its planes read in place from the memory map."""
        i = self._i(name)
        info = self.info(name)
        if info.layout == "raw":
            raise InvalidArgumentError(1, f"{self.directory}: tensor {name!r} is stored raw, not packed")
        lib = _lib.load()
        planes = {}
        from .tensor import PLANE_NAMES

        for p, pname in enumerate(PLANE_NAMES):
            ptr, n = ctypes.c_void_p(), ctypes.c_size_t()
            _lib.check(lib.glyd_reader_plane(self._open(), i, p, ctypes.byref(ptr), ctypes.byref(n)))
            buf = (ctypes.c_uint8 * n.value).from_address(ptr.value) if n.value else bytearray()
            planes[pname] = torch.frombuffer(buf, dtype=torch.uint8) if n.value else torch.empty(0, dtype=torch.uint8, device="cpu")
        groups = [self.group(name, g) for g in range(info.num_groups)]
        p = PackedTensor.from_planes(info.layout, info.dtype, info.shape, groups, planes, info.checksum)
        p._keepalive = (p._keepalive, self)  # the memory map lives as long as the reader
        return p

    def raw(self, name: str) -> torch.Tensor:
        """A copy of a raw (unpacked) tensor."""
        return self.unpack(name)

    def unpack(self, name: str) -> torch.Tensor:
        """The tensor decoded (packed) or copied (raw) to a new CPU tensor."""
        info = self.info(name)
        out = torch.empty(info.shape, dtype=info.dtype)
        _lib.check(_lib.load().glyd_reader_unpack(self._open(), self._i(name), out.data_ptr(), info.original_bytes))
        return out

    def verify(self, name: str) -> None:
        _lib.check(_lib.load().glyd_reader_verify(self._open(), self._i(name)))

    def verify_all(self, progress: bool = True) -> None:
        """Check every tensor against the checksum of its original bytes."""
        names = self._names
        if progress:
            from tqdm.auto import tqdm

            names = tqdm(names, desc="verify", unit="tensor", leave=False)
        for n in names:
            self.verify(n)

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
