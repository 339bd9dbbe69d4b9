"""Packaging (setup.py): the wheel holds every module of the three packages, subpackages included."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "tfrecords", "trainer")


def test_the_wheel_holds_every_module_of_pipeline_tfrecords_and_trainer(tmp_path):
    # Built from a copy of the sources, so that the build leaves nothing in the repository.
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(REPO / "setup.py", source)
    shutil.copy(REPO / "xlnet_cli.py", source)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    # --no-build-isolation: the build uses this environment's setuptools and wheel (nothing downloads)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    [wheel] = (tmp_path / "dist").glob("xlnet_pretrain-*.whl")
    inside = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    sources = {str(path.relative_to(REPO)) for package in PACKAGES for path in (REPO / package).rglob("*.py")}
    assert sources - inside == set()
    assert {"xlnet_cli.py", "trainer/task.py", "trainer/runtime/restore.py"} <= inside
