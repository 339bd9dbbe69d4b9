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
from trainer.layers.remat import recomputing


@tf.function(jit_compile=True)
def keep_mask(shape: tuple[int, ...], seed: tf.Tensor, rate: float) -> tf.Tensor:
    """bool [shape]: True where dropout at ``rate`` keeps an element (``hashed_uniform_bits``'s
    bits), as one XLA-compiled call (compiled once per shape and rate).

    Outside a step compiled with XLA, TensorFlow's executor writes a uint32 tensor of the dropped
    tensor's size for the element counter and for each of the hash's ten integer operations; XLA
    fuses them with the comparison into one pass that writes only the mask. A remat recomputation
    uses it (measured at Base shape, seq 512, batch 2: ``attention`` 1.21x and ``full`` 1.35x of
    ``none``'s step time without it, 1.14x and 1.29x with it). The forward pass does not yet: there
    it took 19% off a step, but Grappler no longer folds the small counters into constants the step
    keeps, which the memory model's figures include (the tiny preset's ``attention`` peak fell
    below the model's 15% band); changing both is one change, not done here.
    """
    return hashed_uniform_bits(tf.TensorShape(shape), seed) >= keep_threshold(rate)


def keep_threshold(rate: float) -> tf.Tensor:
    """The uint32 a hashed bit pattern must reach for dropout at ``rate`` to keep its element."""
    return tf.constant(min(int(rate * 2 ** 32), 2 ** 32 - 1), tf.uint32)


def hashed_uniform_bits(shape: tf.TensorShape, seed: tf.Tensor) -> tf.Tensor:
    """uint32 random bits of a static ``shape`` for a [2] integer ``seed``."""
    size = math.prod(shape)
    counter = tf.bitcast(tf.reshape(tf.range(size, dtype=tf.int32), shape), tf.uint32)
    seed = tf.bitcast(tf.cast(seed, tf.int32), tf.uint32)
    key = mix32(tf.bitwise.bitwise_xor(seed[0], mix32(seed[1] + tf.constant(GOLDEN_32, tf.uint32))))
    return mix32(counter * tf.constant(GOLDEN_32, tf.uint32) + key)


class HashDropout(keras.layers.Layer):
    """Dropout with hashed random bits. Call: x [any static shape] -> same shape and dtype.

    Each training call draws one seed [2] from the layer's SeedGenerator, unless ``seed`` is
    given: a seed drawn before with :meth:`draw_seed`. Code that runs a call twice (the backward
    pass of rematerialisation, trainer/layers/remat.py) draws once and passes the seed to both,
    so that both see the same mask and the generator advances as for one call.
    """

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate, self.seed = rate, seed
        self.seed_generator = keras.random.SeedGenerator(seed) if rate > 0 else None

    def active(self, training: bool) -> bool:
        """Whether a call with ``training`` drops anything (and so draws a seed)."""
        return bool(training) and self.rate > 0

    def draw_seed(self, training: bool) -> tf.Tensor | None:
        """The seed [2] the next call with ``training`` would draw, advancing the generator as that
        call would; None when such a call draws none."""
        return self.seed_generator.next() if self.active(training) else None

    def call(self, x: tf.Tensor, training: bool = False, seed: tf.Tensor | None = None) -> tf.Tensor:
        if not self.active(training):
            return x
        if seed is None:
            seed = self.seed_generator.next()
        shape = x.shape
        if not shape.is_fully_defined():
            return _stateless_dropout(x, self.rate, seed)
        if recomputing():
            # The backward pass of remat: one compiled call, built once x is there (see keep_mask).
            with tf.control_dependencies([x]):
                keep = keep_mask(tuple(shape.as_list()), seed, self.rate)
        else:
            keep = hashed_uniform_bits(shape, seed) >= keep_threshold(self.rate)
        # A scalar zero, not zeros_like(x): Grappler folds a static-shaped zeros_like into a constant
        # the step keeps for good ([B, N, Q, K] for the attention probabilities, measured).
        return tf.where(keep, x * tf.cast(1.0 / (1.0 - self.rate), x.dtype), tf.zeros([], x.dtype))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config


def _stateless_dropout(x: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Dropout of a tensor of dynamic shape as ``keras.random.dropout(x, rate, seed=generator)``
    computes it for a generator that draws ``seed`` (the same bits): its int32 cast of the
    generator's int64 state, then TensorFlow's stateless dropout."""
    if seed.dtype != tf.int32:
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)
