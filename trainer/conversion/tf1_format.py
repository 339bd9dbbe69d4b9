"""The original TF1 XLNet release layout: writing it (the inverse of trainer/conversion/tf1_checkpoint.py),
and run_squad.py's head names for both directions.

OUTPUT/xlnet_model.ckpt.{index,data-00000-of-00001} with the original variable names
(``model/transformer/...``, ``model/lm_loss/bias``), OUTPUT/xlnet_config.json with the original
keys and OUTPUT/spiece.model: what the original's run_classifier.py / run_squad.py take as
--init_checkpoint and what transformers' own TF-to-PyTorch converter reads. Local or gs://.

A fine-tuned SQuAD model also writes its head under run_squad.py's names
(function_builder.get_qa_outputs: top-level ``start_logits/dense``, ``end_logits/{dense_0,
LayerNorm, dense_1}``, ``answer_class/{dense_0, dense_1}``; tf.layers kernels are [in, out] like
ours). The other heads are not written: the original names them after its --task_name.

The head's names live here once (question_answering_variable_map) and serve both directions:
`xlnet import-checkpoint --checkpoint` (trainer/commands/import_checkpoint.py) reads a run_squad.py
checkpoint's head through the same table (build_question_answering_head) into a fine-tuned squad
model directory, with run_squad.py's default beam widths (RUN_SQUAD_HEAD).
"""
from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Iterable, Optional

import numpy as np
import tensorflow as tf

from tfrecords.errors import UsageError
from trainer.conversion.tf1_checkpoint import ORIGINAL_CONFIG_KEYS, CheckpointImportError, original_variable_map
from trainer.models.head_spec import HeadSpec
from trainer.models.heads import build_head
from trainer.models.network import XLNetNetwork
from trainer.runtime.storage import write_bytes, write_json

if TYPE_CHECKING:
    from trainer.models.question_answering import XLNetForQuestionAnswering

CHECKPOINT_NAME = "xlnet_model.ckpt"
CONFIG_NAME = "xlnet_config.json"
VOCAB_NAME = "spiece.model"
# The original implementation knows these activations (its "gelu" is the tanh approximation, as ours).
ORIGINAL_ACTIVATIONS = ("gelu", "relu")
# The head an imported run_squad.py checkpoint becomes: its checkpoint does not record the beam
# widths, so they are run_squad.py's flag defaults (--start_n_top 5, --end_n_top 5).
RUN_SQUAD_HEAD = HeadSpec("squad", start_n_top=5, end_n_top=5)


class TF1FormatError(UsageError):
    """A model the original release layout cannot express; the message names the field."""


def original_config(network: XLNetNetwork) -> dict:
    """xlnet_config.json values: exactly the original's keys (n_token is our vocab_size)."""
    config = network.config
    if config.ff_activation not in ORIGINAL_ACTIVATIONS:
        raise TF1FormatError(f"model_config.json has ff_activation {config.ff_activation!r}; the original "
                             f"implementation has only {' and '.join(ORIGINAL_ACTIVATIONS)}")
    return {theirs: getattr(config, ours) for theirs, ours in ORIGINAL_CONFIG_KEYS.items()}


def original_weights(network: XLNetNetwork) -> dict[str, np.ndarray]:
    """Original variable name -> float32 array, every variable the importer reads."""
    return {name: variable.numpy() for name, variable in original_variable_map(network).items()}


def question_answering_variable_map(head: XLNetForQuestionAnswering) -> dict[str, tf.Variable]:
    """run_squad.py's variable name -> the variable of a trainer.models.question_answering.XLNetForQuestionAnswering
    holding it: the one table of the head's names, for the export and the import alike."""
    start, end, answer = head.start_logits, head.end_logits, head.answer_class
    return {"start_logits/dense/kernel": start.dense.kernel, "start_logits/dense/bias": start.dense.bias,
            "end_logits/dense_0/kernel": end.dense_0.kernel, "end_logits/dense_0/bias": end.dense_0.bias,
            "end_logits/LayerNorm/gamma": end.layer_norm.gamma, "end_logits/LayerNorm/beta": end.layer_norm.beta,
            "end_logits/dense_1/kernel": end.dense_1.kernel, "end_logits/dense_1/bias": end.dense_1.bias,
            "answer_class/dense_0/kernel": answer.dense_0.kernel, "answer_class/dense_0/bias": answer.dense_0.bias,
            "answer_class/dense_1/kernel": answer.dense_1.kernel}


def question_answering_weights(head: XLNetForQuestionAnswering) -> dict[str, np.ndarray]:
    """run_squad.py's variable name -> float32 array, for a trainer.models.question_answering.XLNetForQuestionAnswering."""
    return {name: variable.numpy() for name, variable in question_answering_variable_map(head).items()}


def build_question_answering_head(network: XLNetNetwork, names: Iterable[str], source: str
                                  ) -> Optional[XLNetForQuestionAnswering]:
    """The squad head (an XLNetForQuestionAnswering over ``network``, run_squad.py's beam widths)
    when ``names``, a checkpoint's variable names, hold run_squad.py's head; None when they hold
    none of it. Raises CheckpointImportError naming the missing variables when they hold only some."""
    # Built before knowing whether it is needed: its variables are what the one name table maps,
    # so the names come from there rather than from a second list (an unused head costs nothing).
    head = build_head(RUN_SQUAD_HEAD, network)
    expected = question_answering_variable_map(head)
    present = set(names)
    missing = [name for name in expected if name not in present]
    if len(missing) == len(expected):
        return None  # an encoder-only release (or run_classifier.py's, whose head is named per task)
    if missing:
        raise CheckpointImportError(f"{source} holds part of run_squad.py's squad head but lacks "
                                    f"{', '.join(missing)}: a run_squad.py checkpoint has all of "
                                    f"{', '.join(expected)}")
    return head


def write_original_checkpoint(prefix: str, weights: dict[str, np.ndarray]) -> str:
    """A TF checkpoint (V2 format, what a TF1 Saver writes) holding exactly ``weights`` under their names."""
    names = sorted(weights)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(weights[name]) for name in names])
    return prefix


def write_tf1_directory(output: str, network: XLNetNetwork, sp_model_proto: bytes, squad_head=None) -> list[str]:
    """Writes the release layout of ``network`` (and of ``squad_head``, an XLNetForQuestionAnswering,
    when given) to ``output``; returns the files written."""
    output = output.rstrip("/") or "/"
    config = original_config(network)  # refuses what the original cannot express before writing
    weights = original_weights(network)
    if squad_head is not None:
        weights.update(question_answering_weights(squad_head))
    tf.io.gfile.makedirs(output)
    prefix = write_original_checkpoint(posixpath.join(output, CHECKPOINT_NAME), weights)
    write_bytes(posixpath.join(output, VOCAB_NAME), sp_model_proto)
    write_json(posixpath.join(output, CONFIG_NAME), config)
    return [prefix + ".index", prefix + ".data-00000-of-00001", posixpath.join(output, CONFIG_NAME),
            posixpath.join(output, VOCAB_NAME)]
