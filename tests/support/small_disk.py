"""A small disk for tests: a tmpfs of a given size, to fill up (ENOSPC) on purpose.

``small_tmpfs(directory, size)`` mounts a tmpfs of ``size`` bytes on ``directory`` for the block
and unmounts it afterwards; ``resize(directory, size)`` frees space on it (or takes it away).
Mounting needs root (or CAP_SYS_ADMIN): without it the test is skipped with the reason.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes (whole pages) mounted on ``directory`` for the block."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs (a disk to fill) needs root")
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def resize(directory: Path, size: int) -> None:
    """Gives the tmpfs mounted on ``directory`` ``size`` bytes."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(directory)], check=True)
