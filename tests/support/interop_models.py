"""Tiny models and real-text inputs shared by the interop tests (Hugging Face and TF1 formats).

Every weight is set to distinct random values (LayerNorm and biases included), so a tensor mapped
to the wrong place, or not transposed, changes the outputs.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer.models.config import ModelConfig, sequence_model_config
from trainer.models.head_spec import HeadSpec
from trainer.models.heads import build_head
from trainer.models.network import build_network
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import corpus_lines

# d_head = d_model / n_head, as transformers requires.
TINY = dict(n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, mem_len=6, reuse_len=4)
LABELS = ("negative", "neutral", "positive")
HEADS = {"classification": HeadSpec("classification", LABELS), "regression": HeadSpec("regression"),
         "multiple-choice": HeadSpec("multiple-choice")}
# The SQuAD head (XLNetForQuestionAnswering), with beam widths other than the defaults (5, 5).
SQUAD = HeadSpec("squad", start_n_top=3, end_n_top=2)


def tiny_config(vocab_size: int, **changes) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, **{**TINY, **changes})


def randomize(model, seed: int) -> None:
    """Every weight of ``model`` drawn afresh (normal, std 0.5), so none is a default 0 or 1."""
    rng = np.random.default_rng(seed)
    for weight in model.trainable_weights:
        weight.assign(rng.normal(0.0, 0.5, weight.shape).astype(np.float32))


def text_inputs(vocab, length: int = 12, batch: int = 2, skip: int = 0):
    """ids and segments [batch, length] of real sentences (A + <sep> + <cls>, cut to fit)."""
    processor = vocab.processor()
    ids = [processor.encode(text)[:length - 2] for text in corpus_lines(batch, skip=skip, longer_than=40)]
    special = vocab.special_ids
    rows = [[special.pad] * (length - 2 - len(row)) + row + [special.sep, special.cls] for row in ids]
    segments = [[0] * (length - 1) + [2] for _ in rows]
    return np.array(rows, np.int32), np.array(segments, np.int32)


def pretraining_outputs(network, vocab, seed: int = 0) -> dict[str, np.ndarray]:
    """Two-stream logits with memory and a permutation mask, the new memory, and the content
    stream, on real text: what must survive a round trip."""
    ids, segments = text_inputs(vocab)
    rng = np.random.default_rng(seed)
    batch, length = ids.shape
    perm_mask = (rng.random([batch, length, length]) < 0.4).astype(np.float32)
    target_mapping = np.eye(length, dtype=np.float32)[[[1, 5, 8]] * batch]
    mems = [rng.normal(0, 1, [batch, 3, network.config.d_model]).astype(np.float32)
            for _ in range(network.config.n_layer)]
    logits, new_mems = network(ids, segments, perm_mask, target_mapping, mems)
    hidden, _ = network.encode(ids, segments)
    outputs = {"logits": logits.numpy(), "hidden": hidden.numpy()}
    outputs.update({f"new_mems_{i}": mem.numpy() for i, mem in enumerate(new_mems or [])})
    return outputs


def head_inputs(vocab, task: str) -> dict[str, tf.Tensor]:
    """The fine-tuning inputs of ``task`` on real text ([batch, options, length] for multiple choice)."""
    ids, segments = text_inputs(vocab, batch=4 if task == "multiple-choice" else 2, skip=3)
    mask = np.ones_like(ids)
    inputs = {"input_ids": ids, "segment_ids": segments, "input_mask": mask}
    if task == "multiple-choice":
        inputs = {name: value.reshape(2, 2, -1) for name, value in inputs.items()}
    return {name: tf.constant(value) for name, value in inputs.items()}


def squad_inputs(vocab, length: int = 16, skip: int = 7) -> dict[str, tf.Tensor]:
    """SQuAD-style inputs on real text, two rows, left-padded with <cls> last: the first three
    real pieces play the question (segment 0) and the rest the context (segment 1); ``p_mask`` is 1
    on padding, question and <sep>; gold ``start_positions`` lie in the context."""
    ids, _ = text_inputs(vocab, length=length, batch=2, skip=skip)
    ids[1, :4] = vocab.special_ids.pad  # the second row shorter: real left padding
    special = vocab.special_ids
    real = ids != special.pad
    positions = np.arange(length)[None]
    question = real & (positions < real.argmax(axis=1)[:, None] + 3)
    segments = np.where(question | ~real, 0, 1)
    segments[:, -1] = 2
    p_mask = (~real | question | (ids == special.sep)).astype(np.float32)
    inputs = {"input_ids": ids, "segment_ids": segments.astype(np.int32), "input_mask": real.astype(np.int32),
              "p_mask": p_mask}
    return {name: tf.constant(value) for name, value in inputs.items()}


def squad_outputs(head, inputs: dict, start_positions=(10, 12)) -> dict[str, np.ndarray]:
    """The beam (``beam/...``) and the outputs teacher-forced on ``start_positions`` (``gold/...``)."""
    beam = head(inputs)
    gold = head({**inputs, "start_positions": tf.constant(start_positions, tf.int32)})
    return {**{f"beam/{name}": value.numpy() for name, value in beam.items()},
            **{f"gold/{name}": value.numpy() for name, value in gold.items()}}


def write_model_dir(path: str, config: ModelConfig, vocab, seed: int = 1, head: HeadSpec | None = None,
                    uncased: bool | None = None):
    """A model directory (or a fine-tuned one with ``head``) with random weights; returns
    (network, head model or None)."""
    directory = ModelDirectory(path)
    network = build_network(sequence_model_config(config) if head is not None else config)
    head_model = None if head is None else build_head(head, network)
    randomize(head_model if head_model is not None else network, seed)
    directory.write_model_files(network.config, vocab.special_ids.to_dict(), vocab.path, uncased=uncased)
    objects = {"model": network}
    if head is not None:
        directory.write_head_files(head)
        objects["head"] = head_model
    tf.train.CheckpointManager(tf.train.Checkpoint(**objects), directory.checkpoints, max_to_keep=1).save()
    return network, head_model


def restore_model_dir(path: str):
    """(network, head model or None) of a model directory written by an import."""
    from trainer.runtime.restore import restore_model

    restored = restore_model(ModelDirectory(path), whole_sequence=False)
    return restored.network, restored.head


def assert_same_weights(expected, actual, skip: tuple[str, ...] = ()) -> None:
    """Same trainable variables in the same order, byte for byte (but the paths in ``skip``)."""
    assert [w.path for w in expected.trainable_weights] == [w.path for w in actual.trainable_weights]
    for mine, theirs in zip(expected.trainable_weights, actual.trainable_weights):
        if mine.path not in skip:
            assert mine.numpy().tobytes() == theirs.numpy().tobytes(), mine.path
