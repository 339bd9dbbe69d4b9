"""The training loop both engines run, written once: loops of steps, checkpoints, evaluations, the
step log, TensorBoard, the console's progress lines with the ETA, goodput, the NaN guard, the
profiler window and preemption.

An engine (the protocol :class:`Engine`) says how steps run on its backend:
trainer/runtime/controller.py on TensorFlow (tf.distribute, tf.train.Checkpoint), 
trainer/runtime/jax_engine.py on JAX (jit, Orbax). Everything else a run does lives here, so the two
engines write the same model directory: the same step-log fields, goodput.json, events and lines.
As Keras 3 keeps one ``Trainer`` with a subclass per backend, and Orbit one loop apart from the task.

Losses: the step log has every step's loss; TensorBoard's train ``loss`` and the console's
progress line have the mean over the loop of steps they close (the line names those steps);
``TrainResult.last_loss`` is the last step's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from typing import Any, Callable, ContextManager, Iterator, Mapping, NamedTuple, Protocol

import numpy as np

from trainer.configs.training import LoopConfig
from trainer.runtime.goodput import GoodputRecorder, log_breakdown
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.preemption import Preemption
from trainer.runtime.profiling import ProfileWindow, Tracer
from trainer.runtime.run_lock import taken_over_from
from trainer.runtime.summaries import SummaryManager
from trainer.runtime.throughput import StepFlops
from trainer.runtime.training_stops import TrainingDivergedError, UnreadableCheckpointError


def warn_on_stderr(line: str) -> None:
    """A warning on standard error, flushed at once: standard output keeps the progress lines."""
    print(line, file=sys.stderr, flush=True)


def resumed_line(checkpoint: str, step: int, replayed: int) -> str:
    """What either engine logs on resuming from ``checkpoint`` at ``step``, ``replayed`` steps of the
    step log after it dropped (they are trained and logged again)."""
    return (f"resumed from {checkpoint} at step {step}"
            + (f"; the {replayed} steps logged after it will be logged again" if replayed else ""))


def no_checkpoint_warning(checkpoints: str, step_log: str, replayed: int) -> str:
    """What either engine warns when a run that saved no checkpoint left ``replayed`` steps in its step log."""
    return (f"warning: no checkpoint under {checkpoints}: starting at step 1, the {replayed} steps {step_log} "
            "holds from a run that saved none will be logged again")


def refuse_to_start_over(work_dir: ModelDirectory) -> None:
    """A run with no checkpoint to resume from never starts over where the checkpoints written were all
    set aside (checkpoints/damaged/ holds some): its step log and events would tell two runs, and the
    set-aside ones may be put back. Raises UnreadableCheckpointError; both engines call it."""
    if work_dir.set_aside_checkpoints():
        raise UnreadableCheckpointError(
            f"no checkpoint under {work_dir.checkpoints} can be read: the ones written were set aside to "
            f"{work_dir.damaged_checkpoints}; start again in a new --model-dir or put a readable checkpoint back in "
            f"{work_dir.checkpoints}")


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """How a run's loop ended.

    ``last_loss`` is the loss of the last step run (not a loop's mean, which the console's
    progress lines and TensorBoard show), None when no step ran (resumed at train_steps).
    """

    step: int
    stopped: str  # "completed" or "preempted"
    last_loss: float | None
    eval_metrics: Mapping[str, float]


class LoopOutput(NamedTuple):
    """A loop of steps as an engine ran it: per-step losses, the task's metrics and gradient norms,
    the devices' peak memory over the loop, and the seconds the loop's steps waited for their input
    (each None where the engine cannot tell: TensorFlow's input runs inside its loop)."""

    losses: np.ndarray
    metrics: Mapping[str, np.ndarray]
    norms: np.ndarray
    peak_memory: int | None
    input_wait_seconds: float | None = None


class Engine(Protocol):
    """What an engine gives the loop."""

    config: LoopConfig
    chief: bool
    model_dir: ModelDirectory  # the run's directory (TensorBoard, goodput)
    work_dir: ModelDirectory  # this worker's (checkpoints, step log): the run's on the chief
    step_flops: StepFlops | None
    preemption: Preemption
    tracer: Callable[[], Tracer]
    metric_names: Mapping[str, str]  # step-log name -> TensorBoard tag of the task's metrics
    tokens_per_example: int
    restored: bool  # whether the run resumed from a checkpoint of its own
    started: float  # when the command started (the run's wall time counts from there)

    def current_step(self) -> int:
        """The last step done (the checkpoint's after a resume)."""

    def start_input(self) -> None:
        """Readies the training input at the current step."""

    def run_loop(self, step: int, count: int) -> LoopOutput:
        """Runs ``count`` steps after ``step``; an input that cannot be read is a TrainingDataError."""

    def save(self, step: int, start: int) -> None:
        """Saves the checkpoint of ``step``; returns when the loop may go on (see the engines)."""

    def finish_saves(self, start: int) -> None:
        """Returns once every checkpoint saved is complete."""

    def latest_checkpoint(self) -> str | None: ...

    def learning_rate(self, step: int) -> float: ...

    def evaluate(self) -> dict[str, float]: ...

    def step_details(self, step: int) -> dict[str, Any]:
        """What the task adds to the step log's row of ``step``."""

    def step_summaries(self, step: int) -> dict[str, float]:
        """What the task adds to TensorBoard at ``step``."""

    def workers_all_present(self) -> ContextManager[None]:
        """Turns a collective that fails for a lost worker into a WorkerLostError."""


class TrainingLoop:
    """Runs ``engine`` to ``train_steps``, logging progress lines with ``log``."""

    def __init__(self, engine: Engine, log: Callable[[str], None] = print):
        self.engine, self.config, self.log = engine, engine.config, log

    def train(self, evaluate_at_end: bool = False) -> TrainResult:
        """Trains to ``train_steps``; checkpoints every ``checkpoint_every`` steps and at exit,
        evaluates every ``eval_every`` steps and, with ``evaluate_at_end``, once more at the end
        (unless the last step was just evaluated). Where the time went is added to goodput.json
        as the run goes and logged at its end (trainer/runtime/goodput.py)."""
        engine, config = self.engine, self.config
        start = engine.current_step()
        engine.start_input()
        summaries = SummaryManager(engine.model_dir, enabled=engine.chief)
        goodput = GoodputRecorder(engine.model_dir, engine.started, enabled=engine.chief)
        profile = ProfileWindow(config.profile_window, engine.model_dir.tensorboard("train"), enabled=engine.chief,
                                tracer=engine.tracer)
        step, last_loss, eval_metrics, evaluated_at = start, None, {}, -1
        saved_at = start if engine.restored else None  # the step of the newest checkpoint on disk
        goodput.begin(start, taken_over_from(engine.model_dir) if engine.chief else None)
        began, timed_from = time.time(), start  # the ETA leaves the first (compiling) step out
        with engine.preemption.handlers(), _stopped_at_exit(profile), engine.workers_all_present():
            while step < config.train_steps and not engine.preemption.stopping():
                # the first loop of a process is one step, so that progress shows once it is compiled
                count = 1 if step == start else self._steps_until_event(step, profile.boundaries())
                profile.before_loop(step)
                with goodput.timed("compile" if step == start else "productive", steps=count), \
                        engine.preemption.running_loop():  # a signal waits for it preemption_grace_seconds at most
                    tick = time.time()
                    out = engine.run_loop(step, count)
                    elapsed = time.time() - tick
                if step != start and out.input_wait_seconds:
                    goodput.waited_for_input(out.input_wait_seconds)
                self._guard_finite(step, out.losses)
                profile.after_loop(step + count)
                rates = self._loop_rates(count, elapsed)
                self._record_steps(step, out, rates)
                step += count
                last_loss = float(out.losses[-1])
                measured = {"peak_memory_bytes": out.peak_memory, "input_wait_seconds": out.input_wait_seconds}
                summaries.write("train", step, self._loop_scalars(step, out, {
                    **rates, **{name: float(value) for name, value in measured.items() if value is not None}}))
                if step == start + count:
                    self.log(f"step {step}/{config.train_steps} loss {last_loss:.4f} (the first step of this run: "
                             f"{elapsed:.1f}s with tracing and compilation)")
                    began, timed_from = time.time(), step
                else:
                    self._progress(step, count, out.losses, rates, began, timed_from)
                if step % config.checkpoint_every == 0:
                    with goodput.timed("checkpoint"):
                        engine.save(step, start)
                    saved_at = step
                    goodput.saved(step)
                if config.eval_every and step % config.eval_every == 0:
                    with goodput.timed("evaluation"):
                        eval_metrics, evaluated_at = self._run_eval(summaries, step), step
                goodput.record()
            if saved_at != step:  # the last loop may have ended on a checkpoint already
                with goodput.timed("checkpoint"):
                    engine.save(step, start)
                goodput.saved(step)
            with goodput.timed("checkpoint"):
                engine.finish_saves(start)  # the last checkpoint complete before the run ends
        stopped = "completed" if step >= config.train_steps else "preempted"
        if stopped == "preempted":
            self.log(f"{engine.preemption.cause()}: saved checkpoint at step {step}, exiting")
        elif evaluate_at_end and evaluated_at != step:
            with goodput.timed("evaluation"):
                eval_metrics = self._run_eval(summaries, step)
        record = goodput.record()
        if engine.chief:
            log_breakdown(record, engine.model_dir.path, self.log)
        return TrainResult(step, stopped, last_loss, eval_metrics)

    def _guard_finite(self, step: int, losses: np.ndarray) -> None:
        """The NaN guard: a loss that is not finite stops the run without saving over the last good checkpoint."""
        bad = np.flatnonzero(~np.isfinite(losses))
        if bad.size:
            last = self.engine.latest_checkpoint() or "none yet"
            raise TrainingDivergedError(
                f"loss became {losses[bad[0]]} at step {step + int(bad[0]) + 1}; training stopped without "
                f"saving. Last good checkpoint: {last}. Lower learning_rate or check the data.")

    def _loop_rates(self, count: int, seconds: float) -> dict[str, float]:
        """Tokens/s, examples/s and, when the model's FLOPs are known, model FLOPs/s and MFU of a
        loop of ``count`` steps that took ``seconds``."""
        examples = count * self.config.examples_per_step
        rates = {"tokens_per_sec": examples * self.engine.tokens_per_example / seconds,
                 "examples_per_sec": examples / seconds}
        flops = self.engine.step_flops
        return {**rates, **(flops.rates(count, seconds) if flops else {})}

    def _steps_until_event(self, step: int, also: tuple[int, ...] = ()) -> int:
        """Steps from ``step`` to the next loop boundary: the last step, a loop's end, a checkpoint,
        an evaluation, or any of ``also`` (the profiler window's ends) after ``step``."""
        config = self.config
        boundaries = [config.train_steps, _next_multiple(step, config.steps_per_loop),
                      _next_multiple(step, config.checkpoint_every), *(b for b in also if b > step)]
        if config.eval_every:
            boundaries.append(_next_multiple(step, config.eval_every))
        return min(boundaries) - step

    def _record_steps(self, step: int, out: LoopOutput, rates: Mapping[str, float]) -> None:
        """The step log's rows of a loop of steps after ``step``; the peak memory, model FLOPs/s and
        MFU are the loop's, in each of its rows, as is the loop's input wait. A peak no device reported
        is null: the row says that none was measured (never 0, which would read as "used no memory")."""
        window: dict[str, Any] = {"peak_memory_bytes": out.peak_memory, "input_wait_seconds": out.input_wait_seconds}
        flops = self.engine.step_flops
        if flops is not None:
            window.update(model_flops_per_sec=rates["model_flops_per_sec"], mfu=rates["mfu"],
                          mfu_peak_source=flops.peak_source)
        self.engine.work_dir.append_steps(
            {"step": step + i + 1, "loss": float(loss),
             **{name: float(values[i]) for name, values in out.metrics.items()},
             "grad_norm": float(norm), **window, **self.engine.step_details(step + i + 1)}
            for i, (loss, norm) in enumerate(zip(out.losses, out.norms)))

    def _loop_scalars(self, step: int, out: LoopOutput, rates: Mapping[str, float]) -> dict[str, float]:
        """The train writer's scalars of a loop of steps ending at ``step``: loss, the task's metrics
        and the gradient norm as the loop's means, the learning rate at ``step``, ``rates`` (tokens/s,
        examples/s, peak memory) and the task's own scalars."""
        return {"loss": float(np.mean(out.losses)),
                **{self.engine.metric_names[name]: float(np.mean(values)) for name, values in out.metrics.items()},
                "learning_rate": self.engine.learning_rate(step), "grad_norm": float(np.mean(out.norms)), **rates,
                **self.engine.step_summaries(step)}

    def _run_eval(self, summaries: SummaryManager, step: int) -> dict[str, float]:
        metrics = self.engine.evaluate()
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
                 f"lr {self.engine.learning_rate(step):.3g} tokens/s {rates['tokens_per_sec']:.0f} {mfu}"
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
