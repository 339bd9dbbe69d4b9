"""The pretraining task: permutation language modelling on the stream-ordered records.

What it adds to the controller (trainer/runtime/controller.py): the XLNetPretrainer (trainer/models/pretrainer.py)
as the model, the reader (tfrecords/reader.py) as the input, and the Transformer-XL memory.

Each replica's memory lives on its device in per-replica (sync-on-read) variables for the whole
run: micro-step a of a step computes the loss with the memory micro-step a-1 (or the previous
step) left. The memory is saved in every checkpoint next to the model, the optimizer and the
step, and the reader restarts at the records of the checkpoint's step, so a resumed run
continues exactly where it stopped.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf

from tfrecords.manifest import Manifest
from tfrecords.mixture import MixtureReader, MixtureSource
from tfrecords.reader import StreamReader
from trainer.configs.training import TrainConfig
from trainer.models.config import ModelConfig
from trainer.runtime.controller import Controller
from trainer.runtime.mixture_progress import MixtureProgress, perplexity
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.task_protocol import StepOutputs, Task
from trainer.runtime.throughput import StepFlops

STEP_LOG = ModelDirectory.STEP_LOG


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


class PretrainingTask(Task):
    """Permutation-LM pretraining of ``model_config`` on the data of ``manifest`` (a controller Task:
    trainer/runtime/task_protocol.py, which documents each hook).

    Step-log metric: ``accuracy`` of the predicted targets (TensorBoard ``plm_accuracy``).
    Evaluation: loss, accuracy and perplexity on ``eval_steps`` batches of the valid split,
    memory carried from zero. A mixture's bookkeeping (its step-log fields, TensorBoard scalars and
    per-directory evaluation) is trainer/runtime/mixture_progress.py's, which the JAX engine shares.
    """

    metric_names = {"accuracy": "plm_accuracy"}

    def __init__(self, model_config: ModelConfig, config: TrainConfig, manifest: Manifest,
                 mixture: Sequence[MixtureSource] = (), eval_sources: Sequence[MixtureSource] = ()):
        """``mixture``: the training directories and weights when there are several (``manifest`` is
        then the first one's); ``eval_sources``: directories only evaluated on (``--eval-data``)."""
        self.model_config, self.config, self.manifest = model_config, config, manifest
        self.progress = MixtureProgress(config, model_config.bi_data, mixture, eval_sources)
        self.mixture, self.eval_sources = self.progress.mixture, self.progress.eval_sources
        self.tokens_per_example = config.seq_len

    def describe_input_error(self, error: Exception) -> str:
        """Which file of the data the training input could not read, and its first bad record: the
        train shards are read through (in parallel over files), as `xlnet inspect --verify` does."""
        from tfrecords.verification import verify_shard

        manifests = [source.manifest for source in self.mixture] or [self.manifest]
        shards = [(manifest, shard) for manifest in manifests for shard in manifest.splits["train"].shards]
        vocab_size = self.manifest.vocab.get("vocab_size")
        with ThreadPoolExecutor(max(1, min(8, len(shards)))) as pool:
            reports = list(pool.map(lambda item: verify_shard(item[0], "train", item[1], vocab_size), shards))
        damaged = [report.describe() for report in reports if report.damaged]
        found = "; ".join(damaged) if damaged else "every train shard reads back intact now"
        directories = " and ".join(f"`xlnet inspect {manifest.directory} --verify`" for manifest in manifests)
        return f"{found}; check the whole directory with {directories}"

    def reader(self, split: str, batch: int, start_step: int = 0, manifest: Manifest | None = None) -> StreamReader:
        """The stream-ordered reader of ``split`` (of ``manifest``, by default the run's) with this run's
        shapes and seed."""
        config = self.config
        return StreamReader(manifest or self.manifest, split, batch, config.seq_len, config.num_predict,
                            self.model_config.bi_data, seed=config.seed,
                            accumulation_steps=config.accumulation_steps if split == "train" else 1,
                            start_step=start_step, resample_masks=config.resample_masks and split == "train")

    def build(self, strategy: tf.distribute.Strategy) -> None:
        """The pretrainer (under the caller's strategy scope) and both memories."""
        from trainer.models.pretrainer import XLNetPretrainer

        config, model_config = self.config, self.model_config
        replicas = strategy.num_replicas_in_sync
        self.train_batch = self.reader("train", config.train_batch_size).per_replica_batch_size(replicas)
        self.eval_batch = self.reader("valid", config.eval_batch_size).per_replica_batch_size(replicas)
        self.pretrainer = XLNetPretrainer(model_config, config.seq_len, config.num_predict, config.perm_size,
                                          self.manifest.special_ids, remat=config.remat)
        self.network = self.model = self.pretrainer.network
        self.train_memory = MemoryState(strategy, model_config.n_layer, self.train_batch, model_config.mem_len,
                                        model_config.d_model, "train")
        self.eval_memory = MemoryState(strategy, model_config.n_layer, self.eval_batch, model_config.mem_len,
                                       model_config.d_model, "eval")
        # no AutoGraph: the evaluation step branches only on Python values (as the train step's micro-steps)
        self._eval_fn = tf.function(self._eval_micro, jit_compile=config.jit_compile, autograph=False)
        self._eval_loop = None

    def trainable_variables(self) -> list[tf.Variable]:
        return list(self.network.trainable_variables)

    def learning_rate_multipliers(self) -> None:
        return None  # one learning rate for every variable

    def checkpoint_items(self, first_replica: int) -> dict[str, Any]:
        return {"model": self.network, "mems": self.train_memory.trackable(first_replica)}

    def train_dataset(self, strategy: tf.distribute.Strategy, start_step: int) -> tf.distribute.DistributedDataset:
        if self.mixture:
            return self.progress.reader(MixtureReader, start_step).distribute(strategy)
        return self.reader("train", self.config.train_batch_size, start_step).distribute(strategy)

    def step_details(self, step: int) -> dict[str, Any]:
        return self.progress.step_details(step)

    def step_summaries(self, step: int) -> dict[str, float]:
        return self.progress.step_summaries(step)

    def read_state(self) -> list[tf.Tensor] | None:
        return self.train_memory.read()

    def write_state(self, mems) -> None:
        self.train_memory.assign(mems)

    def compute(self, batch: Mapping[str, tf.Tensor], mems, training: bool) -> StepOutputs:
        out = self.pretrainer.compute(batch, mems, training=training)
        count = tf.cast(out["num_targets"], tf.float32)
        return StepOutputs(loss_sum=tf.cast(out["loss"], tf.float32) * count, count=count,
                           metric_sums={"accuracy": tf.cast(out["accuracy"], tf.float32) * count},
                           state=out["new_mems"])

    # ---------------------------------------------------------------------------- evaluation
    def _eval_micro(self, features, mems):
        out = self.compute(features, mems, training=False)
        return out.loss_sum, out.metric_sums["accuracy"], out.count, out.state

    def _replica_eval(self, features):
        context = tf.distribute.get_replica_context()
        loss_sum, correct, targets, mems = self._eval_fn({k: v[0] for k, v in features.items()},
                                                         self.eval_memory.read())
        self.eval_memory.assign(mems)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, [loss_sum, correct, targets])

    def _eval_loop_fn(self, strategy, iterator, num_steps):
        totals = tf.zeros([3])
        for _ in tf.range(num_steps):
            sums = strategy.run(self._replica_eval, args=(next(iterator),))
            totals += tf.stack([strategy.experimental_local_results(s)[0] for s in sums])
        return totals

    def evaluate(self, controller: Controller) -> dict[str, float]:
        """Loss, accuracy and perplexity on ``eval_steps`` batches of the valid split, memory from zero;
        with a mixture or ``--eval-data``, of each directory's too (MixtureProgress.evaluate)."""
        return self.progress.evaluate(lambda manifest: self._evaluate_split(controller, manifest), self.manifest)

    def _evaluate_split(self, controller: Controller, manifest: Manifest) -> dict[str, float]:
        strategy = controller.strategy
        if self._eval_loop is None:
            self._eval_loop = tf.function(lambda iterator, steps: self._eval_loop_fn(strategy, iterator, steps))
        self.eval_memory.reset()
        iterator = iter(self.reader("valid", self.config.eval_batch_size, manifest=manifest).distribute(strategy))
        loss_sum, correct, targets = self._eval_loop(iterator, tf.constant(self.config.eval_steps)).numpy()
        loss = float(loss_sum / max(targets, 1.0))
        return {"loss": loss, "accuracy": float(correct / max(targets, 1.0)), "perplexity": perplexity(loss)}


def pretraining_controller(model_config: ModelConfig, train_config: TrainConfig, *, manifest: Manifest,
                           model_dir: str, strategy: tf.distribute.Strategy, init_checkpoint: str | None = None,
                           log: Callable[[str], None] = print,
                           after_first_save: Callable[[int], None] | None = None,
                           mixture: Sequence[MixtureSource] = (),
                           eval_sources: Sequence[MixtureSource] = (),
                           step_flops: StepFlops | None = None,
                           init_weights: Callable[[Any], str] | None = None) -> Controller:
    """The controller of a pretraining run: what `xlnet train` builds (``step_flops``: its MFU's
    measure, trainer/runtime/throughput.py)."""
    task = PretrainingTask(model_config, train_config, manifest, mixture, eval_sources)
    return Controller(task, train_config, model_dir=model_dir, strategy=strategy, init_checkpoint=init_checkpoint,
                      log=log, after_first_save=after_first_save, step_flops=step_flops, init_weights=init_weights)
