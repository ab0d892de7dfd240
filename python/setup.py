"""Builds libglyd.so with the repository's Makefile and ships it in the package."""

import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class BuildWithLibrary(build_py):
    def run(self):
        lib = ROOT / "build" / "libglyd.so"
        if (ROOT / "Makefile").is_file():
            subprocess.run(["make", "-C", str(ROOT), "lib"], check=True)
        if not lib.is_file():
            raise RuntimeError(f"libglyd.so was not built at {lib}; run `make lib` in the repository root")
        shutil.copy2(lib, HERE / "glyd" / "libglyd.so")
        super().run()


class BinaryDistribution(Distribution):
    """The wheel carries a native library, so it is platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
