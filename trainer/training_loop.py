"""Custom tf.distribute training loop for XLNet pretraining.

Shape of one optimizer step on each replica (features [accumulation_steps, B, ...]):
micro-step a computes the loss with the memory left by micro-step a-1 (or by the previous
step), gradients are summed over micro-steps and all-reduced over replicas, divided by the
global number of targets, clipped by global norm, and applied by AdamW. ``steps_per_loop``
steps run inside one tf.function (the TPU pattern); Python only sees the loop's per-step
losses, logs them and decides about checkpoints, evaluation and stopping.

The Transformer-XL memory of every replica lives on its device in per-replica (sync-on-read)
variables for the whole run and is saved in every checkpoint together with the model, the
optimizer and the step, so a resumed run continues with the same memory and the reader
restarts at the same records: resume is exact.
"""
from __future__ import annotations

import dataclasses
import math
import signal
import time
from typing import Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from tfrecords.manifest import Manifest
from tfrecords.reader import StreamReader
from trainer.config import ModelConfig
from trainer.distribution import is_chief, worker_info
from trainer.model_dir import ModelDirectory
from trainer.optimization import build_optimizer, clip_by_global_norm
from trainer.train_config import TrainConfig

STEP_LOG = ModelDirectory.STEP_LOG


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or Inf; training stopped without saving over the last good checkpoint."""


@dataclasses.dataclass(frozen=True)
class TrainResult:
    step: int
    stopped: str  # "completed" or "preempted"
    last_loss: float
    eval_metrics: Mapping[str, float]


class MemoryState:
    """Transformer-XL memory of one replica per device: n_layer variables [B, mem_len, d_model].

    Sync-on-read variables hold a different value on every replica; ``trackable`` exposes
    their per-device components so that a checkpoint keeps each replica's memory.
    """

    def __init__(self, strategy: tf.distribute.Strategy, n_layer: int, batch: int, mem_len: int, d_model: int,
                 name: str):
        self.enabled = mem_len > 0
        self.variables = []
        if not self.enabled:
            return
        with strategy.scope():
            self.variables = [tf.Variable(tf.zeros([batch, mem_len, d_model], tf.float32), trainable=False,
                                          synchronization=tf.VariableSynchronization.ON_READ,
                                          aggregation=tf.VariableAggregation.NONE, name=f"{name}_mem_{i}")
                              for i in range(n_layer)]
        self._strategy = strategy

    def read(self) -> list[tf.Tensor] | None:
        """This replica's memory (call in replica context)."""
        return [v.read_value() for v in self.variables] if self.enabled else None

    def assign(self, mems: Sequence[tf.Tensor] | None) -> None:
        """Stores this replica's new memory (call in replica context)."""
        for variable, value in zip(self.variables, mems or ()):
            variable.assign(value)

    def reset(self) -> None:
        for variable in self.variables:
            for component in self._strategy.experimental_local_results(variable):
                component.assign(tf.zeros_like(component))

    def trackable(self, first_replica: int) -> tf.Module:
        """Checkpointable per-replica components, named by global replica index."""
        module = tf.Module()
        if self.enabled:
            per_layer = [self._strategy.experimental_local_results(v) for v in self.variables]
            for local, components in enumerate(zip(*per_layer)):
                setattr(module, f"replica_{first_replica + local}", list(components))
        return module


