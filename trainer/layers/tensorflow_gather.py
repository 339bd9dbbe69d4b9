"""The relative-position gather on TensorFlow (trainer/layers/relative_position.py loads this module on
the TensorFlow backend only): tf.gather with batch_dims keeps the int32 indices that
``ops.take_along_axis`` casts to int64 there."""
from __future__ import annotations

import tensorflow as tf


def gather_last_axis(values: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """values [B, N, P, R], int32 indices [B, 1, P, K] (broadcast over N) -> [B, N, P, K] with
    [b, n, p, k] <- values[b, n, p, indices[b, 0, p, k]]."""
    indices = tf.broadcast_to(indices, tf.concat([tf.shape(values)[:3], [indices.shape[-1]]], 0))
    return tf.gather(values, indices, batch_dims=3)
