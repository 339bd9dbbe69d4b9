"""The JAX engine of the training loop (trainer/runtime/training_loop.py): pretraining where
TensorFlow does not go (`xlnet train --backend jax`, ``KERAS_BACKEND=jax``).

What it holds, and only that (the loop, the model directory, the step log, TensorBoard, goodput,
the NaN guard, preemption and the progress lines are the loop's, shared with the TensorFlow engine):

* the step: trainer/runtime/jax_step.py's jitted ``PretrainingStep`` (the TensorFlow controller's
  arithmetic: loss per target, clipping, AdamW and its schedule, the Transformer-XL memory carried
  from step to step), data parallel over the devices through ``keras.distribution``: those of one
  process, or of several (trainer/runtime/jax_processes.py: each process reads its own devices'
  rows; process 0 writes the model directory, each process its step log, all of them the one set of
  checkpoints; a signal to any process stops all at the same step);
* the input: tfrecords/numpy_reader.py's readers (one directory, or a mixture of several), the tf.data
  readers' batches element for element (with ``accumulation_steps``, the micro-steps of each step),
  read ahead in a background thread; the time a loop of steps waits for it is the
  ``input_wait_seconds`` of its step-log rows (and of TensorBoard); a mixture's records by directory
  in the step log and its shares in TensorBoard, as the TensorFlow task's
  (trainer/runtime/mixture_progress.py, which both engines share);
* checkpoints: trainer/runtime/orbax_checkpoints.py (Orbax's CheckpointManager) under
  ``checkpoints/<step>/``: the weights, the non-trainable variables (dropout's seed generators), the
  optimizer's slots and step, the memory, and the data position (the step the reader resumes at).
  A resumed run reads on from the record after the checkpoint's and logs the same losses as a run
  never stopped;
* JAX's persistent compilation cache (:func:`use_compilation_cache`, which the launcher turns on
  before anything compiles): a run started again loads its compiled step instead of compiling it;
* evaluation on the valid split, memory from zero, as the TensorFlow task's: with a mixture or
  ``--eval-data``, each directory's valid split, and the training directories' figures mixed by
  weight (mixture_progress.py); with several processes, each evaluates the whole batch on its own
  copy of the weights;
* the devices' peak memory as JAX's allocator reports it (``peak_bytes_in_use``: the largest since
  the process started, JAX keeping no per-window peak), None on a CPU.

What it does not do is refused at start-up by the launcher (trainer/launch/pretraining_run.py):
float16 (``mixed_float16`` needs dynamic loss scaling), ``--strategy``/``--tpu`` (tf.distribute's),
and resuming a TensorFlow model directory (as ``--init-checkpoint`` it is read through a Hugging Face
export: the launcher's ``jax_init_weights``).
"""
from __future__ import annotations

import contextlib
import os
import posixpath
import random
import time
from typing import Any, Callable, Iterator, Sequence

import keras
import numpy as np

from tfrecords.errors import DataError
from tfrecords.manifest import Manifest
from tfrecords.mixture_schedule import MixtureSource
from tfrecords.numpy_reader import NumpyMixtureReader, NumpyStreamReader
from trainer.configs.training import TrainConfig
from trainer.models.config import ModelConfig
from trainer.runtime import file_system
from trainer.runtime.jax_processes import (any_process, end_without_the_lost, local_rows, lost_process,
                                          wait_for_every_process)
from trainer.runtime.jax_step import PretrainingStep, StepState, check_ids, data_parallel, require_jax
from trainer.runtime.mixture_progress import MixtureProgress, perplexity
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.orbax_checkpoints import OrbaxCheckpoints
from trainer.runtime.preemption import Preemption
from trainer.runtime.profiling import jax_tracer
from trainer.runtime.run_clock import command_start_time
from trainer.runtime.throughput import StepFlops
from trainer.runtime.training_loop import (LoopOutput, TrainingLoop, TrainResult, no_checkpoint_warning,
                                           refuse_to_start_over, resumed_line, warn_on_stderr)
from trainer.runtime.training_stops import (TrainingDataError, TrainingDivergedError, UnreadableCheckpointError,
                                           WorkerLostError, peer_lost_stopped)



