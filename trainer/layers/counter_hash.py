"""The integer hash behind the trainer's counter-based randomness, on every Keras backend.

Dropout bits (trainer/layers/dropout.py) and permutation orders (trainer/models/permutation.py) both
hash a counter with a seed instead of drawing from a backend's random op: the same seed then gives
the same bits in eager, graph and XLA execution, on TensorFlow and on JAX, and hashing is much
cheaper under XLA on CPU.

The arithmetic is uint32, wrapping mod 2**32 on every backend. Products, sums and comparisons with a
constant use the tensor's own operators with a NumPy uint32 scalar (``_u32``): TensorFlow then builds
the graph of ``tf.constant(c, tf.uint32)``, where ``ops.multiply`` would add a cast from int32 or int64,
and JAX, which refuses Python ints above 2**31 - 1, keeps uint32.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import keras
import numpy as np
from keras import ops

from tfrecords.errors import UsageError

# 2**32 / golden ratio: spreads consecutive counters and seeds over the 32-bit range.
GOLDEN_32 = 0x9E3779B9
# The backends whose uint32 arithmetic gives the hash's bits (tests/trainer/layers/test_backends.py holds
# JAX's equal to TensorFlow's). PyTorch's uint32 support is thin: its int32 -> uint32 view of a seed
# comes back with the wrong shape (measured, torch 2.13), so the hash refuses it rather than fail deep inside.
HASH_BACKENDS = ("tensorflow", "jax")


def require_hash_backend(operation: str) -> None:
    """Refuses, in one line naming the backend and ``operation``, a Keras backend the hash has not been
    checked on: hashed dropout and permutation sampling need its uint32 arithmetic."""
    backend = keras.backend.backend()
    if backend not in HASH_BACKENDS:
        raise UsageError(f"Keras backend {backend!r} lacks the uint32 arithmetic of {operation} "
                         f"(trainer/layers/counter_hash.py); use KERAS_BACKEND={' or '.join(HASH_BACKENDS)}")


def mix32(x: Any) -> Any:
    """lowbias32 integer hash (uint32 -> uint32), a well-mixed bijection."""
    x = ops.bitwise_xor(x, ops.right_shift(x, 16)) * _u32(0x7FEB352D)
    x = ops.bitwise_xor(x, ops.right_shift(x, 15)) * _u32(0x846CA68B)
    return ops.bitwise_xor(x, ops.right_shift(x, 16))


def as_uint32(x: Any) -> Any:
    """int tensor -> the uint32 tensor of its low 32 bits (int64 truncated first, then reinterpreted).
    Every hashed value starts here: a backend without the hash's arithmetic is refused here."""
    require_hash_backend("the counter hash (hashed dropout, permutation sampling)")
    return ops.view(ops.cast(x, "int32"), "uint32")


def hashed_uniform_bits(shape: Sequence[int], seed: Any) -> Any:
    """uint32 random bits of a static ``shape`` for a [2] integer ``seed`` (its low 32 bits count:
    TensorFlow's int64 seeds and JAX's uint32 seeds give the same bits)."""
    size = math.prod(shape)
    counter = as_uint32(ops.reshape(ops.arange(size, dtype="int32"), shape))
    seed = as_uint32(seed)
    key = mix32(ops.bitwise_xor(seed[0], mix32(seed[1] + _u32(GOLDEN_32))))
    return mix32(counter * _u32(GOLDEN_32) + key)


def keep_threshold(rate: float) -> np.uint32:
    """The uint32 a hashed bit pattern must reach for dropout at ``rate`` to keep its element."""
    return _u32(min(int(rate * 2 ** 32), 2 ** 32 - 1))


def _u32(value: int) -> np.uint32:
    """A uint32 constant for the right-hand side of a tensor's operator (see the module docstring)."""
    return np.uint32(value)
