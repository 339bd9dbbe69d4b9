"""The TensorFlow engine of the training loop (trainer/runtime/training_loop.py), shared by every
task (pretraining, fine-tuning), as in Orbit.

A task (the protocol of trainer/runtime/task_protocol.py; trainer/tasks/pretraining.py,
trainer/tasks/sequence.py, trainer/tasks/squad.py) says what to build, what to compute and what to
save; the :class:`Controller` owns what every objective shares on TensorFlow, and the backend-neutral
:class:`~trainer.runtime.training_loop.TrainingLoop` runs it (the step log, TensorBoard, progress
lines, goodput, the NaN guard, preemption: written once for both engines):

* the strategy and the process-wide policy (mixed precision, seed);
* the optimizer: AdamW with warm-up and decay, per-variable learning-rate factors when the task
  asks (layer-wise decay), dynamic loss scaling under mixed_float16;
* one optimizer step per replica: ``accumulation_steps`` micro-steps whose gradients are summed,
  all-reduced over replicas, divided by the global count (targets or examples), clipped by
  global norm, then applied; ``steps_per_loop`` steps run inside one tf.function (the TPU
  pattern) and Python only sees their per-step losses;
* checkpoints (model, optimizer, step, dropout RNG state and whatever the task adds, such as the
  Transformer-XL memory) with exact resume, and evaluation;
* SIGTERM / SIGINT agreed by all workers through the strategy's all-reduce
  (trainer/runtime/preemption.py), the allocator's peak memory per loop of steps
  (trainer/runtime/peak_memory.py).
"""
from __future__ import annotations

import contextlib
import posixpath
import time
from typing import Any, Callable, Iterator

import keras
import numpy as np
import tensorflow as tf

from tfrecords.reader import stream_ended_early
from tfrecords.tensorflow_errors import error_text
from trainer.configs.training import LoopConfig
from trainer.runtime import checkpoint_history
from trainer.runtime.checkpoint_writer import BackgroundWrites, SaveFailed
from trainer.runtime.distribution import is_chief, lost_worker, worker_info
from trainer.runtime.model_dir import ModelDirectory, ModelDirectoryError
from trainer.runtime.optimization import build_optimizer, clip_by_global_norm
from trainer.runtime.peak_memory import PeakMemory
from trainer.runtime.preemption import Preemption
from trainer.runtime.profiling import tensorflow_tracer
from trainer.runtime.resume_agreement import agreed_history, check_same_step
from trainer.runtime.run_clock import command_start_time
from trainer.runtime.training_stops import (  # noqa: F401 (the loop's errors, raised and re-exported here)
    CheckpointSaveError,
    TrainingDataError,
    TrainingDivergedError,
    TrainingStopped,
    UnreadableCheckpointError,
    WorkerLostError,
    checkpoint_save_stopped,
    peer_lost_stopped,
)
from trainer.runtime.task_protocol import Task
from trainer.runtime.throughput import StepFlops
from trainer.runtime.training_loop import (  # noqa: F401 (TrainResult re-exported)
    LoopOutput, TrainingLoop, TrainResult, no_checkpoint_warning, refuse_to_start_over, resumed_line,
    warn_on_stderr)

# Called unconverted from AutoGraph-converted code: functions that branch only on Python values, whose
# conversion from source at every start would cost time and change nothing.
_unconverted = tf.autograph.experimental.do_not_convert


