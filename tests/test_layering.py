"""The import graph: tfrecords/ at the bottom, Beam only in pipeline/, training and serving free of Beam."""
from __future__ import annotations

import ast
import os
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
                                     ("trainer.import_command", "trainer.export_command", "trainer.controller",
                                      "trainer.pretraining_task", "trainer.finetuning_task", "tfrecords.manifest",
                                      "xlnet_cli")])
def test_training_and_serving_modules_load_without_apache_beam(modules):
    code = ("import sys\n" + "".join(f"import {name}\n" for name in modules)
            + "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam')\n"
            + "assert not loaded, loaded[:5]\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


# Installed on sys.path through PYTHONPATH: an interpreter in which `import apache_beam` fails,
# as on a TPU VM or a serving image with the base install only.
WITHOUT_BEAM = '''
import importlib.abc, sys

class NoBeam(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "apache_beam":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoBeam())
'''


def run_without_beam(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(WITHOUT_BEAM)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]))
    return subprocess.run([sys.executable, str(REPO / "xlnet_cli.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow  # 40 s; the fast tests above import every training and serving module without Beam
def test_train_and_export_run_where_apache_beam_is_not_installed(tmp_path, tiny_data_dir):
    model = str(tmp_path / "model")
    small = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
             "eval_batch_size=4", "train_steps=2", "steps_per_loop=2", "checkpoint_every=2", "eval_every=0"]
    trained = run_without_beam(tmp_path, "train", "--data", tiny_data_dir, "--model-dir", model,
                               *[arg for item in small for arg in ("--set", item)])
    assert trained.returncode == 0, trained.stderr[-3000:]
    exported = run_without_beam(tmp_path, "export", "--model-dir", model, "--output", str(tmp_path / "serving"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (tmp_path / "serving" / "1" / "saved_model.pb").is_file()


def test_preprocess_without_apache_beam_names_the_extra_to_install(tmp_path):
    result = run_without_beam(tmp_path, "preprocess", "--input", "x", "--output", "y", "--vocab", "z")
    assert result.returncode == 2
    assert 'needs Apache Beam' in result.stderr and 'pip install "xlnet-pretrain[pipeline]"' in result.stderr
