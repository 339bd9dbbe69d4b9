"""Which head a model carries (trainer/models/head_spec.py): the task kinds, HeadSpec and the head
rules the head models share, all without TensorFlow."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainer.models.head_spec import (SEQUENCE_TASKS, TASKS, HeadSpec, check_beam_widths, check_label_count,
                                      check_task, logits_units)

REPO = Path(__file__).resolve().parents[3]


def test_the_tasks_are_the_three_sequence_heads_and_squad():
    assert SEQUENCE_TASKS == ("classification", "regression", "multiple-choice")
    assert TASKS == SEQUENCE_TASKS + ("squad",)


@pytest.mark.parametrize("spec, problem", [
    (dict(task="ner"), "task must be one of classification, regression, multiple-choice, squad"),
    (dict(task="classification", labels=("only",)), "classification needs at least 2 labels, got 1"),
    (dict(task="squad"), "a squad head needs start_n_top and end_n_top of at least 1, got None and None"),
    (dict(task="squad", start_n_top=5, end_n_top=0), "got 5 and 0"),
])
def test_an_impossible_head_is_refused_naming_the_problem(spec, problem):
    with pytest.raises(ValueError, match=problem):
        HeadSpec(**spec)


def test_a_task_outside_the_kinds_given_is_refused_listing_them():
    with pytest.raises(ValueError) as error:
        check_task("squad", SEQUENCE_TASKS)
    assert str(error.value) == "task must be one of classification, regression, multiple-choice, got 'squad'"


def test_only_classification_needs_two_labels():
    with pytest.raises(ValueError, match="classification needs at least 2 labels, got 0"):
        check_label_count("classification", 0)
    check_label_count("regression", 0)
    check_label_count("multiple-choice", 1)


def test_a_classifier_has_one_logit_per_class_every_other_sequence_head_one():
    assert logits_units("classification", 3) == 3
    assert logits_units("regression", 3) == 1
    assert logits_units("multiple-choice", 5) == 1


def test_a_spec_has_the_units_of_its_head():
    assert HeadSpec("classification", ("a", "b", "c")).num_labels == 3
    assert HeadSpec("regression").num_labels == 1
    assert HeadSpec("multiple-choice").num_labels == 1


def test_squad_is_the_one_head_not_on_the_cls_summary():
    assert [HeadSpec(task, ("a", "b")).sequence_task for task in SEQUENCE_TASKS] == [True, True, True]
    assert HeadSpec("squad", start_n_top=1, end_n_top=1).sequence_task is False


def test_the_spec_loads_without_tensorflow():
    code = ("import sys\nimport trainer.models.head_spec\n"
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("widths", [(0, 3), (3, None), (2.0, 2)])
def test_a_squad_beam_width_is_an_integer_of_at_least_one(widths):
    with pytest.raises(ValueError) as error:
        check_beam_widths(*widths)
    assert str(error.value) == (f"a squad head needs start_n_top and end_n_top of at least 1, got {widths[0]} "
                                f"and {widths[1]}")
    check_beam_widths(1, 1)
