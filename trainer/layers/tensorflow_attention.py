"""The products of trainer/layers/attention.py as TensorFlow ops, used when keras.backend.backend()
is "tensorflow": keras.ops has no matmul with a transposed operand (it would transpose the keys
first, another [B, N, K, H] tensor and other gradient ops) and no AddN, and these are the ops the
TensorFlow path's values, gradients and measured memory come from."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf


def matmul_transposed(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """a [..., Q, H] x b [..., K, H] -> [..., Q, K], b transposed inside the matmul."""
    return tf.matmul(a, b, transpose_b=True)


def read_parts(probs: tf.Tensor, widths: Sequence[int], values: Sequence[tf.Tensor]) -> tf.Tensor:
    """Probabilities [B, N, Q, sum(widths)] x value parts [B, N, K_i, H] -> [B, N, Q, H], each part
    read where it lies (never concatenated)."""
    return tf.add_n([tf.matmul(part_probs, part_values)
                     for part_probs, part_values in zip(tf.split(probs, widths, axis=-1), values)])
