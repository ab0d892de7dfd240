"""Glyd's exceptions: one class per family of status codes of include/glyd.h.

Every exception carries ``code`` (the glyd_status value) and the library's
message, which names the file and tensor involved.
"""

from __future__ import annotations

__all__ = [
    "GlydError",
    "InvalidArgumentError",
    "GlydIOError",
    "NotFoundError",
    "CorruptError",
    "TruncatedError",
    "HeaderError",
    "RangeError",
    "SizeMismatchError",
    "OverflowSizeError",
    "DescriptorError",
    "EscapeError",
    "ExponentTableError",
    "VersionError",
    "ChecksumError",
    "DTypeError",
    "NoGPUError",
    "OutOfMemoryError",
    "InternalError",
    "StateError",
    "ExistsError",
    "CUDAError",
    "UnsupportedError",
    "LibraryNotFoundError",
    "error_for",
]


class GlydError(Exception):
    """Base class of every error raised by Glyd."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidArgumentError(GlydError, ValueError):
    """A NULL pointer, a bad enum value, a bad option, or a too-small buffer."""


class GlydIOError(GlydError, OSError):
    """The operating system refused a read, write, rename or mmap."""


class NotFoundError(GlydError, FileNotFoundError):
    """No such file, folder or tensor."""


class CorruptError(GlydError):
    """Packed data or a checkpoint file is damaged or inconsistent."""


class TruncatedError(CorruptError):
    """A file ends before the data it declares."""


class HeaderError(CorruptError):
    """A safetensors header is malformed or longer than its file."""


class RangeError(CorruptError):
    """Tensor byte ranges overlap, leave gaps, or run past the end."""


class SizeMismatchError(CorruptError):
    """dtype x shape disagrees with a byte length."""


class OverflowSizeError(CorruptError, OverflowError):
    """Dimensions whose product overflows."""


class DescriptorError(CorruptError):
    """The checkpoint's descriptor fails verification or disagrees with its shards."""


class EscapeError(CorruptError):
    """An escape code without an escape entry, or an escape index out of range."""


class ExponentTableError(CorruptError):
    """An exponent base or table entry out of range."""


class VersionError(GlydError):
    """A checkpoint format newer than this library reads."""


class ChecksumError(GlydError):
    """Decoded bytes disagree with the checksum of the original tensor."""


class DTypeError(GlydError, TypeError):
    """A dtype that is not allowed here."""


class NoGPUError(GlydError, RuntimeError):
    """No usable GPU or CUDA driver."""


class OutOfMemoryError(GlydError, MemoryError):
    """Host or device memory could not be allocated."""


class InternalError(GlydError, RuntimeError):
    """A bug in Glyd; please report it with the message."""


class StateError(GlydError, RuntimeError):
    """A call out of order, e.g. a writer used after commit."""


class ExistsError(GlydError, FileExistsError):
    """The destination exists and may not be replaced."""


class CUDAError(GlydError, RuntimeError):
    """The CUDA driver returned an error."""


class UnsupportedError(GlydError, NotImplementedError):
    """Valid, but not supported by this build or device."""


class LibraryNotFoundError(GlydError, OSError):
    """libglyd.so could not be found or loaded."""


# glyd_status value -> exception class (include/glyd.h, enum glyd_status).
_BY_CODE = {
    1: InvalidArgumentError,
    2: InvalidArgumentError,
    3: GlydIOError,
    4: NotFoundError,
    5: TruncatedError,
    6: HeaderError,
    7: RangeError,
    8: RangeError,
    9: RangeError,
    10: SizeMismatchError,
    11: OverflowSizeError,
    12: DescriptorError,
    13: EscapeError,
    14: EscapeError,
    15: ExponentTableError,
    16: VersionError,
    17: ChecksumError,
    18: DTypeError,
    19: CorruptError,
    20: NoGPUError,
    21: OutOfMemoryError,
    22: InternalError,
    23: StateError,
    24: ExistsError,
    25: CUDAError,
    26: UnsupportedError,
}


def error_for(code: int, message: str) -> GlydError:
    """The exception for a glyd_status value."""
    cls = _BY_CODE.get(code, GlydError)
    return cls(code, message)
