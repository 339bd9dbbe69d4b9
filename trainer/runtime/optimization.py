"""Optimizer: AdamW (decoupled weight decay), warm-up + decay, clipping, layer-wise LR decay.

Gradients are summed across replicas by the training loop BEFORE clipping (the global norm
must be the norm of the global gradient), so the optimizer here applies already-reduced
gradients and must not all-reduce them a second time.

Layer-wise learning-rate decay (fine-tuning): the original (lr_layer_decay_rate) multiplies
the GRADIENTS of layer l by rate^(n_layer-1-l). Adam divides the first moment by the root of
the second, so a constant gradient scale cancels out (only epsilon notices it) and the
original's decay barely acts. We multiply each variable's LEARNING RATE instead (as ELECTRA
and per-parameter-group implementations do), which scales the whole step, decoupled weight
decay included.

Portable (keras.ops): the schedule and AdamW run on every Keras backend, so that the JAX step
(trainer/runtime/jax_step.py) applies the same updates. ``clip_by_global_norm`` keeps
TensorFlow's own ops on TensorFlow (the trainer's step logs are bit-exact records of them).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

import keras
from keras import ops

from trainer.configs.training import LoopConfig
from trainer.layers.backend import on_tensorflow

if TYPE_CHECKING:
    from trainer.models.network import XLNetNetwork

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
        step = ops.cast(step, "float32")
        warmup = self.peak * step / float(max(self.warmup_steps, 1))
        decayed = self.after(ops.maximum(step - self.warmup_steps, 0.0))
        return ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self) -> dict:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "after": keras.optimizers.schedules.serialize(self.after)}

    @classmethod
    def from_config(cls, config: dict) -> "WarmupSchedule":
        config = dict(config)
        config["after"] = keras.optimizers.schedules.deserialize(config["after"])
        return cls(**config)


def learning_rate_schedule(config: LoopConfig) -> keras.optimizers.schedules.LearningRateSchedule:
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


@keras.saving.register_keras_serializable(package="xlnet")
class PerVariableLRAdamW(ReducedGradientAdamW):
    """ReducedGradientAdamW whose learning rate is multiplied, per variable, by a fixed factor.

    ``learning_rate_multipliers`` holds one factor per variable, in the order of the list the
    optimizer is built with. The factor scales the Adam step and the decoupled weight decay
    alike (both are proportional to the learning rate), so a variable with factor f moves
    exactly as it would with learning rate f·lr.
    """

    def __init__(self, learning_rate_multipliers: Sequence[float], **kwargs):
        super().__init__(**kwargs)
        self.learning_rate_multipliers = tuple(float(f) for f in learning_rate_multipliers)

    def build(self, variables) -> None:
        if len(variables) != len(self.learning_rate_multipliers):
            raise ValueError(f"{len(self.learning_rate_multipliers)} learning-rate multipliers for "
                             f"{len(variables)} variables")
        super().build(variables)

    def _apply_weight_decay(self, variables) -> None:
        """Nothing here: update_step decays each variable with its own learning rate."""

    def update_step(self, gradient, variable, learning_rate):
        factor = self.learning_rate_multipliers[self._get_variable_index(variable)]
        if factor != 1.0:  # leaves the graph of an unscaled variable as the plain AdamW's
            learning_rate = learning_rate * factor
        if self._use_weight_decay(variable):
            # Keras's own decay (before any Adam step), written with this variable's rate
            lr = ops.cast(learning_rate, variable.dtype)
            wd = ops.cast(self.weight_decay, variable.dtype)
            variable.assign_sub(variable * wd * lr)
        super().update_step(gradient, variable, learning_rate)

    def get_config(self) -> dict:
        config = super().get_config()
        config["learning_rate_multipliers"] = list(self.learning_rate_multipliers)
        return config


def build_optimizer(config: LoopConfig, variables: Sequence[keras.Variable],
                    lr_multipliers: Optional[Mapping[int, float]] = None) -> keras.optimizers.Optimizer:
    """AdamW for ``variables`` (built, so a checkpoint restores its slots), LayerNorm and biases
    excluded from weight decay; wrapped for dynamic loss scaling under mixed_float16.

    ``lr_multipliers``: learning-rate factors keyed by ``variable_key`` (for example
    ``layer_decay_multipliers``); variables without an entry keep factor 1. None: the plain
    AdamW, as in pretraining.
    """
    hyperparameters = dict(learning_rate=learning_rate_schedule(config), weight_decay=config.weight_decay,
                           beta_1=config.adam_beta_1, beta_2=config.adam_beta_2, epsilon=config.adam_epsilon)
    if lr_multipliers is None:
        optimizer = ReducedGradientAdamW(**hyperparameters)
    else:
        optimizer = PerVariableLRAdamW(_factor_per_variable(variables, lr_multipliers), **hyperparameters)
    optimizer.exclude_from_weight_decay(var_list=no_decay_variables(variables))
    if config.precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    return optimizer


def variable_key(variable: keras.Variable) -> int:
    """Key of ``variable`` in an ``lr_multipliers`` mapping: its identity.

    Keras variables are unhashable, and their paths repeat from block to block
    (every block has a ``rel_attn/q_kernel``), so neither can serve as the key.
    """
    return id(variable)


def layer_decay_multipliers(network: XLNetNetwork, rate: float) -> dict[int, float]:
    """Learning-rate factors of layer-wise decay, keyed by ``variable_key``: rate^(n_layer-1-l)
    for every variable of block l, 1.0 for the network's other variables.

    The other variables are the embeddings, mask_emb and the attention biases and segment
    embeddings; the latter are stacked over layers in one variable (the original's layout),
    so, as in the original, they are not decayed. Heads outside the network are not listed
    and keep factor 1 in ``build_optimizer``.
    """
    if rate <= 0:
        raise ValueError(f"layer decay rate must be positive, got {rate}")
    multipliers = {variable_key(v): 1.0 for v in network.trainable_variables}
    top = len(network.blocks) - 1
    for layer, block in enumerate(network.blocks):
        multipliers.update({variable_key(v): rate ** (top - layer) for v in block.trainable_variables})
    return multipliers


def _factor_per_variable(variables: Sequence[keras.Variable], lr_multipliers: Mapping[int, float]) -> list[float]:
    """The factors in the order of ``variables``; refuses keys of variables not being optimised
    (multipliers computed for another network would otherwise silently do nothing)."""
    keys = [variable_key(v) for v in variables]
    stray = set(lr_multipliers) - set(keys)
    if stray:
        raise ValueError(f"{len(stray)} learning-rate multipliers name variables the optimizer does not update")
    return [lr_multipliers.get(key, 1.0) for key in keys]


def no_decay_variables(variables: Sequence[keras.Variable]) -> list:
    """The variables weight decay must skip (LayerNorm parameters and biases), matched by path."""
    return [v for v in variables if NO_DECAY_PATTERN.search(getattr(v, "path", v.name))]


def clip_by_global_norm(grads: Sequence, clip_norm: float) -> tuple[list, object]:
    """Clips to ``clip_norm`` (0 disables clipping); returns (clipped grads, norm before clipping).

    On TensorFlow, TensorFlow's own global norm and clipping (the step logs record their exact bits);
    elsewhere the same formula in keras.ops: scale = clip_norm * min(1 / norm, 1 / clip_norm)."""
    if on_tensorflow():
        import tensorflow as tf  # only on this backend: the module itself runs on every one

        norm = tf.linalg.global_norm(grads)
        if clip_norm <= 0:
            return list(grads), norm
        clipped, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
        return clipped, norm
    norm = ops.sqrt(sum(ops.sum(ops.square(ops.cast(g, "float32"))) for g in grads))
    if clip_norm <= 0:
        return list(grads), norm
    scale = clip_norm * ops.minimum(1.0 / norm, 1.0 / clip_norm)
    return [g * ops.cast(scale, g.dtype) for g in grads], norm
