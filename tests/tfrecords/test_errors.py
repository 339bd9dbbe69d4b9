"""The two error bases and their exit codes (tfrecords/errors.py): every error the packages raise
for a user to act on derives from one of them, so the `xlnet` command maps it in one place."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tfrecords.errors import EXIT_DATA, EXIT_USAGE, DataError, UsageError, exit_code

REPO = Path(__file__).resolve().parents[2]


def error_classes() -> list[tuple[str, str]]:
    """(module, class name) of every class in pipeline/, tfrecords/ and trainer/ whose name ends in
    Error, or that derives from another such class by name (TrainingStopped's subclasses)."""
    found = []
    for package in ("pipeline", "tfrecords", "trainer"):
        for path in sorted((REPO / package).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and (node.name.endswith(("Error", "Stopped", "Fit"))):
                    found.append((module, node.name))
    return found


def test_a_usage_error_exits_2_and_a_data_error_3():
    assert (exit_code(UsageError("x")), exit_code(DataError("x"))) == (EXIT_USAGE, EXIT_DATA) == (2, 3)


def test_any_other_exception_has_no_exit_code_of_ours():
    assert exit_code(ValueError("a bug")) is None and exit_code(KeyError("k")) is None


def test_a_usage_error_is_still_a_value_error():
    assert issubclass(UsageError, ValueError) and not issubclass(DataError, ValueError)


@pytest.mark.parametrize("module, name", error_classes())
def test_every_error_class_derives_from_one_of_the_two_bases(module, name):
    if module.startswith("pipeline."):
        pytest.importorskip("apache_beam")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, (UsageError, DataError)), f"{module}.{name} derives from neither base"


def test_the_error_classes_are_found():
    names = {name for _, name in error_classes()}
    assert {"ManifestError", "DamagedDataError", "TrainingStopped", "DoesNotFit", "CorpusError"} <= names
