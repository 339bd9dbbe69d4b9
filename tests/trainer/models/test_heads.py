"""The head a HeadSpec names, built over a network (trainer/models/heads.py)."""
from __future__ import annotations

from trainer.models.config import ModelConfig, sequence_model_config
from trainer.models.head_spec import HeadSpec
from trainer.models.heads import build_head
from trainer.models.network import build_network
from trainer.models.question_answering import XLNetForQuestionAnswering
from trainer.models.sequence_model import XLNetForSequenceTask

TINY = ModelConfig(vocab_size=64, n_layer=1, d_model=16, n_head=2, d_head=8, d_inner=32)


def test_each_spec_builds_its_head_over_the_network():
    network = build_network(sequence_model_config(TINY))
    classifier = build_head(HeadSpec("classification", ("a", "b", "c")), network)
    assert isinstance(classifier, XLNetForSequenceTask) and classifier.network is network
    assert (classifier.task, classifier.num_labels) == ("classification", 3)
    assert build_head(HeadSpec("multiple-choice"), network).num_labels == 1
    squad = build_head(HeadSpec("squad", start_n_top=4, end_n_top=3), network)
    assert isinstance(squad, XLNetForQuestionAnswering) and (squad.start_n_top, squad.end_n_top) == (4, 3)
