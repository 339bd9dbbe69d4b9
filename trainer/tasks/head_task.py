"""What every fine-tuning task shares, on the controller (trainer/runtime/controller.py; the Task
protocol of trainer/runtime/task_protocol.py): the trained variables, layer-wise learning-rate
decay, the checkpoint items, the seeded resumable training input and predictions gathered from
every replica. The sequence task (trainer/tasks/sequence.py) and SQuAD (trainer/tasks/squad.py)
complete it.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from trainer.configs.finetuning import FinetuneConfig
from trainer.inputs import batching
from trainer.runtime.optimization import layer_decay_multipliers, variable_key
from trainer.runtime.task_protocol import Task


class HeadTask(Task):
    """What every fine-tuning task shares (a controller Task, trainer/runtime/task_protocol.py,
    completed by a subclass).

    A subclass sets ``config``, ``model_config``, ``metric_names`` and ``tokens_per_example``,
    builds ``network`` and ``head`` in ``build`` and defines ``training_columns``, ``compute``
    and ``evaluate``. The query stream's ``mask_emb`` and the LM output bias are left out of the
    trained variables: only permutation-LM targets use them (their gradient would be None).
    """

    config: FinetuneConfig
    options: int = 1  # sequences per example: one per option for multiple choice (the FLOPs of a step)
    _predict_fn: Callable | None = None  # traced on the first prediction, for the strategy it was given

    def trainable_variables(self) -> list[tf.Variable]:
        unused = {variable_key(self.network.mask_emb), variable_key(self.network.lm_bias)}
        return [v for v in self.head.trainable_variables if variable_key(v) not in unused]

    def learning_rate_multipliers(self) -> dict[int, float] | None:
        """Layer-wise decay factors of ``config.layer_decay_rate`` (None when it is 1)."""
        rate = self.config.layer_decay_rate
        if rate == 1.0:
            return None
        trained = {variable_key(v) for v in self.trainable_variables()}
        return {key: factor for key, factor in layer_decay_multipliers(self.network, rate).items() if key in trained}

    def checkpoint_items(self, first_replica: int) -> dict[str, Any]:
        del first_replica  # every replica holds the same weights
        return {"model": self.network, "head": self.head}

    def training_columns(self) -> tuple[dict[str, np.ndarray], Callable, Any]:
        """(per-example columns, in-graph encode of a batch of them, per-example targets)."""
        raise NotImplementedError

    def train_dataset(self, strategy: tf.distribute.Strategy, start_step: int) -> tf.distribute.DistributedDataset:
        config = self.config
        columns, encode, targets = self.training_columns()

        def dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
            return batching.training_dataset(columns, encode, config.train_batch_size, targets,
                                             seed=config.seed, start_step=start_step,
                                             accumulation_steps=config.accumulation_steps, input_context=context)

        return strategy.distribute_datasets_from_function(dataset)

    def read_state(self) -> None:
        return None  # no memory: every example is encoded on its own

    def write_state(self, state) -> None:
        del state

    def gathered_outputs(self, strategy: tf.distribute.Strategy, dataset: tf.data.Dataset, count: int) -> Any:
        """The head's inference outputs on ``dataset``'s batches (features only), gathered from
        every replica and concatenated in dataset order, as NumPy (same structure as the head's),
        cut to the first ``count`` rows (the rest pad the last batch: batching.pad_rows)."""
        if self._predict_fn is None:
            def replica_outputs(features):
                return self.head(features, training=False)

            self._predict_fn = tf.function(
                lambda features: strategy.gather(strategy.run(replica_outputs, args=(features,)), axis=0),
                reduce_retracing=True)
        batches = [tf.nest.map_structure(lambda t: t.numpy(), self._predict_fn(features))
                   for features in strategy.experimental_distribute_dataset(dataset)]
        return tf.nest.map_structure(lambda *parts: np.concatenate(parts, axis=0)[:count], *batches)
