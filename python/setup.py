"""Builds libglyd.so with the repository's Makefile and ships it in the package."""

import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

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


class AnyPythonWheel(bdist_wheel):
    """libglyd.so is loaded with ctypes, not as an extension module: one wheel
    serves every Python 3 on the platform."""

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": AnyPythonWheel}, distclass=BinaryDistribution)
