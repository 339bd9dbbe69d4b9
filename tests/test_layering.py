"""The import graph: tfrecords/ at the bottom, Beam only in pipeline/, training and serving free of Beam."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """Top-level package names a source file imports, wherever the import statement is."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def importers(package: str, forbidden: set[str]) -> dict[str, set[str]]:
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        bad = imported_modules(path) & forbidden
        if bad:
            found[str(path.relative_to(REPO))] = bad
    return found


def test_the_contract_package_imports_neither_the_pipeline_nor_the_trainer_nor_beam():
    assert importers("tfrecords", {"pipeline", "trainer", "apache_beam"}) == {}


def test_the_trainer_never_imports_the_pipeline_or_beam():
    assert importers("trainer", {"pipeline", "apache_beam"}) == {}


def test_only_the_pipeline_imports_beam():
    outside = {str(p.relative_to(REPO)) for p in REPO.glob("*.py") if "apache_beam" in imported_modules(p)}
    assert outside == set()


@pytest.mark.parametrize("modules", [("trainer.task", "trainer.export", "tfrecords.reader"),
                                     ("trainer.import_command", "trainer.export_command", "trainer.training_loop",
                                      "tfrecords.manifest", "xlnet_cli")])
def test_training_and_serving_modules_load_without_apache_beam(modules):
    code = ("import sys\n" + "".join(f"import {name}\n" for name in modules)
            + "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam')\n"
            + "assert not loaded, loaded[:5]\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