class Trainer:
    """Builds the model, optimizer, memory and checkpoints under ``strategy`` and runs the loop."""

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig, *, manifest: Manifest,
                 model_dir: str, strategy: tf.distribute.Strategy, init_checkpoint: str | None = None,
                 log: Callable[[str], None] = print):
        from trainer.pretraining import XLNetPretrainer

        self.model_config, self.config = model_config, train_config
        self.manifest, self.strategy, self.log = manifest, strategy, log
        self.worker, self.num_workers = worker_info(strategy)
        self.chief = is_chief(strategy)
        # every worker keeps its own checkpoints: they hold its replicas' memory
        self.model_dir = ModelDirectory(model_dir)
        self.work_dir = self.model_dir if self.chief else self.model_dir.worker(self.worker)
        tf.io.gfile.makedirs(self.work_dir.path)
        replicas = strategy.num_replicas_in_sync
        self.train_batch = self.reader("train", train_config.train_batch_size).per_replica_batch_size(replicas)
        self.eval_batch = self.reader("valid", train_config.eval_batch_size).per_replica_batch_size(replicas)

        keras.mixed_precision.set_global_policy(train_config.precision)
        keras.utils.set_random_seed(train_config.seed)  # same initial weights and dropout on every run
        with strategy.scope():
            self.pretrainer = XLNetPretrainer(model_config, train_config.seq_len, train_config.num_predict,
                                              train_config.perm_size, manifest.special_ids)
            self.network = self.pretrainer.network
            self.variables = list(self.network.trainable_variables)
            self.optimizer = build_optimizer(train_config, self.variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.train_memory = MemoryState(strategy, model_config.n_layer, self.train_batch, model_config.mem_len,
                                        model_config.d_model, "train")
        self.eval_memory = MemoryState(strategy, model_config.n_layer, self.eval_batch, model_config.mem_len,
                                       model_config.d_model, "eval")
        first_replica = self.worker * (replicas // self.num_workers)
        # Keras keeps dropout RNG state in seed-generator variables outside the model's checkpoint
        # graph; saving them makes the dropout masks after a resume the same as without one.
        rng = [v for v in self.network.non_trainable_variables if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(model=self.network, optimizer=self.optimizer, step=self.step,
                                              mems=self.train_memory.trackable(first_replica), rng=rng)
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.work_dir.checkpoints,
                                                  max_to_keep=train_config.keep_checkpoints, step_counter=self.step)
        self._restore(init_checkpoint)
        self._grad_fn = tf.function(self._micro_steps, jit_compile=train_config.jit_compile)
        self._eval_fn = tf.function(self._eval_micro, jit_compile=train_config.jit_compile)
        self._train_loop = tf.function(self._train_loop_fn)
        self._eval_loop = tf.function(self._eval_loop_fn)
        self._stop_signal: int | None = None
        self._signals_anywhere = tf.function(self._signals_anywhere_fn)

    # ---------------------------------------------------------------------------- set-up
    def reader(self, split: str, batch: int, start_step: int = 0) -> StreamReader:
        """The stream-ordered reader of ``split`` with this run's shapes and seed."""
        config = self.config
        return StreamReader(self.manifest, split, batch, config.seq_len, config.num_predict,
                            self.model_config.bi_data, seed=config.seed,
                            accumulation_steps=config.accumulation_steps if split == "train" else 1,
                            start_step=start_step, resample_masks=config.resample_masks and split == "train")

    def _restore(self, init_checkpoint: str | None) -> None:
        if self.manager.latest_checkpoint:
            self.checkpoint.restore(self.manager.latest_checkpoint).assert_existing_objects_matched()
            self.log(f"resumed from {self.manager.latest_checkpoint} at step {int(self.step.numpy())}")
        elif init_checkpoint:
            source = ModelDirectory(init_checkpoint)
            latest = source.latest_checkpoint()
            if latest is None:
                raise ValueError(f"--init-checkpoint {init_checkpoint}: no checkpoint under {source.checkpoints}")
            tf.train.Checkpoint(model=self.network).restore(latest).expect_partial().assert_existing_objects_matched()
            self.log(f"initialised the model from {latest}")

    # -------------------------------------------------------------------- replica functions
    def _micro_steps(self, features: Mapping[str, tf.Tensor], mems):
        """All micro-steps of one step on one replica -> (grad sums, loss sum, correct, targets, new mems)."""
        fp16 = self.config.precision == "mixed_float16"
        grad_sums = [tf.zeros_like(v) for v in self.variables]
        loss_sum = correct = targets = tf.constant(0.0)
        for micro in range(self.config.accumulation_steps):
            batch = {name: value[micro] for name, value in features.items()}
            with tf.GradientTape() as tape:
                out = self.pretrainer.compute(batch, mems, training=True)
                count = tf.cast(out["num_targets"], tf.float32)
                weighted = tf.cast(out["loss"], tf.float32) * count
                scaled = self.optimizer.scale_loss(weighted) if fp16 else weighted
            grads = tape.gradient(scaled, self.variables)
            grad_sums = [s + tf.convert_to_tensor(g) for s, g in zip(grad_sums, grads)]
            loss_sum += weighted
            correct += tf.cast(out["accuracy"], tf.float32) * count
            targets += count
            mems = out["new_mems"]
        return grad_sums, loss_sum, correct, targets, mems

    def _replica_gradients(self, features):
        """Global (all-reduced, clipped) gradients of one step -> (grads, loss, accuracy, grad norm)."""
        context = tf.distribute.get_replica_context()
        grads, loss_sum, correct, targets, mems = self._grad_fn(features, self.train_memory.read())
        self.train_memory.assign(mems)
        loss_sum, correct, targets = context.all_reduce(tf.distribute.ReduceOp.SUM, [loss_sum, correct, targets])
        denominator = tf.maximum(targets, 1.0)
        grads = [g / denominator for g in context.all_reduce(tf.distribute.ReduceOp.SUM, grads)]
        clip = self.config.clip_norm
        if self.config.precision == "mixed_float16":  # grads are still scaled: clip at the scaled norm
            scale = tf.cast(self.optimizer.dynamic_scale, tf.float32)
            grads, norm = clip_by_global_norm(grads, clip * scale if clip > 0 else 0.0)
            norm = norm / scale
        else:
            grads, norm = clip_by_global_norm(grads, clip)
        return grads, loss_sum / denominator, correct / denominator, norm

    def _replica_step(self, features):
        grads, loss, accuracy, norm = self._replica_gradients(features)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        return loss, accuracy, norm

    def gradients(self, iterator) -> tuple[list[np.ndarray], float]:
        """(global gradients, loss) of the next batch of ``iterator`` without applying them (advances
        the memory like a step would). For inspecting a step, e.g. comparing strategies."""
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
        return self.reader("train", self.config.train_batch_size, int(self.step.numpy())).distribute(self.strategy)

    def _eval_micro(self, features, mems):
        out = self.pretrainer.compute(features, mems, training=False)
        count = tf.cast(out["num_targets"], tf.float32)
        return tf.cast(out["loss"], tf.float32) * count, tf.cast(out["accuracy"], tf.float32) * count, count, \
            out["new_mems"]

    def _replica_eval(self, features):
        context = tf.distribute.get_replica_context()
        loss_sum, correct, targets, mems = self._eval_fn({k: v[0] for k, v in features.items()},
                                                         self.eval_memory.read())
        self.eval_memory.assign(mems)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, [loss_sum, correct, targets])

    # ------------------------------------------------------------------------ host loops
    def _train_loop_fn(self, iterator, num_steps):
        losses = tf.TensorArray(tf.float32, size=num_steps)
        accuracies = tf.TensorArray(tf.float32, size=num_steps)
        norms = tf.TensorArray(tf.float32, size=num_steps)
        for i in tf.range(num_steps):
            loss, accuracy, norm = self.strategy.run(self._replica_step, args=(next(iterator),))
            first = self.strategy.experimental_local_results
            losses = losses.write(i, first(loss)[0])
            accuracies = accuracies.write(i, first(accuracy)[0])
            norms = norms.write(i, first(norm)[0])
            self.step.assign_add(1)
        return losses.stack(), accuracies.stack(), norms.stack()

    def _eval_loop_fn(self, iterator, num_steps):
        totals = tf.zeros([3])
        for _ in tf.range(num_steps):
            sums = self.strategy.run(self._replica_eval, args=(next(iterator),))
            totals += tf.stack([self.strategy.experimental_local_results(s)[0] for s in sums])
        return totals

    def evaluate(self) -> dict[str, float]:
        """Loss, accuracy and perplexity on ``eval_steps`` batches of the valid split, memory from zero."""
        self.eval_memory.reset()
        iterator = iter(self.reader("valid", self.config.eval_batch_size).distribute(self.strategy))
        loss_sum, correct, targets = self._eval_loop(iterator, tf.constant(self.config.eval_steps)).numpy()
        loss = float(loss_sum / max(targets, 1.0))
        return {"loss": loss, "accuracy": float(correct / max(targets, 1.0)),
                "perplexity": float(math.exp(min(loss, 50.0)))}

    def train(self) -> TrainResult:
        """Trains to ``train_steps``; checkpoints every ``checkpoint_every`` steps and at exit."""
        config = self.config
        start = int(self.step.numpy())
        iterator = iter(self.train_dataset())
        writers = self._summary_writers()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        tokens_per_step = config.examples_per_step * config.seq_len
        step, last_loss, eval_metrics, began = start, float("nan"), {}, time.time()
        try:
            while step < config.train_steps and not self._stopping():
                count = self._steps_until_event(step)
                tick = time.time()
                losses, accuracies, norms = (t.numpy() for t in self._train_loop(iterator, tf.constant(count)))
                elapsed = time.time() - tick
                self._guard_finite(step, losses)
                self._record_steps(step, losses, accuracies, norms)
                step += count
                last_loss = float(losses[-1])
                rates = {"tokens_per_sec": count * tokens_per_step / elapsed,
                         "examples_per_sec": count * config.examples_per_step / elapsed}
                self._summarise(writers["train"], step, losses, accuracies, norms, rates)
                self._progress(step, losses, rates, began, start)
                if step % config.checkpoint_every == 0:
                    self.manager.save(checkpoint_number=step)
                if config.eval_every and step % config.eval_every == 0:
                    eval_metrics = self._run_eval(writers["eval"], step)
            self.manager.save(checkpoint_number=step)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        stopped = "completed" if step >= config.train_steps else "preempted"
        if stopped == "preempted":
            cause = f"received signal {self._stop_signal}" if self._stop_signal else "another worker was signalled"
            self.log(f"{cause}: saved checkpoint at step {step}, exiting")
        return TrainResult(step, stopped, last_loss, eval_metrics)

    # --------------------------------------------------------------------------- helpers
    def _on_signal(self, signum, frame) -> None:
        del frame
        self._stop_signal = signum  # acted upon after the running loop of steps

    def _stopping(self) -> bool:
        """Whether to stop at this loop boundary: a signal reached this worker or, with several
        workers, any of them. Workers decide together (one all-reduce per loop of steps): a worker
        that went on alone would wait forever in the next step's collectives."""
        if self.num_workers == 1:
            return self._stop_signal is not None
        return bool(self._signals_anywhere(tf.constant(float(self._stop_signal is not None))).numpy() > 0)

    def _signals_anywhere_fn(self, signalled: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(lambda: tf.identity(signalled))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _steps_until_event(self, step: int) -> int:
        config = self.config
        boundaries = [config.train_steps, _next_multiple(step, config.steps_per_loop),
                      _next_multiple(step, config.checkpoint_every)]
        if config.eval_every:
            boundaries.append(_next_multiple(step, config.eval_every))
        return min(boundaries) - step

    def _guard_finite(self, step: int, losses: np.ndarray) -> None:
        bad = np.flatnonzero(~np.isfinite(losses))
        if bad.size:
            last = self.manager.latest_checkpoint or "none yet"
            raise TrainingDivergedError(
                f"loss became {losses[bad[0]]} at step {step + int(bad[0]) + 1}; training stopped without "
                f"saving. Last good checkpoint: {last}. Lower train.learning_rate or check the data.")

    def _record_steps(self, step: int, losses, accuracies, norms) -> None:
        self.work_dir.append_steps({"step": step + i + 1, "loss": float(loss), "accuracy": float(accuracy),
                                    "grad_norm": float(norm)}
                                   for i, (loss, accuracy, norm) in enumerate(zip(losses, accuracies, norms)))

    def _learning_rate(self, step: int) -> float:
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        return float(optimizer._learning_rate(step)) if callable(optimizer._learning_rate) else \
            float(optimizer.learning_rate)

    def _summary_writers(self) -> dict[str, tf.summary.SummaryWriter]:
        if not self.chief:
            return {"train": tf.summary.create_noop_writer(), "eval": tf.summary.create_noop_writer()}
        return {name: tf.summary.create_file_writer(self.model_dir.tensorboard(name)) for name in ("train", "eval")}

    def _summarise(self, writer, step: int, losses, accuracies, norms, rates: Mapping[str, float]) -> None:
        with writer.as_default(step=step):
            tf.summary.scalar("loss", float(np.mean(losses)))
            tf.summary.scalar("plm_accuracy", float(np.mean(accuracies)))
            tf.summary.scalar("learning_rate", self._learning_rate(step))
            tf.summary.scalar("grad_norm", float(np.mean(norms)))
            for name, value in rates.items():
                tf.summary.scalar(name, value)
        writer.flush()

    def _run_eval(self, writer, step: int) -> dict[str, float]:
        metrics = self.evaluate()
        with writer.as_default(step=step):
            for name, value in metrics.items():
                tf.summary.scalar(name, value)
        writer.flush()
        self.log(f"step {step} eval: loss {metrics['loss']:.4f} accuracy {metrics['accuracy']:.4f} "
                 f"perplexity {metrics['perplexity']:.2f}")
        return metrics

    def _progress(self, step: int, losses, rates: Mapping[str, float], began: float, start: int) -> None:
        done = step - start
        per_step = (time.time() - began) / max(done, 1)
        eta = per_step * (self.config.train_steps - step)
        self.log(f"step {step}/{self.config.train_steps} loss {float(np.mean(losses)):.4f} "
                 f"lr {self._learning_rate(step):.3g} tokens/s {rates['tokens_per_sec']:.0f} "
                 f"ETA {_clock(eta)}")


def _next_multiple(step: int, every: int) -> int:
    return (step // every + 1) * every


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
