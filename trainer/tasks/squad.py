"""The extractive question-answering task (SQuAD v1.1 / v2.0) on the controller.

What it adds to the controller (trainer/runtime/controller.py): XLNet's SQuAD head
(trainer/models/question_answering.py) as the model, the windowed features of trainer/inputs/squad.py as the
input (in the seeded, resumable order every fine-tuning task uses), the original's loss, and the
official evaluation (trainer/evaluation/squad_official.py) of the n-best answers over every window
(trainer/evaluation/squad_postprocessing.py) on the whole eval file.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from trainer.configs.finetuning import FinetuneConfig
from trainer.evaluation.squad_postprocessing import AnswerPrediction, evaluate_predictions, predict_answers
from trainer.inputs.batching import batched_rows
from trainer.inputs.squad import SquadData, SquadDataError, SquadFeatures, SquadTokenizer, build_features, read_squad
from trainer.models.config import ModelConfig
from trainer.models.network import build_network
from trainer.models.question_answering import XLNetForQuestionAnswering, squad_losses
from trainer.runtime.controller import Controller
from trainer.runtime.task_protocol import StepOutputs
from trainer.tasks.head_task import HeadTask


@dataclasses.dataclass(frozen=True)
class SquadSplit:
    """The questions of one SQuAD file set and their windowed features."""

    data: SquadData
    features: SquadFeatures


@dataclasses.dataclass(frozen=True)
class SquadTaskData:
    train: SquadSplit
    eval: SquadSplit
    test: SquadSplit | None = None  # questions to answer at the end; answers optional


def load_squad_splits(config: FinetuneConfig, tokenizer: SquadTokenizer, train: str, eval: str,
                      test: str | None = None) -> SquadTaskData:
    """Reads the SQuAD files (local or gs://) and builds their windows with ``config``'s shapes.

    Training features skip (and count) questions whose answer covers no piece; eval and test
    features keep every question. The test files' questions may carry no answers. SquadDataError
    names the file and question id of a bad entry.
    """
    shapes = dict(max_seq_length=config.max_seq_length, doc_stride=config.doc_stride,
                  max_query_length=config.max_query_length)

    def split(data: SquadData, training: bool) -> SquadSplit:
        return SquadSplit(data, build_features(data.examples, tokenizer, training=training, **shapes))

    return SquadTaskData(split(read_squad(train), True), split(read_squad(eval), False),
                         split(read_squad(test, require_answers=False), False) if test else None)


class SquadTask(HeadTask):
    """Fine-tunes ``model_config``'s network for extractive question answering (a controller Task).

    Evaluation on the whole eval file: the official ``exact`` and ``f1`` (with the HasAns / NoAns
    splits and the best no-answer threshold for SQuAD 2.0). ``predictions`` holds the answers of
    the last evaluation.
    """

    metric_names: dict[str, str] = {}

    def __init__(self, config: FinetuneConfig, model_config: ModelConfig, data: SquadTaskData):
        self.config, self.model_config, self.data = config, model_config, data
        self.task = config.task
        self.tokens_per_example = config.max_seq_length
        self.predictions: list[AnswerPrediction] = []

    def build(self, strategy: tf.distribute.Strategy) -> None:
        """The network and the SQuAD head (under the caller's strategy scope)."""
        del strategy
        self.network = build_network(self.model_config, remat=self.config.remat)
        self.model = self.head = XLNetForQuestionAnswering(self.network, self.config.start_n_top,
                                                           self.config.end_n_top, name="finetuned")

    def training_columns(self) -> tuple[dict[str, np.ndarray], Callable, dict[str, np.ndarray]]:
        features = self.data.train.features
        if not len(features):
            raise SquadDataError("--train: no training question could be aligned with its context")
        targets = {name: getattr(features, name) for name in SquadFeatures.TARGETS}
        return features.model_inputs(with_targets=False), _unchanged, targets

    def compute(self, batch, state, training: bool) -> StepOutputs:
        features, targets = batch
        outputs = self.head({**features, "start_positions": targets["start_positions"]}, training=training)
        losses = squad_losses(outputs, targets["start_positions"], targets["end_positions"], targets["is_impossible"])
        return StepOutputs(loss_sum=tf.reduce_sum(losses), count=tf.cast(tf.shape(losses)[0], tf.float32),
                           metric_sums={}, state=state)

    def answer(self, strategy: tf.distribute.Strategy, split: SquadSplit) -> list[AnswerPrediction]:
        """The best answer to every question of ``split``, as a span of its original context."""
        dataset = batched_rows(split.features.model_inputs(with_targets=False), self.config.eval_batch_size,
                               pad_last_batch=True)
        beam = self.gathered_outputs(strategy, dataset, len(split.features))
        return predict_answers(split.data.examples, split.features, beam, n_best=self.config.n_best,
                               max_answer_length=self.config.max_answer_length)

    def evaluate(self, controller: Controller) -> dict[str, float]:
        """The official SQuAD scores on the whole eval file."""
        self.predictions = self.answer(controller.strategy, self.data.eval)
        return {name: float(value) for name, value in evaluate_predictions(self.data.eval.data,
                                                                           self.predictions).items()}

    def summary(self) -> dict[str, Any]:
        """Counts worth reporting: questions and windows per split, truncated and skipped questions."""
        splits = {"train": self.data.train, "eval": self.data.eval, "test": self.data.test}
        counts: dict[str, Any] = {}
        for name, split in splits.items():
            if split is not None:
                counts[f"{name}_questions"], counts[f"{name}_windows"] = len(split.data.examples), len(split.features)
        counts["truncated_questions"] = {name: split.features.truncated_questions
                                         for name, split in splits.items() if split is not None}
        counts["unaligned_skipped"] = len(self.data.train.features.unaligned)
        return counts


def _unchanged(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """SQuAD features are model inputs already (built ahead of the graph by trainer/inputs/squad.py)."""
    return batch
