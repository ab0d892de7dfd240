"""The one module that touches ctypes: finds libglyd.so and declares every symbol.

Search order: the GLYD_LIBRARY environment variable, then the package folder
(where `pip install` puts it), then the repository's build/ folder (for
development from a checkout). A failed load raises LibraryNotFoundError on
first use, saying what was tried.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int64, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p
from pathlib import Path

from .errors import LibraryNotFoundError, error_for

NUM_PLANES = 7
MAX_DIMS = 8


class Group(ctypes.Structure):
    """struct glyd_group."""

    _fields_ = [
        ("elements", c_uint64),
        ("escapes", c_uint64),
        ("offsets", c_uint64 * NUM_PLANES),
        ("base", c_uint8),
        ("table", c_uint8 * 6),
        ("reserved", c_uint8),
    ]


class TensorInfo(ctypes.Structure):
    """struct glyd_tensor_info."""

    _fields_ = [
        ("layout", c_int),
        ("dtype", c_int),
        ("raw_dtype", ctypes.c_char * 8),
        ("ndim", c_size_t),
        ("shape", c_int64 * MAX_DIMS),
        ("elements", c_uint64),
        ("original_bytes", c_uint64),
        ("packed_bytes", c_uint64),
        ("num_groups", c_uint64),
        ("escapes", c_uint64),
        ("checksum", c_uint32),
        ("bits_per_weight", c_double),
    ]


_P = c_void_p  # opaque handles
_u8pp = POINTER(POINTER(c_uint8))

# name: (restype, argtypes). Functions returning int return a glyd_status.
_SIGNATURES = {
    "glyd_version_string": (c_char_p, []),
    "glyd_version_number": (c_uint32, []),
    "glyd_abi_version": (c_int, []),
    "glyd_format_version": (c_int, []),
    "glyd_strerror": (c_char_p, [c_int]),
    "glyd_last_error": (c_char_p, []),
    "glyd_pack": (c_int, [c_void_p, c_size_t, c_int, POINTER(c_int64), c_size_t, c_int, c_int64, c_int, POINTER(_P)]),
    "glyd_packed_import": (
        c_int,
        [c_int, c_int, POINTER(c_int64), c_size_t, POINTER(Group), c_size_t,
         POINTER(c_void_p), POINTER(c_size_t), c_uint32, POINTER(_P)],
    ),
    "glyd_packed_describe": (c_int, [_P, POINTER(TensorInfo)]),
    "glyd_packed_group": (c_int, [_P, c_uint64, POINTER(Group)]),
    "glyd_packed_plane": (c_int, [_P, c_int, POINTER(c_void_p), POINTER(c_size_t)]),
    "glyd_packed_unpack": (c_int, [_P, c_void_p, c_size_t, c_int]),
    "glyd_packed_unpack_group": (c_int, [_P, c_uint64, c_void_p, c_size_t]),
    "glyd_packed_verify": (c_int, [_P, c_int]),
    "glyd_packed_destroy": (None, [_P]),
    "glyd_writer_open": (c_int, [c_char_p, c_uint64, c_uint32, POINTER(_P)]),
    "glyd_writer_temp_dir": (c_char_p, [_P]),
    "glyd_writer_add_packed": (c_int, [_P, c_char_p, _P]),
    "glyd_writer_add_raw": (c_int, [_P, c_char_p, c_char_p, POINTER(c_int64), c_size_t, c_void_p, c_size_t]),
    "glyd_writer_commit": (c_int, [_P]),
    "glyd_writer_abort": (c_int, [_P]),
    "glyd_writer_destroy": (None, [_P]),
    "glyd_writer_errmsg": (c_char_p, [_P]),
    "glyd_reader_open": (c_int, [c_char_p, c_int, POINTER(_P)]),
    "glyd_reader_format": (c_char_p, [_P]),
    "glyd_reader_count": (c_size_t, [_P]),
    "glyd_reader_name": (c_int, [_P, c_size_t, POINTER(c_char_p)]),
    "glyd_reader_find": (c_int, [_P, c_char_p, POINTER(c_size_t)]),
    "glyd_reader_describe": (c_int, [_P, c_size_t, POINTER(TensorInfo)]),
    "glyd_reader_group": (c_int, [_P, c_size_t, c_uint64, POINTER(Group)]),
    "glyd_reader_plane": (c_int, [_P, c_size_t, c_int, POINTER(c_void_p), POINTER(c_size_t)]),
    "glyd_reader_raw": (c_int, [_P, c_size_t, POINTER(c_void_p), POINTER(c_size_t)]),
    "glyd_reader_unpack": (c_int, [_P, c_size_t, c_void_p, c_size_t]),
    "glyd_reader_verify": (c_int, [_P, c_size_t]),
    "glyd_reader_close": (None, [_P]),
    "glyd_reader_errmsg": (c_char_p, [_P]),
}

_lock = threading.Lock()
_lib = None
_path = None


def candidates() -> list[Path]:
    """Where libglyd.so is looked for, in order."""
    out = []
    env = os.environ.get("GLYD_LIBRARY")
    if env:
        out.append(Path(env))
    here = Path(__file__).resolve().parent
    out.append(here / "libglyd.so")
    out.append(here.parent.parent / "build" / "libglyd.so")
    return out


def load():
    """The loaded library, with every symbol declared (loaded on first call)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidates():
            if not path.is_file():
                tried.append(f"{path} (missing)")
                continue
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _path = path
            _lib = lib
            return lib
        raise LibraryNotFoundError(
            0,
            "libglyd.so could not be loaded; tried: " + "; ".join(tried)
            + ". Build it with `make lib` or install the package with `pip install ./python`,"
            " or point GLYD_LIBRARY at it.",
        )


def library_path() -> Path:
    load()
    return _path


class Handle:
    """A library handle (glyd_packed, glyd_writer, glyd_reader): freed by close(),
    at the end of a with-block, or when garbage-collected."""

    _free = ""  # name of the glyd_* function that frees it
    _kind = ""  # what to call it in messages

    def __init__(self, handle):
        self._h = c_void_p(handle)

    def _open(self) -> c_void_p:
        """The handle, or InvalidArgumentError once closed."""
        if not self._h:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(1, f"this {self._kind} has been closed")
        return self._h

    def close(self) -> None:
        """Free the library's memory now."""
        if self._h:
            getattr(load(), self._free)(self._h)
            self._h = c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def check(status: int) -> None:
    """Raise the GlydError for a non-zero glyd_status, with this thread's message."""
    if status == 0:
        return
    lib = load()
    msg = lib.glyd_last_error()
    text = msg.decode("utf-8", "replace") if msg else ""
    if not text:
        text = lib.glyd_strerror(status).decode()
    raise error_for(status, text)
