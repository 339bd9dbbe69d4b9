"""The import graph: tfrecords/ at the bottom, Beam only in pipeline/, training and serving free of
Beam, and inside trainer/ each subpackage importing only the ones below it (docs/architecture.md)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

import pytest

REPO = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Top-level package names a source file imports, wherever the import statement is."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def imported_trainer_subpackages(path: Path) -> set[str]:
    """The trainer subpackages (``models``, ``runtime``, ...) a source file imports, wherever the
    import statement is; ``trainer.task`` (the entry shim) counts as ``task``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module] if node.module != "trainer" else [f"trainer.{a.name}" for a in node.names]
        names |= {module.split(".")[1] for module in modules if module.startswith("trainer.")}
    return names


# What each subpackage of trainer/ may import besides itself (and tfrecords/). The commands are
# at the top; below them inspection (which reads data as the pretraining task does), tasks, evaluation,
# inputs (which encodes text with the serving encoder), then serving and conversion, runtime and planning,
# configs, models, layers.
ALLOWED = {
    "layers": set(),
    "models": {"layers"},
    "configs": {"models"},
    "runtime": {"planning", "configs", "models", "layers"},  # the JAX step bounds mem_len by the memory model
    "evaluation": {"inputs", "configs"},
    "inputs": {"configs", "serving"},
    "serving": {"runtime", "configs", "models", "layers"},
    "conversion": {"runtime", "configs", "models", "layers"},
    "tasks": {"inputs", "evaluation", "runtime", "serving", "configs", "models", "layers"},
    "inspection": {"tasks", "configs", "models"},
    "planning": {"configs", "models", "layers"},  # the memory / time model of a configuration on a device
    # a run's settings resolved and its controller built, once, for every command and benchmark
    "launch": {"planning", "tasks", "conversion", "inputs", "evaluation", "runtime", "serving", "configs", "models", "layers"},
    "commands": {"launch", "inspection", "planning", "tasks", "inputs", "evaluation", "runtime", "serving",
                 "conversion", "configs", "models", "layers"},
}


def trainer_modules() -> list[Path]:
    return sorted((REPO / "trainer").rglob("*.py"))


def test_every_trainer_module_lives_in_a_subpackage_but_the_entry_shim():
    top = {path.name for path in (REPO / "trainer").glob("*.py")}
    assert top == {"__init__.py", "task.py"}
    assert {path.parent.name for path in trainer_modules()} - {"trainer"} == set(ALLOWED)


def test_each_trainer_subpackage_imports_only_the_ones_below_it():
    wrong = {}
    for path in trainer_modules():
        if path.parent.name in ALLOWED:
            extra = imported_trainer_subpackages(path) - ALLOWED[path.parent.name] - {path.parent.name}
            if extra:
                wrong[str(path.relative_to(REPO))] = extra
    assert wrong == {}


def test_models_use_only_layers_and_the_contract():
    for path in sorted((REPO / "trainer" / "models").rglob("*.py")):
        assert imported_trainer_subpackages(path) <= {"layers", "models"}, path
        assert imported_modules(path) & {"pipeline", "xlnet_cli"} == set(), path


def test_serving_and_conversion_never_use_tasks_or_inputs():
    for package in ("serving", "conversion"):
        for path in sorted((REPO / "trainer" / package).rglob("*.py")):
            assert imported_trainer_subpackages(path) & {"tasks", "inputs", "commands"} == set(), path


def test_nothing_imports_the_commands_but_the_cli_and_the_entry_shim():
    importers_of_commands = {str(path.relative_to(REPO)) for path in trainer_modules()
                             if path.parent.name != "commands" and "commands" in imported_trainer_subpackages(path)}
    assert importers_of_commands == set()
    shim = imported_modules(REPO / "trainer" / "task.py")
    assert shim & {"trainer", "xlnet_cli"} == {"xlnet_cli"}


def test_no_argparse_below_the_commands():
    below = {str(path.relative_to(REPO)) for path in trainer_modules()
             if path.parent.name != "commands" and "argparse" in imported_modules(path)}
    assert below == set()


def importers(package: str, forbidden: set[str]) -> dict[str, set[str]]:
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        bad = imported_modules(path) & forbidden
        if bad:
            found[str(path.relative_to(REPO))] = bad
    return found


