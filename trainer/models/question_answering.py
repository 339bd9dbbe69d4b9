"""Extractive question answering: the XLNet network with XLNet's SQuAD head, its loss and its beam.

As the original (function_builder.get_qa_outputs, run_squad.py) and Hugging Face
(XLNetForQuestionAnswering) define them, on the inputs trainer/inputs/squad.py builds (left-padded,
``<cls>`` last, ``p_mask`` 1 where no answer can be):

* start logits: ``start_logits/dense`` on every position, p_mask -> -1e30, log-softmax;
* end logits conditioned on a start state (``end_logits/dense_0`` on [h_j ; h_start], tanh,
  ``LayerNorm``, ``dense_1``): when training on the GOLD start, at inference on each of the
  ``start_n_top`` best starts, keeping its ``end_n_top`` best ends;
* the answerability logit (``answer_class``) from [start feature ; h_<cls>], where the start
  feature is the softmax(start logits)-weighted sum of the states (in training too, as the
  original; Hugging Face uses the gold start state there);
* loss (the original's): ½ (CE_start + CE_end) + ½ BCE(answer-class logit, is_impossible).

Outputs are float32 log-probabilities (Hugging Face's beam returns probabilities instead) and
the beam is flattened start-major: entry i·end_n_top + j is end j of start i.
"""
from __future__ import annotations

from typing import Mapping

import keras
from keras import ops

from trainer.layers.answer_span import AnswerClass, EndLogits, StartLogits
from trainer.models import backend_ops
from trainer.models.backend_ops import Tensor
from trainer.models.head_spec import check_beam_widths
from trainer.models.network import XLNetNetwork, head_model_config, head_model_from_config

INPUTS = ("input_ids", "segment_ids", "input_mask", "p_mask")


class XLNetForQuestionAnswering(keras.Model):
    """network -> start logits, end logits given a start, answer-class logit.

    Args:
      network: an XLNetNetwork (config from ``trainer.models.config.sequence_model_config``).
      start_n_top, end_n_top: beam widths at inference.
    Call: dict of int32 ``input_ids``, ``segment_ids``, ``input_mask`` (1 = real) and float
    ``p_mask`` (1 = not an answer position), each [batch, seq_len], <cls> last.
      * With int32 ``start_positions`` [batch] (training, or an eval loss): float32
        ``start_log_probs``, ``end_log_probs`` [batch, seq_len] (ends given the gold start) and
        ``cls_logits`` [batch].
      * Without: the beam: float32 ``start_top_log_probs`` [batch, start_n_top], int32
        ``start_top_index`` [batch, start_n_top], float32 ``end_top_log_probs`` and int32
        ``end_top_index`` [batch, start_n_top * end_n_top] (start-major), float32 ``cls_logits`` [batch].
    """

    def __init__(self, network: XLNetNetwork, start_n_top: int, end_n_top: int, **kwargs):
        super().__init__(**kwargs)
        check_beam_widths(start_n_top, end_n_top)
        config = network.config
        self.network, self.start_n_top, self.end_n_top = network, int(start_n_top), int(end_n_top)
        self.start_logits = StartLogits(config.d_model, config.initializer_range, name="start_logits",
                                        dtype=self.dtype_policy)
        self.end_logits = EndLogits(config.d_model, config.initializer_range, name="end_logits",
                                    dtype=self.dtype_policy)
        self.answer_class = AnswerClass(config.d_model, config.dropout, config.initializer_range,
                                        name="answer_class", dtype=self.dtype_policy)
        self.built = True  # every weight exists now, so a checkpoint can be restored before the first call

    def call(self, inputs: Mapping[str, Tensor], training: bool = False) -> dict[str, Tensor]:
        hidden, _ = self.network.encode(inputs["input_ids"], inputs["segment_ids"], input_mask=inputs["input_mask"],
                                        training=training)
        return self.outputs_from_hidden(hidden, inputs["p_mask"], inputs.get("start_positions"), training)

    def outputs_from_hidden(self, hidden: Tensor, p_mask: Tensor, start_positions: Tensor | None = None,
                            training: bool = False) -> dict[str, Tensor]:
        """The head alone on content-stream states [batch, seq_len, d_model] (<cls> last); outputs
        as :class:`XLNetForQuestionAnswering` documents (teacher-forced with ``start_positions``,
        else the beam)."""
        start_logits = self.start_logits(hidden, p_mask)
        start_log_probs = ops.log_softmax(start_logits, axis=-1)
        start_feature = ops.einsum("bl,bld->bd", ops.cast(ops.softmax(start_logits, axis=-1), hidden.dtype), hidden)
        cls_logits = self.answer_class(start_feature, hidden[:, -1], training=training)
        if start_positions is not None:
            gold_start = backend_ops.batch_gather(hidden, ops.cast(start_positions, "int32")[:, None])  # [batch, 1, d]
            end_logits = self.end_logits(hidden, gold_start, p_mask)[:, 0]
            return {"start_log_probs": start_log_probs, "end_log_probs": ops.log_softmax(end_logits, axis=-1),
                    "cls_logits": cls_logits}
        start_top_log_probs, start_top_index = ops.top_k(start_log_probs, k=self.start_n_top)
        start_states = backend_ops.batch_gather(hidden, start_top_index)  # [batch, start_n_top, d]
        end_log_probs = ops.log_softmax(self.end_logits(hidden, start_states, p_mask), axis=-1)
        end_top_log_probs, end_top_index = ops.top_k(end_log_probs, k=self.end_n_top)  # [batch, starts, ends]
        flat = [-1, self.start_n_top * self.end_n_top]
        return {"start_top_log_probs": start_top_log_probs, "start_top_index": start_top_index,
                "end_top_log_probs": ops.reshape(end_top_log_probs, flat),
                "end_top_index": ops.reshape(end_top_index, flat), "cls_logits": cls_logits}

    def get_config(self) -> dict:
        return head_model_config(self, start_n_top=self.start_n_top, end_n_top=self.end_n_top)

    @classmethod
    def from_config(cls, config: dict) -> "XLNetForQuestionAnswering":
        return head_model_from_config(cls, config)


def squad_losses(outputs: Mapping[str, Tensor], start_positions: Tensor, end_positions: Tensor,
                 is_impossible: Tensor, answer_class: bool = True) -> Tensor:
    """Per-feature losses [batch]; their batch mean is the original's total loss.

    loss = ½ (−log p_start[start] − log p_end[end]) + ½ sigmoid_CE(cls_logits, is_impossible),
    the last term only with ``answer_class`` (the original always adds it, on SQuAD 1.1 too, where
    a window without the answer is is_impossible).

    Args:
      outputs: the teacher-forced outputs of XLNetForQuestionAnswering (start_log_probs,
        end_log_probs [batch, seq_len], cls_logits [batch]).
      start_positions, end_positions: int [batch]; is_impossible: float or int [batch].
    """
    def cross_entropy(log_probs: Tensor, positions: Tensor) -> Tensor:
        return -backend_ops.batch_gather(log_probs, ops.cast(positions, "int32")[:, None])[:, 0]

    losses = 0.5 * (cross_entropy(outputs["start_log_probs"], start_positions)
                    + cross_entropy(outputs["end_log_probs"], end_positions))
    if answer_class:
        losses += 0.5 * ops.binary_crossentropy(ops.cast(is_impossible, "float32"), outputs["cls_logits"],
                                                from_logits=True)
    return losses
