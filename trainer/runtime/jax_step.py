"""The XLNet pretraining step on JAX (``KERAS_BACKEND=jax``), jitted, with Keras's stateless APIs.

What it is for: running and measuring pretraining where TensorFlow does not go (a GPU machine with
JAX and no TensorFlow, benchmarks/accelerator_step.py), on the same network, objective, optimizer
and schedule as the TensorFlow trainer. What it does not do: read records (tf.data), checkpoint,
write the step log or resume; those stay with the TensorFlow controller (trainer/runtime/controller.py).

The arithmetic is the controller's step:
- the gradient of the summed cross-entropy of the batch's real targets, divided by their number
  (``max(count, 1)``), the loss likewise;
- clipped by global norm (``clip_norm``; 0: no clipping), the norm before clipping reported;
- AdamW (decoupled weight decay, LayerNorm and biases excluded) with the warm-up + decay schedule
  (trainer/runtime/optimization.py, the same builder);
- the Transformer-XL memory of the step before fed to the next (zeros at the start), no gradient
  through it.
Dropout draws its bits from the pretrainer's seed generators, carried in the state like the
weights. Precision follows the global dtype policy the pretrainer was built under
(``mixed_bfloat16``: bfloat16 compute, float32 variables and loss); remat is the network's.

Data parallelism: under a ``keras.distribution.DataParallel`` (``data_parallel()``), the batch is
split over the local devices and the weights replicated; jit inserts the all-reduce.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence

import keras
import numpy as np
from keras import ops

from tfrecords.errors import UsageError
from trainer.configs.training import LoopConfig
from trainer.models.pretrainer import XLNetPretrainer
from trainer.runtime.optimization import build_optimizer, clip_by_global_norm, learning_rate_schedule


def require_jax() -> None:
    """Refuses to run on another backend, in one line naming it."""
    backend = keras.backend.backend()
    if backend != "jax":
        raise UsageError(f"the JAX pretraining step needs KERAS_BACKEND=jax; Keras runs on {backend!r} here")


def data_parallel(devices: Optional[Sequence[Any]] = None) -> keras.distribution.DataParallel:
    """Data parallelism over ``devices`` (default: every local device), set as Keras's distribution.

    Call before building the pretrainer: its variables are then created replicated, and a batch
    given to the step is split along its first axis over the devices."""
    require_jax()
    distribution = keras.distribution.DataParallel(devices=list(devices) if devices else None)
    keras.distribution.set_distribution(distribution)
    return distribution


class StepState(NamedTuple):
    """Everything a step reads and replaces (a JAX pytree, as every NamedTuple is): weights, the
    non-trainable variables (dropout's seed generators among them), the optimizer's variables and
    the memory."""

    trainable: list
    non_trainable: list
    optimizer: list
    mems: Optional[list]


class PretrainingStep:
    """A jitted pretraining step: ``state, metrics = step(state, batch)``.

    ``batch``: the reader's compact features as arrays (input_ids, segment_ids [B, L] int32,
    is_masked [B, L] bool or int, perm_seed [B, 2] int32). ``metrics``: loss, accuracy,
    num_targets, grad_norm (before clipping) and learning_rate, float32 scalars on device.
    """

    def __init__(self, pretrainer: XLNetPretrainer, config: LoopConfig):
        require_jax()
        import jax  # the backend checked above: this module imports on any backend

        self._jax = jax
        if config.precision == "mixed_float16":
            raise UsageError("precision mixed_float16 needs dynamic loss scaling, which the JAX step does not do; "
                             "use mixed_bfloat16 (or float32)")
        if config.accumulation_steps != 1:
            raise UsageError(f"accumulation_steps {config.accumulation_steps}: the JAX step applies every batch "
                             "it is given (accumulation_steps 1); give it the whole batch")
        self.pretrainer, self.config = pretrainer, config
        self.optimizer = build_optimizer(config, pretrainer.trainable_variables)
        self._schedule = learning_rate_schedule(config)
        # The optimizer's step counter among its variables: the schedule's input.
        self._iterations = [id(v) for v in self.optimizer.variables].index(id(self.optimizer.iterations))
        self._step = jax.jit(self._compute, donate_argnums=(0,))

    def initial_state(self, batch_size: int) -> StepState:
        """The model's and the optimizer's variables as they are now, and zero memory for ``batch_size`` rows."""
        model = self.pretrainer.model_config
        mems = None
        if model.mem_len > 0:
            mems = [self._split_by_rows(ops.zeros((batch_size, model.mem_len, model.d_model), "float32"))
                    for _ in range(model.n_layer)]
        return StepState([v.value for v in self.pretrainer.trainable_variables],
                         [v.value for v in self.pretrainer.non_trainable_variables],
                         [v.value for v in self.optimizer.variables], mems)

    def __call__(self, state: StepState, batch: Mapping[str, Any]) -> tuple[StepState, dict]:
        return self._step(state, {name: self._split_by_rows(value) for name, value in batch.items()})

    @staticmethod
    def _split_by_rows(value):
        """``value`` laid out over the devices of Keras's distribution by its first axis (rows), as
        ``DataParallel`` lays out data; unchanged without a distribution."""
        distribution = keras.distribution.distribution()
        if distribution is None:
            return value
        return keras.distribution.distribute_tensor(value, distribution.get_data_layout(ops.shape(value)))

    def assign(self, state: StepState) -> None:
        """Writes ``state``'s weights and optimizer slots back into the Keras variables (to save or export them)."""
        for variable, value in zip(self.pretrainer.trainable_variables, state.trainable):
            variable.assign(value)
        for variable, value in zip(self.pretrainer.non_trainable_variables, state.non_trainable):
            variable.assign(value)
        for variable, value in zip(self.optimizer.variables, state.optimizer):
            variable.assign(value)

    def _loss(self, trainable, non_trainable, batch, mems):
        """(summed cross-entropy, (outputs, non-trainable variables after the call))."""
        out, non_trainable = self.pretrainer.stateless_call(trainable, non_trainable, batch, mems=mems,
                                                            training=True)
        count = ops.cast(out["num_targets"], "float32")
        # As the TensorFlow task reports it (trainer/tasks/pretraining.py): mean loss x count.
        return ops.cast(out["loss"], "float32") * count, (out, non_trainable)

    def _compute(self, state: StepState, batch: dict) -> tuple[StepState, dict]:
        grad_fn = self._jax.value_and_grad(self._loss, has_aux=True)
        (loss_sum, (out, non_trainable)), grads = grad_fn(state.trainable, state.non_trainable, batch, state.mems)
        count = ops.cast(out["num_targets"], "float32")
        denominator = ops.maximum(count, 1.0)
        grads = [g / ops.cast(denominator, g.dtype) for g in grads]
        grads, norm = clip_by_global_norm(grads, self.config.clip_norm)
        learning_rate = self._schedule(state.optimizer[self._iterations])
        trainable, optimizer = self.optimizer.stateless_apply(state.optimizer, grads, state.trainable)
        mems = None if out["new_mems"] is None else \
            [ops.stop_gradient(ops.cast(m, "float32")) for m in out["new_mems"]]
        metrics = {"loss": loss_sum / denominator, "accuracy": ops.cast(out["accuracy"], "float32"),
                   "num_targets": count, "grad_norm": ops.cast(norm, "float32"),
                   "learning_rate": ops.cast(learning_rate, "float32")}
        return StepState(trainable, non_trainable, optimizer, mems), metrics


def as_numpy(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A step's metrics as Python floats (waits for the device)."""
    return {name: float(np.asarray(value)) for name, value in metrics.items()}
