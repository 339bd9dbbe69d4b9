"""The fine-tuning head a :class:`~trainer.models.head_spec.HeadSpec` names, built over a network.

The one place a head model is built from a spec: an :class:`XLNetForSequenceTask`
(trainer/models/sequence_model.py) on the ``<cls>`` summary, or for squad an
:class:`XLNetForQuestionAnswering` (trainer/models/question_answering.py) with the spec's beam
widths. The spec itself and its rules are TensorFlow-free, in trainer/models/head_spec.py.
"""
from __future__ import annotations

import keras

# TASKS: trainer/commands/plan.py still reads it here; to go once it imports trainer.models.head_spec.
from trainer.models.head_spec import TASKS, HeadSpec  # noqa: F401
from trainer.models.network import XLNetNetwork
from trainer.models.question_answering import XLNetForQuestionAnswering
from trainer.models.sequence_model import XLNetForSequenceTask


def build_head(spec: HeadSpec, network: XLNetNetwork) -> keras.Model:
    """The head model of ``spec`` over ``network`` (every weight created, ready for a restore or an
    assign): an XLNetForSequenceTask, or for squad an XLNetForQuestionAnswering."""
    if spec.task == "squad":
        return XLNetForQuestionAnswering(network, spec.start_n_top, spec.end_n_top)
    return XLNetForSequenceTask(network, spec.task, spec.num_labels)
