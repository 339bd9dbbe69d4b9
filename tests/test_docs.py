"""The documentation keeps up with the code: docs/architecture.md names every module."""
from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from pathlib import Path

from support.bundled_data import REPO

PACKAGES = ("pipeline", "tfrecords", "trainer")


def modules() -> list[Path]:
    """Every module of the three packages, relative to the repository (no __init__.py)."""
    return sorted(path.relative_to(REPO) for package in PACKAGES for path in (REPO / package).rglob("*.py")
                  if path.name != "__init__.py")


def shortest_unique_name(module: Path, all_modules: list[Path]) -> str:
    """The module's file name, with as many of its folders as tell it from every other module's:
    ``reader.py``, but ``inspection/records.py`` since pipeline/ has a records.py too."""
    for depth in range(1, len(module.parts) + 1):
        suffixes = Counter("/".join(other.parts[-depth:]) for other in all_modules)
        name = "/".join(module.parts[-depth:])
        if suffixes[name] == 1:
            return name
    return module.as_posix()


def test_every_module_is_named_in_architecture_md():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    all_modules = modules()
    assert len(all_modules) > 50  # the packages were found
    unnamed = []
    for module in all_modules:
        name = shortest_unique_name(module, all_modules)
        # the name as a whole word: `config.py` is not named by `preprocess_config.py`; a longer path
        # ending in the name (`trainer/models/config.py`) names it too
        if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text):
            unnamed.append(name)
    assert not unnamed, f"docs/architecture.md does not name {len(unnamed)} module(s): {', '.join(unnamed)}"


# Words that speak of the machines this project was written with, not of what a user has.
# A pattern rather than the phrases themselves, so that this file does not say them either.
FOREIGN_WORDS = re.compile(r"\blent (gpu|machine)\b|\bdevice\s+tool\b")


def project_text_files() -> list[Path]:
    """The tracked text files a user reads or runs (recorded fixtures and corpora excepted, and this
    file, which lists the words)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / name for name in listed.splitlines()
            if not name.startswith(("data/", "tests/fixtures/")) and name != "tests/test_docs.py"
            and Path(name).suffix in {".py", ".md", ".sh", ".txt", ".cfg", ".ini", ".toml", ""} and (REPO / name).is_file()]


# Folders every machine has, which scripts may name (a scratch file in /tmp): a checkout placed in one of
# them makes its parent no sign of the machine it was written on.
COMMON_FOLDERS = {"/", "/tmp", "/var/tmp", "/home", "/root", os.path.expanduser("~"), tempfile.gettempdir()}


def test_project_files_name_neither_the_checkouts_own_folder_nor_the_machines_they_were_written_with():
    common = {os.path.realpath(folder) for folder in COMMON_FOLDERS}
    parent = str(REPO.parent)
    folders = [str(REPO)] + ([parent + "/"] if os.path.realpath(parent) not in common else [])
    found = []
    for path in project_text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{path.relative_to(REPO)}: {needle!r}" for needle in folders if needle in text]
        found += [f"{path.relative_to(REPO)}: {match.group(0)!r}" for match in FOREIGN_WORDS.finditer(text.lower())]
    assert len(project_text_files()) > 100  # the files were found
    assert not found, "project files speak of the machine they were written on: " + "; ".join(found)
