"""The sequence task (SequenceTask): classification, regression or multiple choice on labeled text files.

What it adds to the controller (trainer/runtime/controller.py): the XLNet network with a sequence head
(trainer/models/sequence_model.py) as the model, the labeled examples encoded by the serving encoder
(trainer/inputs/sequence_examples.py) as the input, layer-wise learning-rate decay, and the task's
metrics on the whole eval file (trainer/evaluation/metrics.py). No permutation, no bi_data: the
network's config comes through ``trainer.models.config.sequence_model_config``; no memory unless
``max_segments`` > 1, when each text is read over that many segments through the memory
(``XLNetNetwork.encode_segments``), training, evaluation and predictions alike.

A checkpoint holds ``model`` (the network, so `xlnet export` and --init-checkpoint read it as
they read a pretraining checkpoint) and ``head`` (the whole fine-tuned model). The training
order is a pure function of the seed and the step (``batching.example_order``), so a
resumed run reads what an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

from trainer.configs.finetuning import FieldNames, FinetuneConfig
from trainer.evaluation import metrics
from trainer.inputs import sequence_examples
from trainer.inputs.sequence_examples import ChoiceExample, TextExample
from trainer.models.config import ModelConfig
from trainer.models.network import build_network
from trainer.models.sequence_model import XLNetForSequenceTask, task_loss
from trainer.runtime.controller import Controller
from trainer.runtime.task_protocol import StepOutputs
from trainer.serving.text_encoder import XLNetTextEncoder
from trainer.tasks.head_task import HeadTask

Examples = Sequence[TextExample] | Sequence[ChoiceExample]


@dataclasses.dataclass(frozen=True)
class Split:
    """The examples of one file set and, when labeled, their targets (label ids, values or
    option indices) and how many the encoder truncates."""

    examples: Examples
    targets: np.ndarray | None
    truncated: int


@dataclasses.dataclass(frozen=True)
class TaskData:
    """The splits of a fine-tuning run and the classification labels (index = class id)."""

    train: Split
    eval: Split
    labels: tuple[str, ...] | None = None
    test: Split | None = None


def read_examples(task: str, pattern: str, fields: FieldNames, require_label: bool = True) -> Examples:
    """The examples of ``pattern`` (local or gs://) for ``task``; FinetuneDataError names bad rows."""
    if task == "multiple-choice":
        return sequence_examples.read_choice_examples(pattern, require_label=require_label)
    return sequence_examples.read_text_examples(pattern, regression=task == "regression", require_label=require_label,
                                            file_format=fields.file_format, text_field=fields.text,
                                            text_b_field=fields.text_b, label_field=fields.label)


def targets_of(task: str, examples: Examples, labels: Sequence[str] | None) -> np.ndarray:
    """Label ids (classification, through the TRAINING label list), float values (regression)
    or option indices (multiple choice)."""
    if task == "classification":
        return sequence_examples.label_ids(examples, labels)
    if task == "regression":
        return sequence_examples.regression_targets(examples)
    return sequence_examples.choice_targets(examples)


def load_task_data(task: str, encoder: XLNetTextEncoder, train: str, eval: str, test: str | None = None,
                   fields: FieldNames = FieldNames(), labels: Sequence[str] | None = None,
                   max_segments: int = 1) -> TaskData:
    """Reads and checks the train, eval (and unlabeled-or-labeled test) files.

    ``labels``: the label list of a run being resumed; None takes it from the training file.
    ``max_segments``: the segments a text is read in (for the counts of truncated examples).
    Raises FinetuneDataError naming the file and line of any bad row, an eval label the training
    file lacks, or training and eval files that disagree on having ``text_b``.
    """
    train_examples = read_examples(task, train, fields)
    if task == "classification" and labels is None:
        labels = sequence_examples.label_list(train_examples)
    splits = {}
    for name, pattern in (("train", train), ("eval", eval), ("test", test)):
        if pattern is None:
            continue
        examples = train_examples if name == "train" else read_examples(task, pattern, fields, name != "test")
        _check_same_layout(train_examples, examples)
        labeled = all(example.label is not None for example in examples)
        splits[name] = Split(examples, targets_of(task, examples, labels) if labeled else None,
                             sequence_examples.count_truncated(examples, encoder, max_segments))
    return TaskData(splits["train"], splits["eval"], tuple(labels) if labels is not None else None,
                    splits.get("test"))


def _check_same_layout(train: Examples, other: Examples) -> None:
    """A model trained on pairs cannot score single texts, nor one option count another."""
    first, second = train[0], other[0]
    if isinstance(first, TextExample) and (first.text_b is None) != (second.text_b is None):
        raise sequence_examples.FinetuneDataError(
            f"{second.path}:{second.line}: {'has no' if second.text_b is None else 'has a'} second text, "
            f"unlike the training file {first.path}")


class SequenceTask(HeadTask):
    """Fine-tunes ``model_config``'s network on ``data`` (a controller Task).

    Step-log metric: ``accuracy`` for classification and multiple choice (none for regression).
    Evaluation on the whole eval split: classification accuracy, macro_f1, mcc; regression
    pearson, spearman; multiple choice accuracy; each with the mean eval ``loss``.
    """

    def __init__(self, config: FinetuneConfig, model_config: ModelConfig, encoder: XLNetTextEncoder,
                 data: TaskData):
        self.config, self.model_config, self.encoder, self.data = config, model_config, encoder, data
        self.task = config.task
        self.metric_names = {} if self.task == "regression" else {"accuracy": "accuracy"}
        # rows per example: one sequence per option for multiple choice
        self.options = len(data.train.examples[0].options) if self.task == "multiple-choice" else 1
        self.tokens_per_example = config.max_seq_length * self.options * config.max_segments

    def build(self, strategy: tf.distribute.Strategy) -> None:
        """The network and its head (under the caller's strategy scope)."""
        del strategy
        # the controller has just set the random seed, which frees the tokenizer of an encoder
        # that already ran (XLNetTextEncoder.copy)
        self.encoder = self.encoder.copy()
        self.network = build_network(self.model_config, remat=self.config.remat)
        num_labels = len(self.data.labels) if self.data.labels else 1
        self.model = self.head = XLNetForSequenceTask(self.network, self.task, num_labels, name="finetuned")

    def training_columns(self) -> tuple[dict[str, np.ndarray], Callable, np.ndarray]:
        columns, encode = sequence_examples.example_columns(self.data.train.examples, self.encoder,
                                                            self.config.max_segments)
        return columns, encode, self.data.train.targets

    def compute(self, batch, state, training: bool) -> StepOutputs:
        features, targets = batch
        outputs = self.head(features, training=training)
        losses = task_loss(self.task, outputs, targets)
        metrics = {}
        if self.metric_names:
            predicted = tf.argmax(outputs, axis=-1, output_type=tf.int32)
            metrics["accuracy"] = tf.reduce_sum(tf.cast(tf.equal(predicted, tf.cast(targets, tf.int32)), tf.float32))
        return StepOutputs(loss_sum=tf.reduce_sum(losses), count=tf.cast(tf.shape(losses)[0], tf.float32),
                           metric_sums=metrics, state=state)

    # ---------------------------------------------------------------------------- evaluation
    def predict(self, strategy: tf.distribute.Strategy, examples: Examples) -> np.ndarray:
        """The head's outputs for ``examples`` in file order: logits [N, labels] (classification),
        scores [N] (regression) or logits [N, options] (multiple choice)."""
        make = sequence_examples.choice_dataset if self.task == "multiple-choice" else sequence_examples.text_dataset
        dataset = make(examples, self.encoder, self.config.eval_batch_size, pad_last_batch=True,
                       max_segments=self.config.max_segments)
        return self.gathered_outputs(strategy, dataset, len(examples))

    def scores(self, outputs: np.ndarray, targets: np.ndarray) -> dict[str, float]:
        """The task's metrics and mean loss of head ``outputs`` against ``targets``."""
        loss = float(np.mean(task_loss(self.task, tf.constant(outputs), tf.constant(targets)).numpy()))
        if self.task == "classification":
            scores = metrics.classification_metrics(targets, outputs, len(self.data.labels))
        elif self.task == "regression":
            scores = metrics.regression_metrics(targets, outputs)
        else:
            scores = metrics.multiple_choice_metrics(targets, outputs)
        return {**scores, "loss": loss}

    def evaluate(self, controller: Controller) -> dict[str, float]:
        """The task's metrics on the whole eval split."""
        split = self.data.eval
        return self.scores(self.predict(controller.strategy, split.examples), split.targets)

    def prediction_rows(self, outputs: np.ndarray) -> list[dict[str, Any]]:
        """One JSON-ready row per example: the predicted label and probabilities, or the score."""
        if self.task == "regression":
            return [{"index": i, "score": float(score)} for i, score in enumerate(outputs)]
        probabilities = tf.nn.softmax(tf.constant(outputs, tf.float32), axis=-1).numpy()
        rows = []
        for i, row in enumerate(probabilities):
            best = int(np.argmax(row))
            entry = {"index": i, "label": self.data.labels[best] if self.data.labels else best,
                     "probabilities": [float(p) for p in row]}
            rows.append(entry)
        return rows