def default_compilation_cache() -> str:
    """Where the JAX engine keeps its compiled programs when JAX's own variables say nothing: this
    machine's cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``), ``xlnet/jax-compilation``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "xlnet", "jax-compilation")


def use_compilation_cache() -> str | None:
    """Turns on JAX's persistent compilation cache (call before the process's first compilation:
    JAX settles its cache then, for the process's life; the launcher calls it first thing), so that a run
    started again (a preemption, a crash, a rerun) loads its compiled step instead of compiling it
    (the ``compile`` share of goodput): ``JAX_COMPILATION_CACHE_DIR`` if set, else
    :func:`default_compilation_cache` (unbounded, as JAX's own; a bound, JAX's
    ``JAX_COMPILATION_CACHE_MAX_SIZE``, needs the ``filelock`` package). Off with JAX's own
    ``JAX_ENABLE_COMPILATION_CACHE=false``. Returns the directory, or None when off. Programs are
    keyed by their HLO, compile options, device and JAX version: a changed model compiles anew."""
    import jax

    if not jax.config.values["jax_enable_compilation_cache"]:
        return None
    if not jax.config.values["jax_compilation_cache_dir"]:
        jax.config.update("jax_compilation_cache_dir", default_compilation_cache())
    return jax.config.values["jax_compilation_cache_dir"]


def seed_everything(seed: int) -> None:
    """What ``keras.utils.set_random_seed`` does on JAX, without importing TensorFlow where it is
    installed (Keras's function seeds TensorFlow too, importing it): Python's and NumPy's generators
    and Keras's global seed, from which every initializer and seed generator draws."""
    from keras.src.backend.common import global_state  # Keras's own home of the global seed

    random.seed(seed)
    np.random.seed(seed)
    global_state.set_global_attribute("global_random_seed", seed)
    global_state.set_global_attribute("global_seed_generator", None)


class JaxPretrainingEngine:
    """The pretraining run of ``model_config`` and ``config`` on ``manifest``'s data, on JAX.

    Args:
      mixture: the training directories and weights when there are several (``manifest`` is then the
        first one's); eval_sources: directories only evaluated on (``--eval-data``).
      model_dir: where checkpoints, summaries and the step log go (the launcher prepared it).
      init_weights: called with the network of a new run (not a resumed one) to give it its first
        weights (``--init-checkpoint``); returns what it loaded, for the log.
      log, warn: where progress lines and warnings go.
      after_first_save: called once, with the step the run started at, once its first checkpoint is
        complete (the command saves changed settings then).
      step_flops: the model FLOPs of a step and the devices' peak, for MFU.
    """

    metric_names = {"accuracy": "plm_accuracy"}

    def __init__(self, model_config: ModelConfig, config: TrainConfig, *, manifest: Manifest, model_dir: str,
                 mixture: Sequence[MixtureSource] = (), eval_sources: Sequence[MixtureSource] = (),
                 init_weights: Callable[[Any], str] | None = None, log: Callable[[str], None] = print,
                 warn: Callable[[str], None] = warn_on_stderr, after_first_save: Callable[[int], None] | None = None,
                 step_flops: StepFlops | None = None):
        require_jax()
        import jax

        from trainer.models.pretrainer import XLNetPretrainer

        self._jax = jax
        self.started = command_start_time(default=time.time())
        self.config, self.model_config, self.manifest = config, model_config, manifest
        self.log, self.warn, self.step_flops = log, warn, step_flops
        self.progress = MixtureProgress(config, model_config.bi_data, mixture, eval_sources)
        self._after_first_save = after_first_save
        # Several processes (trainer/runtime/jax_processes.py): process 0 writes the model directory,
        # every process its own step log (workers/worker-N/, as the TensorFlow engine's workers), and
        # all of them the one set of Orbax checkpoints, each its devices' shards.
        self.process, self.processes = jax.process_index(), jax.process_count()
        self.chief = self.process == 0
        self.model_dir = ModelDirectory(model_dir)
        self.work_dir = self.model_dir if self.chief else self.model_dir.worker(self.process)
        file_system.makedirs(self.work_dir.path)
        self.tokens_per_example = config.seq_len
        self.tracer = jax_tracer
        self.preemption = Preemption(any_process if self.processes > 1 else None, config.preemption_grace_seconds,
                                     give_up=self._given_up, log=log)
        if self.model_dir.has_tensorflow_checkpoints():
            raise UnreadableCheckpointError(
                f"--model-dir {self.model_dir.path} holds the TensorFlow engine's checkpoints (ckpt-N under "
                f"{self.model_dir.checkpoints}): resume it with --backend tensorflow, or start the JAX engine in a "
                f"new --model-dir with --init-checkpoint {self.model_dir.path} (its weights are read through "
                "`xlnet export --format huggingface`)")

        keras.mixed_precision.set_global_policy(config.precision)
        seed_everything(config.seed)
        if jax.device_count() > 1:
            data_parallel()
        self.pretrainer = XLNetPretrainer(model_config, config.seq_len, config.num_predict, config.perm_size,
                                          manifest.special_ids, remat=config.remat)
        self.network = self.pretrainer.network
        self._train_step = PretrainingStep(self.pretrainer, config)
        self.checkpoints = OrbaxCheckpoints(self.model_dir.checkpoints, keep=config.keep_checkpoints,
                                            asynchronous=config.async_checkpoint, warn=warn, chief=self.chief)
        self._step, self.restored = 0, False
        self.state = self._restore(init_weights)
        self._eval_step = None
        self._input = None
        self._lost = None  # the process a failed collective lost, once one has
        self._running = (0, 0, 0)  # (the run's first step, the running loop's first, last)
        self._saved_unconfirmed = False

    # ---------------------------------------------------------------------------- set-up
    def _restore(self, init_weights: Callable[[Any], str] | None) -> StepState:
        """The newest checkpoint's state when the directory has one (set-aside ones warned about),
        else the initial weights (``init_weights``' or the seed's) with a zero memory."""
        if init_weights is not None and not self.checkpoints.steps():  # a new run, not a resumed one
            self.log(f"initialised the model from {init_weights(self.network)}")
        state = self._train_step.initial_state(self.config.train_batch_size)
        restored = self.checkpoints.restore_latest(state)
        if restored is None:
            refuse_to_start_over(self.work_dir)
            dropped = self.work_dir.forget_steps_after(0)  # a run killed before its first checkpoint
            if dropped:
                self.warn(no_checkpoint_warning(self.work_dir.checkpoints, self.work_dir.step_log, dropped))
            return state
        position = restored.position
        if position.get("data_step") != restored.step:
            raise UnreadableCheckpointError(
                f"checkpoint {self._checkpoint_path(restored.step)} records data position {position!r}, not its "
                f"step {restored.step}: it was not written by this engine; start again in a new --model-dir")
        self._step, self.restored = restored.step, True
        dropped = self.work_dir.forget_steps_after(restored.step)
        self.log(resumed_line(self._checkpoint_path(restored.step), restored.step, dropped))
        return restored.state

    def _checkpoint_path(self, step: int) -> str:
        # The model directory's, on every process: one set of checkpoints, which all processes write.
        return posixpath.join(self.model_dir.checkpoints, str(step))

    # ------------------------------------------------------------- the loop's engine
    def current_step(self) -> int:
        return self._step

    def train(self, evaluate_at_end: bool = False) -> TrainResult:
        """Trains to ``train_steps`` in the backend-neutral loop (trainer/runtime/training_loop.py)."""
        try:
            return TrainingLoop(self, self.log).train(evaluate_at_end)
        finally:
            self.close()

    def reader(self, split: str, batch: int, start_step: int = 0,
               manifest: Manifest | None = None) -> NumpyStreamReader:
        """The stream-ordered reader of ``split`` (of ``manifest``, by default the run's) with this run's
        shapes and seed (the TensorFlow task's); ``batch`` is the whole batch, of every process."""
        config = self.config
        return NumpyStreamReader(manifest or self.manifest, split, batch, config.seq_len, config.num_predict,
                                 self.model_config.bi_data, seed=config.seed,
                                 accumulation_steps=config.accumulation_steps if split == "train" else 1,
                                 start_step=start_step, resample_masks=config.resample_masks and split == "train")

    def start_input(self) -> None:
        self._running = (self._step, self._step, self._step)
        if self.progress.mixture:
            reader = self.progress.reader(NumpyMixtureReader, self._step)
        else:
            reader = self.reader("train", self.config.train_batch_size, self._step)
        if self.processes == 1:
            self._input = reader.host_batches()
        else:  # the rows of this process's devices: the reader's replicas, one per device of the run
            local = self._jax.local_device_count()
            self._input = reader.host_batches(self._jax.device_count(),
                                              range(self.process * local, (self.process + 1) * local))

    def run_loop(self, step: int, count: int) -> LoopOutput:
        """``count`` steps after ``step``, each on the reader's next batch; the metrics are read back
        once, after the last (the device runs ahead of the host meanwhile)."""
        self._running = (self._running[0], step + 1, step + count)
        metrics, waited = [], self._input.wait_seconds
        for _ in range(count):
            batch = self._next_batch(step + len(metrics))
            self.state, step_metrics = self._train_step(self.state, batch)
            metrics.append(step_metrics)
        values = self._jax.device_get(metrics)
        for row in values:
            if float(row["ids_in_vocabulary"]) == 0.0:
                manifests = [source.manifest for source in self.progress.mixture] or [self.manifest]
                raise TrainingDivergedError(
                    f"input_ids left the vocabulary at step {int(row['step'])}; training stopped without saving. "
                    f"Last good checkpoint: {self.latest_checkpoint() or 'none yet'}. Check the data "
                    f"({' and '.join(f'`xlnet inspect {manifest.directory} --verify`' for manifest in manifests)})")
        self._step = step + count  # a step not applied (a NaN) stops the run in the loop's guard, unsaved
        return LoopOutput(np.array([float(row["loss"]) for row in values], np.float32),
                          {"accuracy": np.array([float(row["accuracy"]) for row in values], np.float32)},
                          np.array([float(row["grad_norm"]) for row in values], np.float32), self._peak_memory(),
                          self._input.wait_seconds - waited)

    def _next_batch(self, step: int) -> dict[str, np.ndarray]:
        """The reader's next batch ([rows, ...]; [accumulation_steps, rows, ...] with accumulation, as
        the step takes it), ids checked on the host; an input that cannot be read is a
        TrainingDataError naming it and what is kept."""
        try:
            features = next(self._input)
        except (DataError, OSError) as error:  # the reader's: a damaged shard, a short stream, a vanished file
            kept = self.latest_checkpoint() or "no checkpoint yet"
            raise TrainingDataError(f"the training input could not be read after step {step}: {error}. Training "
                                    f"stopped; the checkpoints so far are kept (latest: {kept})") from None
        if self.config.accumulation_steps == 1:
            features = {name: value[0] for name, value in features.items()}
        check_ids(features["input_ids"], self.model_config.vocab_size)
        return features

    def _peak_memory(self) -> int | None:
        peaks = [(device.memory_stats() or {}).get("peak_bytes_in_use") for device in self._jax.local_devices()]
        peaks = [int(peak) for peak in peaks if peak]
        return max(peaks) if peaks else None

    def save(self, step: int, start: int) -> int:
        """Starts writing the checkpoint of ``step``; with ``async_checkpoint`` returns once the
        arrays are copied off the devices (Orbax writes on in the background), else once written."""
        self._wait_for_write(start)
        self.checkpoints.save(step, self.state, {"data_step": step})
        self._saved_unconfirmed = True
        if not self.config.async_checkpoint:
            self._wait_for_write(start)
        return step

    def finish_saves(self, start: int) -> None:
        self._wait_for_write(start)

    def _wait_for_write(self, start: int) -> None:
        self.checkpoints.wait()
        confirmed, self._saved_unconfirmed = self._saved_unconfirmed, False
        if confirmed and self._after_first_save is not None:
            callback, self._after_first_save = self._after_first_save, None
            callback(start)

    def latest_checkpoint(self) -> str | None:
        steps = self.checkpoints.steps()
        return self._checkpoint_path(steps[-1]) if steps else None

    def learning_rate(self, step: int) -> float:
        return self._train_step.learning_rate(step)

    def step_details(self, step: int) -> dict[str, Any]:
        return self.progress.step_details(step)

    def step_summaries(self, step: int) -> dict[str, float]:
        return self.progress.step_summaries(step)

    @contextlib.contextmanager
    def workers_all_present(self) -> Iterator[None]:
        """A collective that fails because another process is gone (Gloo's or NCCL's connection to it
        lost) becomes a WorkerLostError (exit status 3) naming it and the checkpoint a restart of every
        process resumes from; the process then ends without waiting for the lost one at JAX's exit."""
        try:
            yield
        except Exception as error:  # noqa: BLE001 (jaxlib raises a failed collective as ValueError or its runtime error)
            who = lost_process(error, self.process, self.processes)
            if who is None:
                raise
            self._lost = who
            end_without_the_lost(WorkerLostError.exit_code)
            raise peer_lost_stopped(who, self.processes, "processes of this run", f"this process ({self.process})",
                                    self.latest_checkpoint()) from None

    def close(self) -> None:
        """Waits for the checkpoint write in flight and stops the reader and Orbax's threads; after a
        lost process, not the write: it cannot complete without the lost one's shards (Orbax would wait
        for it at a barrier), and the next start removes what it left."""
        if self._input is not None:
            self._input.close()
        if self._lost is None:
            self.checkpoints.close()

    def _given_up(self, signum: int) -> str:
        """The line of a run whose loop of steps outlasted ``preemption_grace_seconds`` after signal ``signum``."""
        start, first, last = self._running
        self.finish_saves(start)
        latest = self.latest_checkpoint()
        saved = (f"with nothing to save since {latest}; re-running the same command resumes from it" if latest
                 else "before the run's first checkpoint; re-running the same command starts at step 1")
        steps = f"step {first}" if first == last else f"steps {first}-{last}"
        return (f"received signal {signum}: {steps} did not end within {self.config.preemption_grace_seconds:g} s "
                f"(preemption_grace_seconds): stopped {saved}")

    # ------------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Loss, accuracy and perplexity on ``eval_steps`` batches of the valid split, memory from zero;
        with a mixture or ``--eval-data``, of each directory's too (MixtureProgress.evaluate)."""
        return self.progress.evaluate(self._evaluate_split, self.manifest)

    def _evaluate_split(self, manifest: Manifest) -> dict[str, float]:
        """Loss, accuracy and perplexity on ``eval_steps`` batches of ``manifest``'s valid split."""
        from keras import ops

        config, model = self.config, self.model_config
        if self._eval_step is None:
            def evaluate_batch(trainable, non_trainable, batch, mems):
                out, _ = self.pretrainer.stateless_call(trainable, non_trainable, batch, mems=mems, training=False)
                count = ops.cast(out["num_targets"], "float32")
                sums = ops.stack([ops.cast(out["loss"], "float32") * count,
                                  ops.cast(out["accuracy"], "float32") * count, count])
                new_mems = None if out["new_mems"] is None else [ops.cast(m, "float32") for m in out["new_mems"]]
                return sums, new_mems

            self._eval_step = self._jax.jit(evaluate_batch)
        mems = None
        if model.mem_len > 0:
            mems = [np.zeros((config.eval_batch_size, model.mem_len, model.d_model), np.float32)
                    for _ in range(model.n_layer)]
        trainable, non_trainable = self.state.trainable, self.state.non_trainable
        if self.processes > 1:  # each process evaluates the whole batch on its own copy of the weights
            trainable, non_trainable = ([local_rows(value) for value in group] for group in (trainable, non_trainable))
        totals = np.zeros(3)
        with self.reader("valid", config.eval_batch_size, manifest=manifest).host_batches() as batches:
            for _, features in zip(range(config.eval_steps), _evaluation_input(batches, self._step)):
                batch = {name: value[0] for name, value in features.items()}
                sums, mems = self._eval_step(trainable, non_trainable, batch, mems)
                totals += np.asarray(sums, np.float64)
        loss = float(totals[0] / max(totals[2], 1.0))
        return {"loss": loss, "accuracy": float(totals[1] / max(totals[2], 1.0)), "perplexity": perplexity(loss)}


def _evaluation_input(batches: Iterator, step: int) -> Iterator:
    """The evaluation batches; one that cannot be read stops the run as the training input's does."""
    try:
        yield from batches
    except (DataError, OSError) as error:  # the reader's: a damaged shard, a short stream, a vanished file
        raise TrainingDataError(f"the evaluation input could not be read at step {step} ({error}); `xlnet inspect "
                                "DATA_DIR --verify` on the evaluation data names the damaged file. Training "
                                "stopped; the checkpoints so far are kept") from None
