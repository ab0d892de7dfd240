"""`python -m glyd.gpu pack|verify|info|bench`: the command line.

Exit codes: 0 success, 1 verification or corruption failure, 2 usage error.
"""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        from . import bench

        return bench.main(argv[1:])
    from ..transformers import cli

    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
