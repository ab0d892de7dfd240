"""`pip install ./python` builds libglyd.so and ships it inside the package."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_carries_the_library_and_runs(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT / "python")],
        check=True,
    )
    (wheel,) = tmp_path.glob("glyd-*.whl")
    assert wheel.name.endswith("-py3-none-linux_x86_64.whl")
    with zipfile.ZipFile(wheel) as z:
        assert "glyd/libglyd.so" in z.namelist()
        z.extractall(tmp_path / "site")
    # the installed package finds its own library (no GLYD_LIBRARY) and diagnoses itself
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "glyd"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert str(tmp_path / "site" / "glyd" / "libglyd.so") in out.stdout
    assert "glyd-v1, glyd-v2" in out.stdout
