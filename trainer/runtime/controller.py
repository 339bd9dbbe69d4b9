"""The distributed training loop shared by every task (pretraining, fine-tuning), as in Orbit.

A task (the protocol of trainer/runtime/task_protocol.py; trainer/tasks/pretraining.py,
trainer/tasks/sequence.py, trainer/tasks/squad.py) says what to build, what to compute and what to
save; the :class:`Controller` owns the loop every objective shares:

* the strategy and the process-wide policy (mixed precision, seed);
* the optimizer: AdamW with warm-up and decay, per-variable learning-rate factors when the task
  asks (layer-wise decay), dynamic loss scaling under mixed_float16;
* one optimizer step per replica: ``accumulation_steps`` micro-steps whose gradients are summed,
  all-reduced over replicas, divided by the global count (targets or examples), clipped by
  global norm, then applied; ``steps_per_loop`` steps run inside one tf.function (the TPU
  pattern) and Python only sees their per-step losses;
* checkpoints (model, optimizer, step, dropout RNG state and whatever the task adds, such as the
  Transformer-XL memory) with exact resume, the NaN guard, the step log, the console's progress
  lines with the ETA, and periodic evaluation.

What the loop calls upon lives beside it: SIGTERM / SIGINT preemption agreed by all workers
(trainer/runtime/preemption.py), the TensorBoard writers (trainer/runtime/summaries.py), the
allocator's peak memory per loop of steps (trainer/runtime/peak_memory.py), model FLOPs/s and MFU
(trainer/runtime/throughput.py), the goodput accounting (trainer/runtime/goodput.py), the
profiler window (trainer/runtime/profiling.py).

Losses: the step log has every step's loss; TensorBoard's train ``loss`` and the console's
progress line have the mean over the loop of steps they close (the line names those steps);
``TrainResult.last_loss`` is the last step's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import posixpath
import sys
import time
from typing import Any, Callable, Iterator, Mapping

import keras
import numpy as np
import tensorflow as tf

from tfrecords.reader import stream_ended_early
from tfrecords.tensorflow_errors import error_text
from trainer.configs.training import LoopConfig
from trainer.runtime import checkpoint_history
from trainer.runtime.checkpoint_writer import BackgroundWrites, SaveFailed
from trainer.runtime.distribution import is_chief, lost_worker, worker_info
from trainer.runtime.goodput import GoodputRecorder, log_breakdown
from trainer.runtime.model_dir import ModelDirectory, ModelDirectoryError
from trainer.runtime.optimization import build_optimizer, clip_by_global_norm
from trainer.runtime.peak_memory import PeakMemory
from trainer.runtime.preemption import Preemption
from trainer.runtime.profiling import ProfileWindow
from trainer.runtime.resume_agreement import agreed_history, check_same_step
from trainer.runtime.run_clock import command_start_time
from trainer.runtime.run_lock import taken_over_from
from trainer.runtime.summaries import SummaryManager
from trainer.runtime.training_stops import (  # noqa: F401 (the loop's errors, raised and re-exported here)
    CheckpointSaveError,
    TrainingDataError,
    TrainingDivergedError,
    TrainingStopped,
    UnreadableCheckpointError,
    WorkerLostError,
)
from trainer.runtime.task_protocol import Task
from trainer.runtime.throughput import StepFlops

# Called unconverted from AutoGraph-converted code: functions that branch only on Python values, whose
# conversion from source at every start would cost time and change nothing.
_unconverted = tf.autograph.experimental.do_not_convert


def warn_on_stderr(line: str) -> None:
    """A warning on standard error, flushed at once: standard output keeps the progress lines."""
    print(line, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """How :meth:`Controller.train` ended.

    ``last_loss`` is the loss of the last step run (not a loop's mean, which the console's
    progress lines and TensorBoard show), None when no step ran (resumed at train_steps).
    """

    step: int
    stopped: str  # "completed" or "preempted"
    last_loss: float | None
    eval_metrics: Mapping[str, float]


class Controller:
    """Builds ``task`` under ``strategy`` with the optimizer and checkpoints, and runs the loop.

    Args:
      task: the objective (a trainer.runtime.task_protocol.Task).
      config: the loop's settings (TrainConfig, FinetuneConfig or any LoopConfig).
      model_dir: where checkpoints, summaries and the step log go (local or gs://).
      strategy: the tf.distribute strategy.
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
                 after_first_save: Callable[[int], None] | None = None,
                 warn: Callable[[str], None] = warn_on_stderr, step_flops: StepFlops | None = None):
        self._started = command_start_time(default=time.time())  # the run's wall time counts from here
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
        self._restored = self._restore(init_checkpoint)
        # The micro-steps (the task's forward and backward passes) branch only on Python values, so
        # AutoGraph is off for them: converting them and the ~40 functions they call from source took
        # about 1 s of a tiny run's 5.7 s first step (docs/benchmarks.md, "Start-up"). The loop around them
        # stays converted (its tf.range, the loss scaling's branches under mixed_float16).
        self._grad_fn = tf.function(self._micro_steps, jit_compile=config.jit_compile, autograph=False)
        self._train_loop = tf.function(self._train_loop_fn)
        self.preemption = Preemption(strategy, self.num_workers, config.preemption_grace_seconds,
                                     give_up=self._given_up, log=self.log)
        self._running: tuple[int, int, int] = (0, 0, 0)  # (the run's first step, the running loop's first, last)
        self.peak_memory = PeakMemory(strategy)

    @property
    def network(self) -> keras.Model:
        return self.task.network

    # ---------------------------------------------------------------------------- set-up
    def _restore(self, init_checkpoint: str | None) -> bool:
        """Resumes from the directory's checkpoints when it has any, else starts from
        ``init_checkpoint``'s weights or from scratch; builds the checkpoint manager. True when resumed."""
        history = self.work_dir.checkpoint_history()  # every name checked to stay inside checkpoints/
        # the workers resume together, from the newest step all of them have (runtime/resume_agreement.py)
        history = agreed_history(history, self.strategy, self.num_workers, self.warn)
        if history.prefixes:
            self._resume(history)
            check_same_step(self.strategy, self.num_workers, int(self.step.numpy()), self.work_dir.checkpoints)
            return True
        damaged = checkpoint_history.damaged_directory(self.work_dir.checkpoints)
        if tf.io.gfile.glob(posixpath.join(damaged, "*.index")):
            # never start over where every checkpoint was set aside: the step log and the events
            # would hold two runs
            raise UnreadableCheckpointError(
                f"no checkpoint under {self.work_dir.checkpoints} can be read: the ones written were set aside to "
                f"{damaged}; start again in a new --model-dir or put a readable checkpoint back in "
                f"{self.work_dir.checkpoints}")
        self.manager = self._checkpoint_manager()
        check_same_step(self.strategy, self.num_workers, 0, self.work_dir.checkpoints)
        dropped = self.work_dir.forget_steps_after(0)  # a run killed before its first checkpoint
        if dropped:
            self.warn(f"warning: no checkpoint under {self.work_dir.checkpoints}: starting at step 1, the {dropped} "
                      f"steps {self.work_dir.step_log} holds from a run that saved none will be logged again")
        if init_checkpoint:
            source = ModelDirectory(init_checkpoint)
            latest = source.latest_checkpoint()
            if latest is None:
                raise ModelDirectoryError(f"--init-checkpoint {init_checkpoint}: no checkpoint under "
                                          f"{source.checkpoints}")
            tf.train.Checkpoint(model=self.network).restore(latest).expect_partial().assert_existing_objects_matched()
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
                f"to {checkpoint_history.damaged_directory(self.work_dir.checkpoints)}; "
                "start again in a new --model-dir or put a readable checkpoint back")
        self.manager = self._checkpoint_manager()  # reads the checkpoint list as it now is
        step = int(self.step.numpy())
        if set_aside:
            self.warn(f"warning: resuming from {restored} (step {step}) instead of {set_aside[0]}")
        dropped = self.work_dir.forget_steps_after(step)  # every worker its own step log; the chief's has the events
        self.log(f"resumed from {restored} at step {step}"
                 + (f"; the {dropped} steps logged after it will be logged again" if dropped else ""))

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

    def train(self, evaluate_at_end: bool = False) -> TrainResult:
        """Trains to ``train_steps``; checkpoints every ``checkpoint_every`` steps and at exit,
        evaluates every ``eval_every`` steps and, with ``evaluate_at_end``, once more at the end
        (unless the last step was just evaluated). Where the time went is added to goodput.json
        as the run goes and logged at its end (trainer/runtime/goodput.py)."""
        config = self.config
        start = int(self.step.numpy())
        iterator = iter(self.train_dataset())
        summaries = SummaryManager(self.model_dir, enabled=self.chief)
        goodput = GoodputRecorder(self.model_dir, self._started, enabled=self.chief)
        profile = ProfileWindow(config.profile_window, self.model_dir.tensorboard("train"), enabled=self.chief)
        step, last_loss, eval_metrics, evaluated_at = start, None, {}, -1
        saved_at = start if self._restored else None  # the step of the newest checkpoint on disk
        goodput.begin(start, taken_over_from(self.model_dir) if self.chief else None)
        began, timed_from = time.time(), start  # the ETA leaves the first (compiling) step out
        with self.preemption.handlers(), _stopped_at_exit(profile), self._workers_all_present():
            while step < config.train_steps and not self.preemption.stopping():
                # the first loop of a process is one step, so that progress shows once it is compiled
                count = 1 if step == start else self._steps_until_event(step, profile.boundaries())
                profile.before_loop(step)
                self._running = (start, step + 1, step + count)
                with goodput.timed("compile" if step == start else "productive", steps=count), \
                        self.preemption.running_loop():  # a signal waits for it preemption_grace_seconds at most
                    losses, metrics, norms, elapsed, peak = self._run_loop(iterator, step, count)
                profile.after_loop(step + count)
                rates = self._loop_rates(count, elapsed)
                self._record_steps(step, losses, metrics, norms, peak, rates)
                step += count
                last_loss = float(losses[-1])
                summaries.write("train", step, self._loop_scalars(step, losses, metrics, norms, {
                    **rates, **({} if peak is None else {"peak_memory_bytes": float(peak)})}))
                if step == start + count:
                    self.log(f"step {step}/{config.train_steps} loss {last_loss:.4f} (the first step of this run: "
                             f"{elapsed:.1f}s with tracing and compilation)")
                    began, timed_from = time.time(), step
                else:
                    self._progress(step, count, losses, rates, began, timed_from)
                if step % config.checkpoint_every == 0:
                    with goodput.timed("checkpoint"):
                        saved_at = self._save(step, start)
                    goodput.saved(step)
                if config.eval_every and step % config.eval_every == 0:
                    with goodput.timed("evaluation"):
                        eval_metrics, evaluated_at = self._run_eval(summaries, step), step
                goodput.record()
            if saved_at != step:  # the last loop may have ended on a checkpoint already
                with goodput.timed("checkpoint"):
                    self._save(step, start)
                goodput.saved(step)
            with goodput.timed("checkpoint"):
                self._finish_saves(start)  # the last checkpoint complete before the run ends
        stopped = "completed" if step >= config.train_steps else "preempted"
        if stopped == "preempted":
            self.log(f"{self.preemption.cause()}: saved checkpoint at step {step}, exiting")
        elif evaluate_at_end and evaluated_at != step:
            with goodput.timed("evaluation"):
                eval_metrics = self._run_eval(summaries, step)
        record = goodput.record()
        if self.chief:
            log_breakdown(record, self.model_dir.path, self.log)
        return TrainResult(step, stopped, last_loss, eval_metrics)

    def _run_loop(self, iterator, step: int, count: int):
        """Runs the loop of ``count`` steps after ``step`` -> (losses, metrics, grad norms, seconds,
        peak memory); a training input that cannot be read is a TrainingDataError, a NaN loss a
        TrainingDivergedError."""
        tick = time.time()
        self.peak_memory.reset()
        try:
            losses, metrics, norms = self._train_loop(iterator, tf.constant(count))
        except (tf.errors.DataLossError, tf.errors.NotFoundError) as error:
            raise TrainingDataError(self._input_error(step, error)) from None
        except tf.errors.InvalidArgumentError as error:
            if not stream_ended_early(error):  # the reader's report of a short stream, else a bug
                raise
            raise TrainingDataError(self._input_error(step, error)) from None
        losses, norms = losses.numpy(), norms.numpy()
        metrics = {name: values.numpy() for name, values in metrics.items()}
        elapsed = time.time() - tick
        self._guard_finite(step, losses)
        return losses, metrics, norms, elapsed, self.peak_memory.peak()

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
            latest = self.manager.latest_checkpoint
            resume = (f"they resume from the last checkpoint all of them saved ({latest} here)" if latest else
                      "no checkpoint was saved yet, so they start again at step 1")
            raise WorkerLostError(
                f"{who} of the {self.num_workers} workers in TF_CONFIG stopped answering (killed, or its machine or "
                f"network went down) and this worker ({self.worker}) cannot train without it. Restart ALL workers "
                f"with the same command: {resume}") from None

    def _given_up(self, signum: int) -> str:
        """The line of a run whose loop of steps outlasted ``preemption_grace_seconds`` after signal
        ``signum`` (trainer/runtime/preemption.py calls it on its watcher thread before the process
        exits): the checkpoint write in flight is waited for first, then the line says what is saved."""
        start, first, last = self._running
        try:
            self._finish_saves(start)
            failed = ""
        except (TrainingStopped, SaveFailed) as error:
            failed = f" (the checkpoint being written failed: {error})"
        latest = self.manager.latest_checkpoint
        saved = (f"with nothing to save since {latest}{failed}; re-running the same command resumes from it" if latest
                 else f"before the run's first checkpoint{failed}; re-running the same command starts at step 1")
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        return (f"received signal {signum}: {steps} did not end within {self.config.preemption_grace_seconds:g} s "
                f"(preemption_grace_seconds): stopped {saved}")

    def _loop_rates(self, count: int, seconds: float) -> dict[str, float]:
        """Tokens/s, examples/s and, when the model's FLOPs are known, model FLOPs/s and MFU of a
        loop of ``count`` steps that took ``seconds``."""
        examples = count * self.config.examples_per_step
        rates = {"tokens_per_sec": examples * self.task.tokens_per_example / seconds,
                 "examples_per_sec": examples / seconds}
        return {**rates, **(self.step_flops.rates(count, seconds) if self.step_flops else {})}

    # --------------------------------------------------------------------------- helpers
    def _save(self, step: int, start: int) -> int:
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

    def _finish_saves(self, start: int) -> None:
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
        kept = self.work_dir.latest_checkpoint()
        return CheckpointSaveError(
            f"cannot save checkpoint {prefix}: no space left on the device ({error_text(error)}); "
            + (f"its partial files were removed ({', '.join(posixpath.basename(p) for p in removed)}). "
               if removed else "")
            + f"Free space under {self.work_dir.path} and run the same command again: the run resumes from "
            + (f"{kept}" if kept else "its start, no checkpoint having been saved"))

    def _steps_until_event(self, step: int, also: tuple[int, ...] = ()) -> int:
        """Steps from ``step`` to the next loop boundary: the last step, a loop's end, a checkpoint,
        an evaluation, or any of ``also`` (the profiler window's ends) after ``step``."""
        config = self.config
        boundaries = [config.train_steps, _next_multiple(step, config.steps_per_loop),
                      _next_multiple(step, config.checkpoint_every), *(b for b in also if b > step)]
        if config.eval_every:
            boundaries.append(_next_multiple(step, config.eval_every))
        return min(boundaries) - step

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

    def _guard_finite(self, step: int, losses: np.ndarray) -> None:
        bad = np.flatnonzero(~np.isfinite(losses))
        if bad.size:
            last = self.manager.latest_checkpoint or "none yet"
            raise TrainingDivergedError(
                f"loss became {losses[bad[0]]} at step {step + int(bad[0]) + 1}; training stopped without "
                f"saving. Last good checkpoint: {last}. Lower learning_rate or check the data.")

    def _record_steps(self, step: int, losses, metrics: Mapping[str, np.ndarray], norms, peak: int | None,
                      rates: Mapping[str, float]) -> None:
        """The step log's rows of a loop of steps after ``step``; the peak memory, model FLOPs/s and
        MFU are the loop's, in each of its rows. A peak no device reported is null: the row says that
        none was measured (never 0, which would read as "used no memory")."""
        window: dict[str, Any] = {"peak_memory_bytes": peak}
        if self.step_flops is not None:
            window.update(model_flops_per_sec=rates["model_flops_per_sec"], mfu=rates["mfu"],
                          mfu_peak_source=self.step_flops.peak_source)
        self.work_dir.append_steps(
            {"step": step + i + 1, "loss": float(loss), **{name: float(values[i]) for name, values in metrics.items()},
             "grad_norm": float(norm), **window, **self.task.step_details(step + i + 1)}
            for i, (loss, norm) in enumerate(zip(losses, norms)))

    def _learning_rate(self, step: int) -> float:
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        return float(optimizer._learning_rate(step)) if callable(optimizer._learning_rate) else \
            float(optimizer.learning_rate)

    def _loop_scalars(self, step: int, losses, metrics: Mapping[str, np.ndarray], norms,
                      rates: Mapping[str, float]) -> dict[str, float]:
        """The train writer's scalars of a loop of steps ending at ``step``: loss, the task's metrics
        and the gradient norm as the loop's means, the learning rate at ``step``, ``rates`` (tokens/s,
        examples/s, peak memory) and the task's own scalars."""
        return {"loss": float(np.mean(losses)),
                **{self.task.metric_names[name]: float(np.mean(values)) for name, values in metrics.items()},
                "learning_rate": self._learning_rate(step), "grad_norm": float(np.mean(norms)), **rates,
                **self.task.step_summaries(step)}

    def _run_eval(self, summaries: SummaryManager, step: int) -> dict[str, float]:
        metrics = self.evaluate()
        summaries.write("eval", step, metrics)
        self.log(f"step {step} eval: " + " ".join(f"{name} {value:.4f}" for name, value in metrics.items()))
        return metrics

    def _progress(self, step: int, count: int, losses, rates: Mapping[str, float], began: float, start: int) -> None:
        """The console line of a loop of ``count`` steps ending at ``step``: its loss is the loop's
        mean (as TensorBoard's), and the line says over which steps; a loop of one step shows that
        step's loss."""
        done = step - start
        per_step = (time.time() - began) / max(done, 1)
        eta = per_step * (self.config.train_steps - step)
        which = f" (mean of steps {step - count + 1}-{step})" if count > 1 else ""
        mfu = f"MFU {rates['mfu']:.1%} " if "mfu" in rates else ""
        self.log(f"step {step}/{self.config.train_steps} loss {float(np.mean(losses)):.4f}{which} "
                 f"lr {self._learning_rate(step):.3g} tokens/s {rates['tokens_per_sec']:.0f} {mfu}"
                 f"ETA {_clock(eta)}")


@contextlib.contextmanager
def _stopped_at_exit(profile: ProfileWindow) -> Iterator[None]:
    """A profiler still tracing when the loop ends (a preempted run, an error) is stopped."""
    try:
        yield
    finally:
        profile.stop()


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
