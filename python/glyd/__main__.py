"""`python -m glyd`: a diagnosis of the installation."""

from __future__ import annotations

import sys


def main() -> int:
    from . import __version__, _lib

    print(f"glyd (Python package) {__version__}")
    try:
        lib = _lib.load()
    except Exception as e:  # the diagnosis must say why, never crash
        print(f"library:  NOT LOADED: {e}")
        return 1
    print(f"library:  {_lib.library_path()}")
    print(f"version:  {lib.glyd_version_string().decode()} (ABI {lib.glyd_abi_version()})")
    v = lib.glyd_format_version()
    print("formats:  reads and writes " + ", ".join(f"glyd-v{i}" for i in range(1, v + 1)))
    try:
        from . import gpu

        print(f"GPU:      {gpu.describe()}")
    except Exception as e:
        print(f"GPU:      not available: {e}")
    try:
        import torch
        import transformers

        print(f"torch:    {torch.__version__}; transformers: {transformers.__version__}")
    except ImportError as e:
        print(f"transformers integration unavailable: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
