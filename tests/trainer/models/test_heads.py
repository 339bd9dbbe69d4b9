"""Fine-tuning heads as a model records them (trainer/models/heads.py): HeadSpec and the head it builds."""
from __future__ import annotations

import pytest

from trainer.models.config import ModelConfig, sequence_model_config
from trainer.models.heads import SEQUENCE_TASKS, TASKS, HeadSpec
from trainer.models.network import build_network
from trainer.models.question_answering import XLNetForQuestionAnswering
from trainer.models.sequence_model import XLNetForSequenceTask

TINY = ModelConfig(vocab_size=64, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32)


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


def test_each_spec_builds_its_head_over_the_network():
    network = build_network(sequence_model_config(TINY))
    classifier = HeadSpec("classification", ("a", "b", "c")).build(network)
    assert isinstance(classifier, XLNetForSequenceTask) and classifier.network is network
    assert (classifier.task, classifier.num_labels) == ("classification", 3)
    assert HeadSpec("multiple-choice").build(network).num_labels == 1
    squad = HeadSpec("squad", start_n_top=4, end_n_top=3).build(network)
    assert isinstance(squad, XLNetForQuestionAnswering) and (squad.start_n_top, squad.end_n_top) == (4, 3)
    assert HeadSpec("squad", start_n_top=1, end_n_top=1).sequence_task is False
