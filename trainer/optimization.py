"""Optimizer for pretraining: AdamW (decoupled weight decay), warm-up + decay, clipping.

Gradients are summed across replicas by the training loop BEFORE clipping (the global norm
must be the norm of the global gradient), so the optimizer here applies already-reduced
gradients and must not all-reduce them a second time.
"""
from __future__ import annotations

import re
from typing import Sequence

import keras
import tensorflow as tf

from trainer.train_config import TrainConfig

# Parameters the original excludes from weight decay: LayerNorm scales/offsets and every bias
# (including the attention biases r_w_bias, r_r_bias, r_s_bias and the output bias).
NO_DECAY_PATTERN = re.compile(r"layer_?norm|bias", re.IGNORECASE)


@keras.saving.register_keras_serializable(package="xlnet")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to ``peak`` over ``warmup_steps``, then ``after(step - warmup_steps)``."""

    def __init__(self, peak: float, warmup_steps: int, after: keras.optimizers.schedules.LearningRateSchedule):
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.after = after

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warmup = self.peak * step / float(max(self.warmup_steps, 1))
        decayed = self.after(tf.maximum(step - self.warmup_steps, 0.0))
        return tf.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self) -> dict:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "after": keras.optimizers.schedules.serialize(self.after)}

    @classmethod
    def from_config(cls, config: dict) -> "WarmupSchedule":
        config = dict(config)
        config["after"] = keras.optimizers.schedules.deserialize(config["after"])
        return cls(**config)


def learning_rate_schedule(config: TrainConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """Linear warm-up to ``learning_rate``, then linear or cosine decay to ``end_learning_rate``
    at ``train_steps`` (steps count optimizer updates)."""
    decay_steps = max(config.train_steps - config.warmup_steps, 1)
    if config.decay == "cosine":
        after = keras.optimizers.schedules.CosineDecay(
            config.learning_rate, decay_steps, alpha=config.end_learning_rate / config.learning_rate)
    else:
        after = keras.optimizers.schedules.PolynomialDecay(
            config.learning_rate, decay_steps, end_learning_rate=config.end_learning_rate, power=1.0)
    return WarmupSchedule(config.learning_rate, config.warmup_steps, after)


class ReducedGradientAdamW(keras.optimizers.AdamW):
    """keras AdamW that applies gradients the caller has already summed over replicas.

    Keras sums gradients over replicas inside apply_gradients, after its own clipping; XLNet
    clips the GLOBAL gradient, so the loop all-reduces, clips, then calls this optimizer.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


def build_optimizer(config: TrainConfig, variables: Sequence[tf.Variable]) -> keras.optimizers.Optimizer:
    """AdamW for ``variables`` (built, so a checkpoint restores its slots), LayerNorm and biases
    excluded from weight decay; wrapped for dynamic loss scaling under mixed_float16."""
    optimizer = ReducedGradientAdamW(
        learning_rate=learning_rate_schedule(config),
        weight_decay=config.weight_decay,
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
    )
    optimizer.exclude_from_weight_decay(var_list=no_decay_variables(variables))
    if config.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    return optimizer


def no_decay_variables(variables: Sequence[tf.Variable]) -> list:
    """The variables weight decay must skip (LayerNorm parameters and biases), matched by path."""
    return [v for v in variables if NO_DECAY_PATTERN.search(getattr(v, "path", v.name))]


def clip_by_global_norm(grads: Sequence[tf.Tensor], clip_norm: float) -> tuple[list, tf.Tensor]:
    """Clips to ``clip_norm`` (0 disables clipping); returns (clipped grads, norm before clipping)."""
    norm = tf.linalg.global_norm(grads)
    if clip_norm <= 0:
        return list(grads), norm
    clipped, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
    return clipped, norm
