"""The fine-tuning head of a model directory, as the interop formats need it: which task
(finetune_config.json) and, for classification, the label names (labels.json, index = class id),
read and written through ModelDirectory (trainer/model_dir.py). The head's weights live in the
directory's checkpoints as ``tf.train.Checkpoint(model=network, head=XLNetForSequenceTask(...))``
(trainer/finetuning.py).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from trainer.finetune_config import SEQUENCE_TASKS, FinetuneConfig
from trainer.finetuning import XLNetForSequenceTask
from trainer.model_dir import ModelDirectory, ModelDirectoryError
from trainer.network import XLNetNetwork


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """A fine-tuning head: ``task`` (one of trainer.finetune_config.SEQUENCE_TASKS) and, for classification,
    the label names (index = class id)."""

    task: str
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.task not in SEQUENCE_TASKS:
            raise ValueError(f"task must be one of {', '.join(SEQUENCE_TASKS)}, got {self.task!r}")
        if self.task == "classification" and len(self.labels) < 2:
            raise ValueError(f"classification needs at least 2 labels, got {len(self.labels)}")

    @property
    def num_labels(self) -> int:
        """Units of logits_proj: one per class, or 1 (regression, each multiple-choice option)."""
        return len(self.labels) if self.task == "classification" else 1

    def build(self, network: XLNetNetwork) -> XLNetForSequenceTask:
        """The head model over ``network`` (every weight created, ready for a restore or an assign)."""
        return XLNetForSequenceTask(network, self.task, self.num_labels)


def read_head_spec(directory: ModelDirectory) -> Optional[HeadSpec]:
    """The head of a fine-tuned model directory, or None for a pretrained one (no finetune_config.json)."""
    config = directory.finetune_config
    if config is None:
        return None
    if config.task != "classification":
        return HeadSpec(config.task)
    if directory.labels is None:
        raise ModelDirectoryError(f"{directory.join(ModelDirectory.LABELS)}: file not found (a classification "
                                  "model directory names its labels there)")
    return HeadSpec(config.task, directory.labels)


def write_head_files(directory: ModelDirectory, head: HeadSpec) -> None:
    """Writes finetune_config.json (the task; every other fine-tuning setting at its default) and,
    for classification, labels.json."""
    directory.write_finetune_files(FinetuneConfig(task=head.task),
                                   head.labels if head.task == "classification" else None)
