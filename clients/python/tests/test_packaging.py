"""The package as pip builds it ships the scripts and the py.typed marker."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_wheel_ships_scripts_and_marker(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        "__pycache__", ".pytest_cache", ".mypy_cache", "build", "*.egg-info", "*.go", "testdata", "tests"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "-w", str(out), str(src)], check=True)
    wheels = list(out.glob("dtq-*.whl"))
    assert len(wheels) == 1
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for f in ["dtq/__init__.py", "dtq/client.py", "dtq/_go.py", "dtq/_gostr.py", "dtq/py.typed",
              "dtq/lua/enqueue.lua", "dtq/lua/cancel.lua", "dtq/lua/wait.lua"]:
        assert f in names, f
    with zipfile.ZipFile(wheels[0]) as z:
        assert z.read("dtq/lua/enqueue.lua") == (ROOT / "dtq" / "lua" / "enqueue.lua").read_bytes()
