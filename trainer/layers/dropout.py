"""Inverted dropout whose random bits come from a counter-based integer hash.

Same semantics as keras.layers.Dropout (active only with training=True, kept values scaled
by 1 / (1 - rate), a fresh mask on every call from a keras SeedGenerator). The bits differ:
keras draws them with tf.random.stateless_uniform, which under XLA on CPU takes about 6.8 s
for one [8, 8, 256, 448] attention-probability tensor (measured, see benchmarks/); hashing
an element counter with lowbias32 takes 8 ms there and 48 ms without XLA (vs 134 ms). The hash
(trainer/layers/counter_hash.py) gives the same bits on every backend; on TensorFlow a remat
recomputation builds its mask in one compiled call (trainer/layers/tensorflow_dropout.py).
"""
from __future__ import annotations

from typing import Any

import keras
from keras import ops

from trainer.layers.backend import on_tensorflow
from trainer.layers.counter_hash import hashed_uniform_bits, keep_threshold


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

    def draw_seed(self, training: bool) -> Any | None:
        """The seed [2] the next call with ``training`` would draw, advancing the generator as that
        call would; None when such a call draws none."""
        return self.seed_generator.next() if self.active(training) else None

    def call(self, x: Any, training: bool = False, seed: Any | None = None) -> Any:
        if not self.active(training):
            return x
        if seed is None:
            seed = self.seed_generator.next()
        shape = tuple(x.shape)
        if None in shape:  # only TensorFlow traces tensors of unknown dimensions
            return _tensorflow_dropout().stateless_dropout(x, self.rate, seed)
        keep = _recomputed_keep_mask(x, seed, self.rate)
        if keep is None:
            keep = hashed_uniform_bits(shape, seed) >= keep_threshold(self.rate)
        # A scalar zero, not zeros_like(x): Grappler folds a static-shaped zeros_like into a constant
        # the step keeps for good ([B, N, Q, K] for the attention probabilities, measured).
        return ops.where(keep, x * ops.cast(1.0 / (1.0 - self.rate), x.dtype), ops.zeros([], x.dtype))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config


def _recomputed_keep_mask(x: Any, seed: Any, rate: float) -> Any | None:
    """On TensorFlow, in the backward pass of remat: the keep mask as one compiled call, built once x
    is there (tensorflow_dropout.keep_mask); else None. keras.remat on other backends recomputes
    the hash like any other operation."""
    if not on_tensorflow():
        return None
    return _tensorflow_dropout().recomputed_keep_mask(x, seed, rate)


def _tensorflow_dropout():
    """trainer/layers/tensorflow_dropout.py, imported on first use (it imports TensorFlow)."""
    from trainer.layers import tensorflow_dropout

    return tensorflow_dropout
