"""Fine-tuning models: the XLNet network with a sequence head, for classification, regression and
multiple choice, as the original (run_classifier.py, run_race.py) and Hugging Face
(XLNetForSequenceClassification, XLNetForMultipleChoice) define them.

Inputs are the serving encoder's (trainer/serving/text_encoder.py): int32 ``input_ids``, ``segment_ids``,
``input_mask`` (1 = real token), left-padded so that ``<cls>`` is the last position. The head is
the sequence summary of that position (trainer/layers/sequence_summary.py) followed by a dense
layer named ``logits_proj`` to the number of labels (1 for regression, 1 per option for multiple
choice). Fine-tuning runs without permutation or bi_data, and without memory unless a text is read
over several segments (inputs with a segment axis: the last segment's ``<cls>`` is read).
"""
from __future__ import annotations

from typing import Mapping

import keras
from keras import ops

from trainer.layers.sequence_summary import SequenceSummary
from trainer.models import backend_ops
from trainer.models.backend_ops import Tensor
from trainer.models.head_spec import SEQUENCE_TASKS, check_label_count, check_task, logits_units
from trainer.models.network import XLNetNetwork, head_model_config, head_model_from_config

INPUTS = ("input_ids", "segment_ids", "input_mask")


class XLNetForSequenceTask(keras.Model):
    """network -> summary of <cls> -> ``logits_proj``.

    Args:
      network: an XLNetNetwork (its config should come from ``trainer.models.config.sequence_model_config``).
      task: one of SEQUENCE_TASKS (trainer/models/head_spec.py: the fine-tuning task kind).
      num_labels: classes for classification (ignored otherwise).
    Call: dict of int32 ``input_ids``, ``segment_ids``, ``input_mask``, each [batch, seq_len]
    ([batch, options, seq_len] for multiple choice) -> float32 logits [batch, num_labels]
    (classification), scores [batch] (regression) or logits [batch, options] (multiple choice).
    A long text read over S segments (fine-tuning's ``max_segments``; the text encoder's
    ``encode_segments``): each input [batch, S, seq_len] ([batch, options, S, seq_len]); the
    network reads the segments in order through its memory (``encode_last_segment``) and the head
    reads the last segment's ``<cls>``.
    """

    def __init__(self, network: XLNetNetwork, task: str, num_labels: int = 1, **kwargs):
        super().__init__(**kwargs)
        check_task(task, SEQUENCE_TASKS)
        check_label_count(task, num_labels)
        config = network.config
        self.network, self.task = network, task
        self.num_labels = logits_units(task, num_labels)
        self.sequence_summary = SequenceSummary(config.d_model, config.dropout, config.initializer_range,
                                                name="sequence_summary", dtype=self.dtype_policy)
        self.logits_proj = keras.layers.Dense(
            self.num_labels, name="logits_proj", dtype=self.dtype_policy,
            kernel_initializer=keras.initializers.RandomNormal(stddev=config.initializer_range))
        self.logits_proj.build((None, config.d_model))
        self.built = True  # every weight exists now, so a checkpoint can be restored before the first call

    def call(self, inputs: Mapping[str, Tensor], training: bool = False) -> Tensor:
        if self.task == "multiple-choice":
            options = backend_ops.dynamic_shape(inputs["input_ids"])[1]
            flat = {name: _options_flattened(inputs[name]) for name in INPUTS}
            return ops.reshape(self._logits(flat, training), [-1, options])
        logits = self._logits(inputs, training)
        return logits[:, 0] if self.task == "regression" else logits

    def _logits(self, inputs: Mapping[str, Tensor], training: bool) -> Tensor:
        """Rows [rows, seq_len], or [rows, segments, seq_len] read through the memory -> logits."""
        ids, segments, mask = (inputs[name] for name in INPUTS)
        if len(ids.shape) == 3:
            hidden, _ = self.network.encode_last_segment(ids, segments, input_mask=mask, training=training)
        else:
            hidden, _ = self.network.encode(ids, segments, input_mask=mask, training=training)
        return self.logits_from_hidden(hidden, training)

    def logits_from_hidden(self, hidden: Tensor, training: bool = False) -> Tensor:
        """The head alone: content-stream states [rows, seq_len, d_model] (<cls> last) -> float32
        logits [rows, num_labels] (one column for regression and for each option of multiple choice)."""
        return ops.cast(self.logits_proj(self.sequence_summary(hidden, training=training)), "float32")

    def get_config(self) -> dict:
        return head_model_config(self, task=self.task, num_labels=self.num_labels)

    @classmethod
    def from_config(cls, config: dict) -> "XLNetForSequenceTask":
        return head_model_from_config(cls, config)


def _options_flattened(tensor: Tensor) -> Tensor:
    """[batch, options, ...] -> [batch * options, ...], keeping the static sizes of the trailing axes
    (the network needs a static length, and a static number of segments)."""
    dynamic = backend_ops.dynamic_shape(tensor)
    trailing = [size if size is not None else dynamic[axis] for axis, size in enumerate(tensor.shape) if axis >= 2]
    return ops.reshape(tensor, [-1, *trailing])


def task_loss(task: str, outputs: Tensor, labels: Tensor) -> Tensor:
    """Per-example losses [batch] as the original computes them (its loss is their batch mean):
    softmax cross entropy over labels or options, or squared error (no 1/2) for regression."""
    if task == "regression":
        return ops.square(outputs - ops.cast(labels, "float32"))
    return ops.sparse_categorical_crossentropy(ops.cast(labels, "int32"), outputs, from_logits=True)