class Controller:
    """Builds ``task`` under ``strategy`` with the optimizer and checkpoints, and runs the loop.

    Args:
      task: the objective (a trainer.runtime.task_protocol.Task).
      config: the loop's settings (TrainConfig, FinetuneConfig or any LoopConfig).
      model_dir: where checkpoints, summaries and the step log go (local or gs://).
      strategy: the tf.distribute strategy.
      init_weights: called with the network of a new run (not a resumed one) to give it its first
        weights from elsewhere (a Hugging Face --init-checkpoint); returns what it loaded, for the log.
      init_checkpoint: a model directory whose network weights start a new run (ignored when
        ``model_dir`` already has a checkpoint to resume).
      log: where progress lines go.
      warn: where warnings go (a damaged checkpoint set aside, a checkpoint list rebuilt): standard
        error unless given.
      after_first_save: called once, with the step the run started at, after the run's first
        checkpoint is saved (the command saves changed settings then: trainer/commands/training_command.py).
      step_flops: the model FLOPs of a step and the devices' peak (trainer/runtime/throughput.py):
        with them the step log, TensorBoard and the progress lines have model FLOPs/s and MFU.
    """

    def __init__(self, task: Task, config: LoopConfig, *, model_dir: str, strategy: tf.distribute.Strategy,
                 init_checkpoint: str | None = None, log: Callable[[str], None] = print,
                 init_weights: Callable[[keras.Model], str] | None = None,
                 after_first_save: Callable[[int], None] | None = None,
                 warn: Callable[[str], None] = warn_on_stderr, step_flops: StepFlops | None = None):
        self.started = command_start_time(default=time.time())  # the run's wall time counts from here
        self.task, self.config, self.strategy, self.log, self.warn = task, config, strategy, log, warn
        self.step_flops = step_flops
        self._after_first_save = after_first_save
        self.worker, self.num_workers = worker_info(strategy)
        self.chief = is_chief(strategy)
        # every worker keeps its own checkpoints: they may hold its replicas' memory
        self.model_dir = ModelDirectory(model_dir)
        self.work_dir = self.model_dir if self.chief else self.model_dir.worker(self.worker)
        tf.io.gfile.makedirs(self.work_dir.path)

        keras.mixed_precision.set_global_policy(config.precision)
        keras.utils.set_random_seed(config.seed)  # same initial weights and dropout on every run
        with strategy.scope():
            task.build(strategy)
            self.variables = task.trainable_variables()
            self.optimizer = build_optimizer(config, self.variables, task.learning_rate_multipliers())
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        first_replica = self.worker * (strategy.num_replicas_in_sync // self.num_workers)
        # Keras keeps dropout RNG state in seed-generator variables outside the model's checkpoint
        # graph; saving them makes the dropout masks after a resume the same as without one.
        rng = [v for v in task.model.non_trainable_variables if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(optimizer=self.optimizer, step=self.step, rng=rng,
                                              **task.checkpoint_items(first_replica))
        self.restored = self._restore(init_checkpoint, init_weights)
        # The micro-steps (the task's forward and backward passes) branch only on Python values, so
        # AutoGraph is off for them: converting them and the ~40 functions they call from source took
        # about 1 s of a tiny run's 5.7 s first step (docs/benchmarks.md, "Start-up"). The loop around them
        # stays converted (its tf.range, the loss scaling's branches under mixed_float16).
        self._grad_fn = tf.function(self._micro_steps, jit_compile=config.jit_compile, autograph=False)
        self._train_loop = tf.function(self._train_loop_fn)
        self._signals_anywhere = tf.function(self._signals_anywhere_fn)
        self.preemption = Preemption(self._any_signalled if self.num_workers > 1 else None,
                                     config.preemption_grace_seconds, give_up=self._given_up, log=self.log)
        self._running: tuple[int, int, int] = (0, 0, 0)  # (the run's first step, the running loop's first, last)
        self.peak_memory = PeakMemory(strategy)
        self.tracer = tensorflow_tracer
        self.metric_names = task.metric_names
        self.tokens_per_example = task.tokens_per_example
        self._iterator = None

    @property
    def network(self) -> keras.Model:
        return self.task.network

    # ---------------------------------------------------------------------------- set-up
    def _restore(self, init_checkpoint: str | None, init_weights: Callable[[keras.Model], str] | None = None) -> bool:
        """Resumes from the directory's checkpoints when it has any, else starts from
        ``init_checkpoint``'s weights or from scratch; builds the checkpoint manager. True when resumed."""
        history = self.work_dir.checkpoint_history()  # every name checked to stay inside checkpoints/
        # the workers resume together, from the newest step all of them have (runtime/resume_agreement.py)
        history = agreed_history(history, self.strategy, self.num_workers, self.warn)
        if history.prefixes:
            self._resume(history)
            check_same_step(self.strategy, self.num_workers, int(self.step.numpy()), self.work_dir.checkpoints)
            return True
        refuse_to_start_over(self.work_dir)
        self.manager = self._checkpoint_manager()
        check_same_step(self.strategy, self.num_workers, 0, self.work_dir.checkpoints)
        dropped = self.work_dir.forget_steps_after(0)  # a run killed before its first checkpoint
        if dropped:
            self.warn(no_checkpoint_warning(self.work_dir.checkpoints, self.work_dir.step_log, dropped))
        if init_weights is not None:
            self.log(f"initialised the model from {init_weights(self.network)}")
        if init_checkpoint:
            from trainer.runtime.restore import assign_network_weights, is_orbax_step  # both engines' weights

            source = ModelDirectory(init_checkpoint)
            latest = source.newest_checkpoint()
            if latest is None:
                raise ModelDirectoryError(f"--init-checkpoint {init_checkpoint}: no checkpoint under "
                                          f"{source.checkpoints}")
            if is_orbax_step(latest):  # a directory the JAX engine trained
                assign_network_weights(self.network, latest)
            else:
                tf.train.Checkpoint(model=self.network).restore(latest).expect_partial() \
                    .assert_existing_objects_matched()
            self.log(f"initialised the model from {latest}")
        return False

    def _checkpoint_manager(self) -> tf.train.CheckpointManager:
        """The manager of the directory's checkpoints, once what unfinished writes left is removed (a
        process killed while writing ckpt-N leaves ckpt-N_temp/, which a later save of ckpt-N would not
        empty). With ``async_checkpoint`` it writes through BackgroundWrites: same numbering, list and
        keep rule (trainer/runtime/checkpoint_writer.py)."""
        directory = self.work_dir.checkpoints
        for prefix in checkpoint_history.unfinished_saves(directory):
            removed = checkpoint_history.remove_unfinished_save(directory, prefix)
            self.warn(f"warning: removed {', '.join(posixpath.basename(p) for p in removed)} under {directory}: "
                      "what a checkpoint write that did not finish left (a killed or failed run)")
        self._saved_unconfirmed = False  # a checkpoint of this run saved, not yet known complete
        target = BackgroundWrites(self.checkpoint) if self.config.async_checkpoint else self.checkpoint
        return tf.train.CheckpointManager(target, directory, max_to_keep=self.config.keep_checkpoints,
                                          step_counter=self.step)

    def _resume(self, history: checkpoint_history.History) -> None:
        """Restores the newest checkpoint of ``history`` that reads. One that does not (a truncated
        or corrupted file) is set aside to checkpoints/damaged/, never deleted, and the next newest
        is tried; checkpoints/checkpoint keeps listing every other one (rebuilt from the files
        present when it was missing, damaged or short of some). Then everything logged after the
        restored step is forgotten: the run logs it again."""
        if history.rebuilt:
            self.warn(f"warning: {history.rebuilt}; the checkpoints present are "
                      f"{', '.join(posixpath.basename(p) for p in history.prefixes)}, newest last")
        if history.rebuilt is not None:
            checkpoint_history.write_history(history)
        set_aside, restored = [], None
        for latest in reversed(history.prefixes):
            try:
                self.checkpoint.restore(latest).assert_existing_objects_matched()
                restored = latest
                break
            except (tf.errors.OpError, IndexError, ValueError) as error:
                moved = self.work_dir.set_aside_checkpoint(latest)
                set_aside.append(latest)
                reason = " ".join(str(getattr(error, "message", error)).split())[:200]
                self.warn(f"warning: checkpoint {latest} cannot be read ({reason}); moved it to {moved}")
        if restored is None:
            raise UnreadableCheckpointError(
                f"no checkpoint under {self.work_dir.checkpoints} can be read: {', '.join(set_aside)} were moved "
                f"to {self.work_dir.damaged_checkpoints}; "
                "start again in a new --model-dir or put a readable checkpoint back")
        self.manager = self._checkpoint_manager()  # reads the checkpoint list as it now is
        step = int(self.step.numpy())
        if set_aside:
            self.warn(f"warning: resuming from {restored} (step {step}) instead of {set_aside[0]}")
        dropped = self.work_dir.forget_steps_after(step)  # every worker its own step log; the chief's has the events
        self.log(resumed_line(restored, step, dropped))

    # -------------------------------------------------------------------- replica functions
    def _micro_steps(self, features, state):
        """All micro-steps of one step on one replica -> (grad sums, loss sum, metric sums, count, state)."""
        fp16 = self.config.precision == "mixed_float16"
        grad_sums = [tf.zeros_like(v) for v in self.variables]
        loss_sum = count = tf.constant(0.0)
        metric_sums = {name: tf.constant(0.0) for name in self.task.metric_names}
        for micro in range(self.config.accumulation_steps):
            batch = tf.nest.map_structure(lambda value: value[micro], features)
            if micro:
                # One micro-step after another: without this edge TensorFlow starts the next forward
                # pass while the last backward pass runs, and both micro-steps' activations are alive
                # at once (accumulation would save no memory). Measured on the tiny preset with 4
                # rows per replica x 4 micro-steps: peak 196 MB unordered, 99 MB ordered.
                with tf.control_dependencies(grad_sums):
                    batch = tf.nest.map_structure(tf.identity, batch)
            with tf.GradientTape() as tape:
                out = self.task.compute(batch, state, training=True)
                scaled = self.optimizer.scale_loss(out.loss_sum) if fp16 else out.loss_sum
            grads = tape.gradient(scaled, self.variables)
            grad_sums = [s + tf.convert_to_tensor(g) for s, g in zip(grad_sums, grads)]
            loss_sum += out.loss_sum
            metric_sums = {name: metric_sums[name] + out.metric_sums[name] for name in metric_sums}
            count += out.count
            state = out.state
        return grad_sums, loss_sum, metric_sums, count, state

    def _replica_gradients(self, features):
        """Global (all-reduced, clipped) gradients of one step -> (grads, loss, metrics, grad norm)."""
        context = tf.distribute.get_replica_context()
        grads, loss_sum, metric_sums, count, state = self._grad_fn(features, self.task.read_state())
        self.task.write_state(state)
        names = list(metric_sums)
        totals = context.all_reduce(tf.distribute.ReduceOp.SUM, [loss_sum, count] + [metric_sums[n] for n in names])
        denominator = tf.maximum(totals[1], 1.0)
        grads = [g / denominator for g in context.all_reduce(tf.distribute.ReduceOp.SUM, grads)]
        clip = self.config.clip_norm
        if self.config.precision == "mixed_float16":  # grads are still scaled: clip at the scaled norm
            scale = tf.cast(self.optimizer.dynamic_scale, tf.float32)
            # converted: the clip norm is a tensor here, and AutoGraph makes clip_by_global_norm's
            # `clip_norm <= 0` a tf.cond
            grads, norm = clip_by_global_norm(grads, clip * scale if clip > 0 else 0.0)
            norm = norm / scale
        else:
            grads, norm = _unconverted(clip_by_global_norm)(grads, clip)
        metrics = {name: total / denominator for name, total in zip(names, totals[2:])}
        return grads, totals[0] / denominator, metrics, norm

    def _replica_step(self, features):
        grads, loss, metrics, norm = self._replica_gradients(features)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        return loss, metrics, norm

    def gradients(self, iterator) -> tuple[list[np.ndarray], float]:
        """(global gradients, loss) of the next batch of ``iterator`` without applying them (advances
        any task state like a step would). For inspecting a step, e.g. comparing strategies."""
        @tf.function
        def run(batch):
            grads, loss, _, _ = self.strategy.run(self._replica_gradients, args=(batch,))
            first = self.strategy.experimental_local_results
            return [first(g)[0] for g in grads], first(loss)[0]

        grads, loss = run(next(iterator))
        return [g.numpy() for g in grads], float(loss.numpy())

    def run_steps(self, iterator, count: int) -> np.ndarray:
        """Runs ``count`` optimizer steps on batches from ``iterator`` (one tf.function call); per-step losses."""
        losses, _, _ = self._train_loop(iterator, tf.constant(count))
        return losses.numpy()

    def train_dataset(self) -> tf.distribute.DistributedDataset:
        """The training input, distributed, starting at the current step."""
        return self.task.train_dataset(self.strategy, int(self.step.numpy()))

    # ------------------------------------------------------------------------ host loops
    def _train_loop_fn(self, iterator, num_steps):
        losses = tf.TensorArray(tf.float32, size=num_steps)
        norms = tf.TensorArray(tf.float32, size=num_steps)
        metrics = {name: tf.TensorArray(tf.float32, size=num_steps) for name in self.task.metric_names}
        first = self.strategy.experimental_local_results
        for i in tf.range(num_steps):
            loss, step_metrics, norm = self.strategy.run(self._replica_step, args=(next(iterator),))
            losses = losses.write(i, first(loss)[0])
            norms = norms.write(i, first(norm)[0])
            metrics = {name: array.write(i, first(step_metrics[name])[0]) for name, array in metrics.items()}
            self.step.assign_add(1)
        return losses.stack(), {name: array.stack() for name, array in metrics.items()}, norms.stack()

    def evaluate(self) -> dict[str, float]:
        """The task's evaluation metrics at the current weights. An evaluation input that cannot be
        read (a damaged or vanished file, a stream shorter than its manifest says) stops the run as
        the training input's does: a TrainingDataError (exit 3), the checkpoints kept."""
        try:
            return self.task.evaluate(self)
        except (tf.errors.DataLossError, tf.errors.NotFoundError) as error:
            raise TrainingDataError(self._evaluation_input_error(error)) from None
        except tf.errors.InvalidArgumentError as error:
            if not stream_ended_early(error):  # the reader's report of a short stream, else a bug
                raise
            raise TrainingDataError(self._evaluation_input_error(error)) from None

    # ------------------------------------------------------------- the loop's engine
    def current_step(self) -> int:
        return int(self.step.numpy())

    def train(self, evaluate_at_end: bool = False) -> TrainResult:
        """Trains to ``train_steps`` in the backend-neutral loop (trainer/runtime/training_loop.py)."""
        return TrainingLoop(self, self.log).train(evaluate_at_end)

    def start_input(self) -> None:
        step = self.current_step()
        self._running = (step, step, step)
        self._iterator = iter(self.train_dataset())

    def run_loop(self, step: int, count: int) -> LoopOutput:
        """Runs the loop of ``count`` steps after ``step`` (one tf.function call); a training input
        that cannot be read is a TrainingDataError."""
        self._running = (self._running[0], step + 1, step + count)
        self.peak_memory.reset()
        try:
            losses, metrics, norms = self._train_loop(self._iterator, tf.constant(count))
        except (tf.errors.DataLossError, tf.errors.NotFoundError) as error:
            raise TrainingDataError(self._input_error(step, error)) from None
        except tf.errors.InvalidArgumentError as error:
            if not stream_ended_early(error):  # the reader's report of a short stream, else a bug
                raise
            raise TrainingDataError(self._input_error(step, error)) from None
        return LoopOutput(losses.numpy(), {name: values.numpy() for name, values in metrics.items()}, norms.numpy(),
                          self.peak_memory.peak())

    def latest_checkpoint(self) -> str | None:
        return self.manager.latest_checkpoint

    def step_details(self, step: int) -> dict[str, Any]:
        return self.task.step_details(step)

    def step_summaries(self, step: int) -> dict[str, float]:
        return self.task.step_summaries(step)

    def workers_all_present(self):
        return self._workers_all_present()

    def _any_signalled(self, signalled: bool) -> bool:
        return bool(self._signals_anywhere(tf.constant(float(signalled))).numpy() > 0)

    def _signals_anywhere_fn(self, signalled: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(lambda: tf.identity(signalled))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    @contextlib.contextmanager
    def _workers_all_present(self) -> Iterator[None]:
        """A collective that fails because a worker is gone becomes a WorkerLostError (exit status 3)
        naming that worker and the checkpoint a restart of all workers resumes from."""
        try:
            yield
        except tf.errors.OpError as error:
            who = lost_worker(error, self.strategy)
            if who is None:
                raise
            raise peer_lost_stopped(who, self.num_workers, "workers in TF_CONFIG", f"this worker ({self.worker})",
                                    self.manager.latest_checkpoint) from None

    def _given_up(self, signum: int) -> str:
        """The line of a run whose loop of steps outlasted ``preemption_grace_seconds`` after signal
        ``signum`` (trainer/runtime/preemption.py calls it on its watcher thread before the process
        exits): the checkpoint write in flight is waited for first, then the line says what is saved."""
        start, first, last = self._running
        try:
            self.finish_saves(start)
            failed = ""
        except (TrainingStopped, SaveFailed) as error:
            failed = f" (the checkpoint being written failed: {error})"
        latest = self.manager.latest_checkpoint
        saved = (f"with nothing to save since {latest}{failed}; re-running the same command resumes from it" if latest
                 else f"before the run's first checkpoint{failed}; re-running the same command starts at step 1")
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        return (f"received signal {signum}: {steps} did not end within {self.config.preemption_grace_seconds:g} s "
                f"(preemption_grace_seconds): stopped {saved}")

    # --------------------------------------------------------------------------- helpers
    def save(self, step: int, start: int) -> int:
        """Saves the checkpoint of ``step`` (returned) and returns when the step loop may go on: once it
        is written or, with ``async_checkpoint``, once the write before it has finished and this one's
        snapshot is taken (trainer/runtime/checkpoint_writer.py). A full disk is a CheckpointSaveError
        naming the checkpoint (this one, or the one written in the background before it), with the
        save's temporary files removed and the checkpoint before kept."""
        with self._save_errors(step):
            self._wait_for_write(start)
            self.manager.save(checkpoint_number=step)
            self._saved_unconfirmed = True
            if not self.config.async_checkpoint:
                self._wait_for_write(start)
        return step

    def finish_saves(self, start: int) -> None:
        """Returns once every checkpoint saved is complete (with ``async_checkpoint``, the one being
        written): the run's last step. A full disk during that write is a CheckpointSaveError, as in
        :meth:`_save`."""
        with self._save_errors(None):
            self._wait_for_write(start)

    def _wait_for_write(self, start: int) -> None:
        """Waits for the checkpoint write in flight (raising its SaveFailed); once the run's first
        checkpoint is complete, calls ``after_first_save`` with ``start``."""
        self.manager.sync()
        confirmed, self._saved_unconfirmed = self._saved_unconfirmed, False
        if confirmed and self._after_first_save is not None:
            callback, self._after_first_save = self._after_first_save, None
            callback(start)

    @contextlib.contextmanager
    def _save_errors(self, step: int | None) -> Iterator[None]:
        """A full disk while writing a checkpoint (that of ``step``, or one written in the background)
        becomes a CheckpointSaveError; another error of a background write is raised as it was."""
        try:
            yield
        except tf.errors.ResourceExhaustedError as error:
            if step is None:
                raise
            prefix = posixpath.join(self.work_dir.checkpoints, f"ckpt-{step}")
            raise self._save_error(prefix, error, checkpoint_history.remove_unfinished_save(
                self.work_dir.checkpoints, prefix)) from None
        except SaveFailed as failed:
            if not isinstance(failed.error, tf.errors.ResourceExhaustedError):
                raise failed.error from None
            raise self._save_error(failed.prefix, failed.error, failed.removed) from None

    def _save_error(self, prefix: str, error: tf.errors.OpError, removed: list[str]) -> CheckpointSaveError:
        """What a full disk during the save of ``prefix`` tells, its partial files ``removed``."""
        return checkpoint_save_stopped(prefix, error_text(error), [posixpath.basename(p) for p in removed],
                                       self.work_dir.path, self.work_dir.latest_checkpoint())

    def _input_error(self, step: int, error: tf.errors.OpError) -> str:
        """What to tell when the training input cannot be read: what TensorFlow said, where the task
        finds the damage, and what is kept."""
        said = error_text(error)
        self.log(f"the training input could not be read after step {step} ({said}); locating the damage")
        where = self.task.describe_input_error(error)
        kept = self.manager.latest_checkpoint or "no checkpoint yet"
        return (f"the training input could not be read after step {step}: {where}. Training stopped; the "
                f"checkpoints so far are kept (latest: {kept})")

    def _evaluation_input_error(self, error: tf.errors.OpError) -> str:
        """What to tell when the evaluation input cannot be read: what TensorFlow said, and what is kept."""
        kept = self.manager.latest_checkpoint or "no checkpoint yet"
        return (f"the evaluation input could not be read at step {int(self.step.numpy())} ({error_text(error)}); "
                f"`xlnet inspect DATA_DIR --verify` on the evaluation data names the damaged file. Training "
                f"stopped; the checkpoints so far are kept (latest: {kept})")

    def learning_rate(self, step: int) -> float:
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        return float(optimizer._learning_rate(step)) if callable(optimizer._learning_rate) else \
            float(optimizer.learning_rate)
