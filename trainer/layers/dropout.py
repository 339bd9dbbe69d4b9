"""Inverted dropout whose random bits come from a counter-based integer hash.

Same semantics as keras.layers.Dropout (active only with training=True, kept values scaled
by 1 / (1 - rate), a fresh mask on every call from a keras SeedGenerator). The bits differ:
keras draws them with tf.random.stateless_uniform, which under XLA on CPU takes about 6.8 s
for one [8, 8, 256, 448] attention-probability tensor (measured, see benchmarks/); hashing
an element counter with lowbias32 takes 8 ms there and 48 ms without XLA (vs 134 ms).
"""
from __future__ import annotations

import math

import keras
import tensorflow as tf

from trainer.layers.counter_hash import GOLDEN_32, mix32


def hashed_uniform_bits(shape: tf.TensorShape, seed: tf.Tensor) -> tf.Tensor:
    """uint32 random bits of a static ``shape`` for a [2] integer ``seed``."""
    size = math.prod(shape)
    counter = tf.bitcast(tf.reshape(tf.range(size, dtype=tf.int32), shape), tf.uint32)
    seed = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    key = mix32(tf.bitwise.bitwise_xor(seed[0], mix32(seed[1] + tf.constant(GOLDEN_32, tf.uint32))))
    return mix32(counter * tf.constant(GOLDEN_32, tf.uint32) + key)


class HashDropout(keras.layers.Layer):
    """Dropout with hashed random bits. Call: x [any static shape] -> same shape and dtype."""

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate, self.seed = rate, seed
        self.seed_generator = keras.random.SeedGenerator(seed) if rate > 0 else None

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        if not training or self.rate == 0:
            return x
        shape = x.shape
        if not shape.is_fully_defined():
            return keras.random.dropout(x, self.rate, seed=self.seed_generator)  # dynamic shapes: keras' way
        threshold = tf.constant(min(int(self.rate * 2 ** 32), 2 ** 32 - 1), tf.uint32)
        keep = hashed_uniform_bits(shape, self.seed_generator.next()) >= threshold
        return tf.where(keep, x * tf.cast(1.0 / (1.0 - self.rate), x.dtype), tf.zeros_like(x))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config
