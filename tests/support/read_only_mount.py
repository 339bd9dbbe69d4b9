"""A read-only directory for tests, by a read-only bind mount.

Permission bits do not make a directory read-only for root (the tests' user in CI and in the
container), so a directory whose writes must fail (EROFS) is a bind mount remounted read-only:
``read_only_directory(parent)`` yields ``parent/ro``, a read-only view of ``parent/ro-source``
holding an empty directory ``model``, and unmounts it afterwards. Without the right to mount (not
root, no CAP_SYS_ADMIN) the test is skipped with the reason.
"""
from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@contextlib.contextmanager
def read_only_directory(parent: Path) -> Iterator[Path]:
    source, view = parent / "ro-source", parent / "ro"
    (source / "model").mkdir(parents=True)
    view.mkdir()
    try:
        bound = _mount("--bind", str(source), str(view))
    except FileNotFoundError:
        pytest.skip("no mount command: a read-only directory for root needs a read-only bind mount")
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount (root with CAP_SYS_ADMIN needed): {bound.stderr.strip()}")
    try:
        remounted = _mount("-o", "remount,ro,bind", str(view))
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remounted.stderr.strip()}")
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)