def project_modules() -> dict[str, Path]:
    """Every module of pipeline/, tfrecords/ and trainer/ by dotted name (a package by its __init__.py)."""
    found = {}
    for package in ("pipeline", "tfrecords", "trainer"):
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_project_modules(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports, wherever the import statement is (at module
    level, in a function, under TYPE_CHECKING), relative imports resolved: ``from a.b import c`` is the
    module a.b.c when there is one, else a.b; an attribute path falls back to the module holding it."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    imported = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                imported.add(target)
    return imported


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_the_cycle_finder_finds_a_cycle_through_three_modules_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_back_through_others():
    """No import cycles in pipeline/, tfrecords/ or trainer/, counting the imports inside functions:
    a function-level import that closes a cycle is a cycle waiting for the function to move."""
    known = project_modules()
    graph = {name: imported_project_modules(name, path, known) for name, path in known.items()}
    assert import_cycles(graph) == []


def test_the_contract_package_imports_neither_the_pipeline_nor_the_trainer_nor_beam():
    assert importers("tfrecords", {"pipeline", "trainer", "apache_beam"}) == {}


def test_the_trainer_never_imports_the_pipeline_or_beam():
    assert importers("trainer", {"pipeline", "apache_beam"}) == {}


def test_only_the_pipeline_imports_beam():
    outside = {str(p.relative_to(REPO)) for p in REPO.glob("*.py") if "apache_beam" in imported_modules(p)}
    assert outside == set()


# One interpreter imports them all: each new one imports TensorFlow again (10 to 30 s of the default suite).
TRAINING_AND_SERVING_MODULES = (
    "trainer.task", "trainer.commands.train", "trainer.serving.saved_model", "tfrecords.reader",
    "trainer.commands.import_checkpoint", "trainer.commands.export", "trainer.commands.finetune",
    "trainer.runtime.controller", "trainer.tasks.pretraining", "trainer.tasks.sequence", "trainer.tasks.squad",
    "trainer.conversion.format_export", "tfrecords.manifest", "xlnet_cli")


def test_training_and_serving_modules_load_without_apache_beam():
    code = ("import sys\n" + "".join(f"import {name}\n" for name in TRAINING_AND_SERVING_MODULES)
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
def test_train_and_export_run_where_apache_beam_is_not_installed(tmp_path, small_data_dir):
    from support.bundled_data import SMALL_DATA_TRAINING  # the data directory's shapes; it needs no Beam either

    model = str(tmp_path / "model")
    small = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
             "eval_batch_size=4", "train_steps=2", "steps_per_loop=2", "checkpoint_every=2", "eval_every=0"]
    small += SMALL_DATA_TRAINING
    trained = run_without_beam(tmp_path, "train", "--data", small_data_dir, "--model-dir", model,
                               *[arg for item in small for arg in ("--set", item)])
    assert trained.returncode == 0, trained.stderr[-3000:]
    exported = run_without_beam(tmp_path, "export", "--model-dir", model, "--output", str(tmp_path / "serving"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert (tmp_path / "serving" / "1" / "saved_model.pb").is_file()


def test_preprocess_without_apache_beam_names_the_extra_to_install(tmp_path):
    result = run_without_beam(tmp_path, "preprocess", "--input", "x", "--output", "y", "--vocab", "z")
    assert result.returncode == 2
    assert 'needs Apache Beam' in result.stderr and 'pip install "xlnet-pretrain[pipeline]"' in result.stderr


# The project's own top-level modules and packages, and the names tests and benchmarks import them by.
OWN_MODULES = ("pipeline", "tfrecords", "trainer", "xlnet_cli", "demo", "support", "bundled_data", "memory",
               "train_step")


def private_names_used(path: Path) -> list[str]:
    """Private names (``_name``, not ``__dunder__``) of another of our modules that a source file
    imports (``from m import _f``) or reaches through an imported name (``m._f``, ``Class._f``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    used, imported = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] in OWN_MODULES:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    used.append(f"{node.module}.{alias.name}")
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OWN_MODULES:
                    imported[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            used.append(f"{imported[node.value.id]}.{node.attr}")
    return used


def test_no_module_uses_another_modules_private_names():
    files = [path for folder in ("pipeline", "tfrecords", "trainer", "benchmarks", "tests")
             for path in sorted((REPO / folder).rglob("*.py"))] + [REPO / "xlnet_cli.py", REPO / "demo.py"]
    used = {str(path.relative_to(REPO)): names for path in files if (names := private_names_used(path))}
    assert used == {}


def test_a_private_name_reached_through_a_module_is_found(tmp_path):
    source = tmp_path / "reacher.py"
    source.write_text("from trainer.commands import train\nfrom trainer.launch.run_setup import _hidden\n"
                      "train._build_trainer(None)\n")
    assert private_names_used(source) == ["trainer.launch.run_setup._hidden", "trainer.commands.train._build_trainer"]
