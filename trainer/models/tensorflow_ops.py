"""The TensorFlow implementations of the operations trainer/models/backend_ops.py dispatches.

Loaded only on the TensorFlow backend. Each keeps the TensorFlow op the models have always used
where the portable ``keras.ops`` form would build a different graph on TensorFlow: a different op
(a different summation order, so not bit-identical gradients), int64 index copies the memory
model does not count, or a step's memory that grows with the number of segments.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import tensorflow as tf
from tensorflow.python.eager import record


def dynamic_shape(x: tf.Tensor) -> tf.Tensor:
    """``tf.shape(x)``: the shapes the models build stay dynamic, as Grappler has always seen them
    (a static-shaped constant can be folded into one a step keeps for good)."""
    return tf.shape(x)


def batch_gather(x: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """x [B, L, ...], indices [B, P] -> [B, P, ...]: ``tf.gather`` with ``batch_dims=1`` (int32
    indices as they are; ``keras.ops.take_along_axis`` would broadcast them to int64)."""
    return tf.gather(x, indices, batch_dims=1)


def argmax(x: tf.Tensor) -> tf.Tensor:
    """int32 argmax over the last axis, one op (``keras.ops.argmax`` adds a -0.0 fix over all of ``x``)."""
    return tf.argmax(x, axis=-1, output_type=tf.int32)


def tied_logits(rows: tf.Tensor, table: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """rows [N, d] @ table [V, d]^T + bias [V] -> [N, V]."""
    # A plain 2-D matmul: on CPU about 1.5x faster than the equivalent batched einsum.
    return tf.nn.bias_add(tf.matmul(rows, table, transpose_b=True), bias)


def after(x: tf.Tensor, dependency: tf.Tensor) -> tf.Tensor:
    """``x``, available only once ``dependency`` has been computed."""
    with tf.control_dependencies([dependency]):
        return tf.identity(x)


@contextlib.contextmanager
def forward_only(enabled: bool) -> Iterator[None]:
    """Runs its block outside every gradient tape when ``enabled`` (nothing kept for a backward pass)."""
    with record.stop_recording() if enabled else contextlib.nullcontext():
        yield
