"""The XLNet pretraining step on JAX (``KERAS_BACKEND=jax``), jitted, with Keras's stateless APIs.

What it is for: running and measuring pretraining where TensorFlow does not go (a GPU machine with
JAX and no TensorFlow, benchmarks/accelerator_step.py), on the same network, objective, optimizer
and schedule as the TensorFlow trainer. What it does not do: read records (tf.data), checkpoint,
write the step log or resume: trainer/runtime/jax_engine.py does, in the loop both engines share.

The arithmetic is the controller's step:
- the gradient of the summed cross-entropy of the batch's real targets, divided by their number
  (``max(count, 1)``), the loss likewise;
- with ``accumulation_steps`` A > 1, the batch is A micro-batches of ``train_batch_size`` rows
  ([A, rows, ...], as the reader lays them out): their gradients of the summed loss are summed
  (a ``lax.scan`` over the micro-steps, so the compiled program does not grow with A), the memory
  and dropout's seed state carried from one micro-step to the next, then divided by the targets of
  all of them, clipped and applied once; the loss and accuracy are over all of them;
- clipped by global norm (``clip_norm``; 0: no clipping), the norm before clipping reported;
- AdamW (decoupled weight decay, LayerNorm and biases excluded) with the warm-up + decay schedule
  (trainer/runtime/optimization.py, the same builder);
- the Transformer-XL memory of the step before fed to the next (zeros at the start), no gradient
  through it.
Dropout draws its bits from the pretrainer's seed generators, carried in the state like the
weights. Precision follows the global dtype policy the pretrainer was built under
(``mixed_bfloat16``: bfloat16 compute, float32 variables and loss); remat is the network's.

Data parallelism: under a ``keras.distribution.DataParallel`` (``data_parallel()``), the batch is
split over the devices and the weights replicated; jit inserts the all-reduce. With several
processes (trainer/runtime/jax_processes.py) each gives the step its own devices' rows. The state is
laid out once, as the step gives it back (the same shardings in and out), so that the second step
runs the first one's compilation: with one device the distribution costs nothing.

What it refuses before any step: a network that computes in float16 (whatever made it so: the
config's precision or Keras's global dtype policy when the network was built), a batch whose
features, shapes (the micro-step count among them), dtypes or row count do not match the state,
input ids outside the vocabulary (checked on the host for host arrays), and a ``mem_len`` whose
step would not fit the device's memory (trainer/planning/plan.py ``refuse_beyond_memory``, the
bound `xlnet generate` checks).
The NaN guard, as the TensorFlow controller's: a step whose loss or gradient norm is not finite, or
whose input ids (device arrays) leave the vocabulary, in any of its micro-steps, does not apply its
update: the state it gives back is the one it was given, and reading its metrics (``as_numpy``)
raises ``StepNotAppliedError`` naming the step.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence

import keras
import numpy as np
from keras import ops

from tfrecords.errors import DataError, UsageError
from trainer.configs.training import LoopConfig
from trainer.models.pretrainer import XLNetPretrainer
from trainer.runtime.optimization import build_optimizer, clip_by_global_norm, learning_rate_schedule


def require_jax() -> None:
    """Refuses to run on another backend, in one line naming it."""
    backend = keras.backend.backend()
    if backend != "jax":
        raise UsageError(f"the JAX pretraining step needs KERAS_BACKEND=jax; Keras runs on {backend!r} here")


def data_parallel(devices: Optional[Sequence[Any]] = None) -> keras.distribution.DataParallel:
    """Data parallelism over ``devices`` (default: every device, of every process), set as Keras's distribution.

    Call before building the pretrainer: its variables are then created replicated, and a batch
    given to the step is split along its first axis over the devices."""
    require_jax()
    distribution = keras.distribution.DataParallel(devices=list(devices) if devices else None)
    keras.distribution.set_distribution(distribution)
    return distribution


FEATURES = ("input_ids", "segment_ids", "is_masked", "perm_seed")


class StepNotAppliedError(DataError):
    """A step's loss or gradient norm was not finite, or its input ids left the vocabulary: its update
    was not applied (the state given back is the one before it); the caller stops there."""


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
    is_masked [B, L] bool or int, perm_seed [B, 2] int32); with ``accumulation_steps`` A > 1, each
    with the micro-steps first ([A, B, ...], B = ``train_batch_size``). ``metrics``: loss, accuracy,
    num_targets, grad_norm (before clipping) and learning_rate, float32 scalars on device.
    """

    def __init__(self, pretrainer: XLNetPretrainer, config: LoopConfig):
        require_jax()
        import jax  # the backend checked above: this module imports on any backend

        self._jax = jax
        if config.precision == "mixed_float16":
            raise UsageError("precision mixed_float16 needs dynamic loss scaling, which the JAX step does not do; "
                             "use mixed_bfloat16 (or float32)")
        refuse_float16_compute(pretrainer, config)
        self.pretrainer, self.config = pretrainer, config
        self.accumulation_steps = config.accumulation_steps
        self._rows_axis = 0 if self.accumulation_steps == 1 else 1  # of every feature of a batch
        self.optimizer = build_optimizer(config, pretrainer.trainable_variables)
        self._schedule = learning_rate_schedule(config)
        # The optimizer's step counter among its variables: the schedule's input.
        self._iterations = [id(v) for v in self.optimizer.variables].index(id(self.optimizer.iterations))
        self._distribution = keras.distribution.distribution()
        self._processes = jax.process_count()  # each gives the rows of its own devices (jax_processes.py)
        # Each variable's sharding, in and out of the step alike (None without a distribution): jit
        # tells an equivalent sharding from the one it gives back, and would compile the second step again.
        self._shardings = None
        self._micro_steps_layout = None
        out_shardings = None
        if self._distribution is not None:
            self._shardings = [[self._distribution.get_variable_layout(v).backend_layout for v in variables]
                               for variables in (pretrainer.trainable_variables, pretrainer.non_trainable_variables,
                                                 self.optimizer.variables)]
            rows = self._distribution.get_data_layout((1, 1, 1)).backend_layout
            # [A, rows, ...] split by rows (axis 1), one sharding object for every step (an equal one
            # made anew would compile the step again)
            self._micro_steps_layout = jax.sharding.NamedSharding(
                rows.mesh, jax.sharding.PartitionSpec(None, rows.spec[0]))
            mems = None if pretrainer.model_config.mem_len == 0 else [rows] * pretrainer.model_config.n_layer
            scalar = jax.sharding.NamedSharding(rows.mesh, jax.sharding.PartitionSpec())
            out_shardings = (StepState(*self._shardings, mems), scalar)
        self._step = jax.jit(self._compute, donate_argnums=(0,), **(
            {} if out_shardings is None else {"out_shardings": out_shardings}))

    def initial_state(self, batch_size: int) -> StepState:
        """The model's and the optimizer's variables as they are now, and zero memory for ``batch_size`` rows
        (refused, naming mem_len, when the step would not fit the device's memory)."""
        model = self.pretrainer.model_config
        self._check_fits(batch_size)
        mems = None
        if model.mem_len > 0:
            shape = (batch_size, model.mem_len, model.d_model)
            mems = [self._laid_out(np.zeros(shape, np.float32), self._rows_layout(shape))
                    for _ in range(model.n_layer)]
        values = [[v.value for v in variables] for variables in
                  (self.pretrainer.trainable_variables, self.pretrainer.non_trainable_variables,
                   self.optimizer.variables)]
        if self._shardings is not None:  # exactly as the step gives them back: no second compilation
            values = [[self._laid_out(value, sharding) for value, sharding in zip(group, shardings)]
                      for group, shardings in zip(values, self._shardings)]
        return StepState(*values, mems)

    def __call__(self, state: StepState, batch: Mapping[str, Any]) -> tuple[StepState, dict]:
        """One step on ``batch`` (the state given is donated: use the one given back)."""
        self._check_batch(state, batch)
        return self._step(state, {name: self._split_by_rows(batch[name]) for name in FEATURES})

    def learning_rate(self, step: int) -> float:
        """The schedule's learning rate at optimizer step ``step`` (0 before the first update)."""
        return float(np.asarray(self._schedule(step)))

    def _split_by_rows(self, value):
        """``value`` laid out over the devices of Keras's distribution by its rows (the first axis, as
        ``DataParallel`` lays out data; the second, after the micro-steps, with accumulation);
        unchanged without a distribution. Always the same sharding object for a shape
        (distribute_tensor keeps an equivalent one, which jit tells apart). With several processes,
        ``value`` is this process's rows of the global batch (its devices' share)."""
        if self._distribution is None:
            return value
        axis = self._rows_axis
        shape = np.shape(value)
        shape = (*shape[:axis], shape[axis] * self._processes, *shape[axis + 1:])
        layout = self._rows_layout(shape) if axis == 0 else self._micro_steps_layout
        if self._processes == 1:
            return self._jax.device_put(value, layout)
        return self._jax.make_array_from_process_local_data(layout, np.asarray(value), shape)

    def _rows_layout(self, shape):
        return None if self._distribution is None else self._distribution.get_data_layout(shape).backend_layout

    def _laid_out(self, value, sharding):
        """``value`` (the same on every process: a weight, a zero memory) laid out as ``sharding``."""
        if sharding is None:
            return value
        if self._processes == 1:
            return self._jax.device_put(value, sharding)
        host = np.asarray(value)
        return self._jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    def _check_fits(self, batch_size: int) -> None:
        """Refuses, naming mem_len, a step of ``batch_size`` rows that the planner's memory model puts
        above the device's memory, before the memory is allocated."""
        from trainer.planning.memory import memory_breakdown
        from trainer.planning.plan import Workload, refuse_beyond_memory

        model, config = self.pretrainer.model_config, self.config
        replicas = 1 if self._distribution is None else self._distribution.device_mesh.devices.size
        rows = max(1, batch_size // replicas)

        def needed(mem_len: int) -> int:
            # config's accumulation_steps kept: the model counts the gradient accumulator of the micro-steps
            workload = Workload(model.replace(mem_len=mem_len), config.replace(train_batch_size=batch_size))
            shape = workload.shape(rows).replace(eval_batch=0)  # the JAX step keeps no eval memory
            return memory_breakdown(workload.model, shape, self.pretrainer.network.remat).total

        micro_steps = f" x {config.accumulation_steps} micro-steps" if config.accumulation_steps > 1 else ""
        refuse_beyond_memory("mem_len", model.mem_len, needed, device_memory(),
                             f"a pretraining step of {rows} rows per device{micro_steps} at seq_len {config.seq_len} "
                             f"with a memory of {model.mem_len} positions",
                             "not even a memory of 1 position fits: lower the batch or seq_len",
                             detail=" (the planner's memory model, trainer/planning/memory.py)")

    def _check_batch(self, state: StepState, batch: Mapping[str, Any]) -> None:
        """Refuses a batch that does not match the step and the state, on the host (shapes and dtypes
        cost nothing; the ids' range is checked here only for host arrays, on device by the step)."""
        missing = [name for name in FEATURES if name not in batch]
        if missing:
            raise UsageError(f"the batch lacks {', '.join(missing)}; the step takes {', '.join(FEATURES)}")
        seq_len, ids_shape = self.pretrainer.seq_len, np.shape(batch["input_ids"])
        rows = ids_shape[-2] if len(ids_shape) >= 2 else 0
        micro_steps = () if self.accumulation_steps == 1 else (self.accumulation_steps,)
        for name in FEATURES:
            value = batch[name] if hasattr(batch[name], "dtype") else np.asarray(batch[name])  # a list
            shape, dtype = tuple(np.shape(value)), np.dtype(value.dtype)
            expected = (*micro_steps, rows, 2 if name == "perm_seed" else seq_len)
            if shape != expected:
                axes = [f"accumulation_steps {self.accumulation_steps}"] * len(micro_steps) + [
                    "rows", "2" if name == "perm_seed" else f"seq_len {seq_len}"]
                raise UsageError(f"batch {name} has shape {list(shape)}, the step takes {list(expected)} "
                                 f"({', '.join(axes)})")
            if dtype.kind not in "biu":
                raise UsageError(f"batch {name} is {dtype}: the step takes integer features (is_masked may be "
                                 "bool), as the reader gives them")
        if state.mems is not None and state.mems[0].shape[0] != rows * self._processes:
            each = f" on each of {self._processes} processes" if self._processes > 1 else ""
            raise UsageError(f"the batch has {rows} rows{each}, the state's memory {state.mems[0].shape[0]} "
                             f"(initial_state({state.mems[0].shape[0]})): give initial_state the batch's rows")
        if isinstance(batch["input_ids"], np.ndarray):
            check_ids(batch["input_ids"], self.pretrainer.model_config.vocab_size)

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

    def _micro_step(self, trainable, non_trainable, mems, batch):
        """One micro-batch: (gradients of its summed loss, [loss sum, correct targets, targets], the
        non-trainable variables and the memory it leaves)."""
        grad_fn = self._jax.value_and_grad(self._loss, has_aux=True)
        (loss_sum, (out, non_trainable)), grads = grad_fn(trainable, non_trainable, batch, mems)
        count = ops.cast(out["num_targets"], "float32")
        sums = ops.stack([loss_sum, ops.cast(out["accuracy"], "float32") * count, count])
        mems = None if out["new_mems"] is None else \
            [ops.stop_gradient(ops.cast(m, "float32")) for m in out["new_mems"]]
        return grads, sums, non_trainable, mems

    def _micro_steps(self, state: StepState, batch: dict):
        """The micro-steps of one step, as the controller's ``_micro_steps``: their gradients and sums
        added up, the memory and the seed state carried through them; what :meth:`_micro_step` returns."""
        if self.accumulation_steps == 1:
            return self._micro_step(state.trainable, state.non_trainable, state.mems, batch)

        def add_micro_step(carry, micro_batch):
            grad_sums, sums, non_trainable, mems = carry
            grads, micro_sums, non_trainable, mems = self._micro_step(state.trainable, non_trainable, mems,
                                                                      micro_batch)
            return ([total + g for total, g in zip(grad_sums, grads)], sums + micro_sums, non_trainable, mems), None

        start = ([ops.zeros_like(v) for v in state.trainable], ops.zeros((3,), "float32"), state.non_trainable,
                 state.mems)
        return self._jax.lax.scan(add_micro_step, start, batch)[0]

    def _compute(self, state: StepState, batch: dict) -> tuple[StepState, dict]:
        grads, sums, non_trainable, mems = self._micro_steps(state, batch)
        count = sums[2]
        denominator = ops.maximum(count, 1.0)
        grads = [g / ops.cast(denominator, g.dtype) for g in grads]
        grads, norm = clip_by_global_norm(grads, self.config.clip_norm)
        iterations = state.optimizer[self._iterations]
        learning_rate = self._schedule(iterations)
        trainable, optimizer = self.optimizer.stateless_apply(state.optimizer, grads, state.trainable)
        loss = sums[0] / denominator
        ids = batch["input_ids"]  # every micro-step's
        ids_in_vocabulary = ops.all((ids >= 0) & (ids < self.pretrainer.model_config.vocab_size))
        # The NaN guard: a bad step gives back the state it was given, as the controller saves nothing.
        applied = ids_in_vocabulary & ops.all(ops.isfinite(loss)) & ops.all(ops.isfinite(norm))
        new = self._jax.tree_util.tree_map(lambda after, before: ops.where(applied, after, before),
                                           StepState(trainable, non_trainable, optimizer, mems), state)
        metrics = {"loss": loss, "accuracy": sums[1] / denominator,
                   "num_targets": count, "grad_norm": ops.cast(norm, "float32"),
                   "learning_rate": ops.cast(learning_rate, "float32"),
                   "step": ops.cast(iterations, "float32") + 1.0, "update_applied": ops.cast(applied, "float32"),
                   "ids_in_vocabulary": ops.cast(ids_in_vocabulary, "float32")}
        return new, metrics


def as_numpy(metrics: Mapping[str, Any]) -> dict[str, float]:
    """A step's metrics as Python floats (waits for the device); a StepNotAppliedError, in the
    controller's words, for a step whose update the NaN guard did not apply."""
    values = {name: float(np.asarray(value)) for name, value in metrics.items()}
    if values.get("update_applied", 1.0) == 0.0:
        step = int(values["step"])
        if values["ids_in_vocabulary"] == 0.0:
            what = "input_ids left the vocabulary"
        else:
            what = f"loss became {values['loss']} (gradient norm {values['grad_norm']})"
        raise StepNotAppliedError(f"{what} at step {step}; the step did not apply its update: the state it gave "
                                  f"back is step {step - 1}'s. Lower learning_rate or check the data.")
    return values


def check_ids(input_ids: np.ndarray, vocab_size: int) -> None:
    """A DataError naming the first input id outside [0, vocab_size) of a host batch ([rows, L], or
    [micro-steps, rows, L]) by its index (bad ids would look up no embedding and give a NaN loss)."""
    bad = np.argwhere((input_ids < 0) | (input_ids >= vocab_size))
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        raise DataError(f"batch input_ids[{', '.join(map(str, where))}] is {int(input_ids[where])}, outside the "
                        f"vocabulary [0, {vocab_size}) ({len(bad)} such ids)")


def refuse_float16_compute(pretrainer: XLNetPretrainer, config: LoopConfig) -> None:
    """Refuses a network that will compute in float16, whatever set it (loss scaling is not done here)."""
    policies = {layer.dtype_policy.name for layer in (pretrainer, pretrainer.network)}
    if any("float16" in name and "bfloat16" not in name for name in policies):
        raise UsageError(f"the network computes in float16 (dtype policy {', '.join(sorted(policies))}, from "
                         f"keras.mixed_precision's global policy when it was built; the config's precision is "
                         f"{config.precision}): float16 needs dynamic loss scaling, which the JAX step does not "
                         "do; set the global policy to mixed_bfloat16 or float32 before building the pretrainer")


def device_memory() -> tuple[int, str]:
    """(bytes, what they are) of the memory a step runs in: the first device's as JAX's allocator
    reports it, else (a CPU) this machine's physical memory."""
    import jax

    from trainer.planning.devices import host_memory_bytes

    device = jax.local_devices()[0]  # of this process: another process's device reports nothing here
    limit = (device.memory_stats() or {}).get("bytes_limit")
    if limit:
        return int(limit), f"the {device.device_kind}'s memory as JAX reports it"
    return host_memory_bytes(), "this machine's physical memory"
