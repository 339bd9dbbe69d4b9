"""The integer hash behind the trainer's counter-based randomness.

Dropout bits (trainer/layers/dropout.py) and permutation orders (trainer/models/permutation.py) both
hash a counter with a seed instead of drawing from a TF random op: the same seed then gives
the same bits in eager, graph and XLA execution, and hashing is much cheaper under XLA on CPU.
"""
from __future__ import annotations

import tensorflow as tf

# 2**32 / golden ratio: spreads consecutive counters and seeds over the 32-bit range.
GOLDEN_32 = 0x9E3779B9


def mix32(x: tf.Tensor) -> tf.Tensor:
    """lowbias32 integer hash (uint32 -> uint32), a well-mixed bijection."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16)) * tf.constant(0x7FEB352D, tf.uint32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15)) * tf.constant(0x846CA68B, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
