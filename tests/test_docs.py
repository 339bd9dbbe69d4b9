"""The documentation keeps up with the code: docs/architecture.md names every module."""
from __future__ import annotations

import re
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
