"""The fine-tuning head of a model directory, as the interop formats need it: which task
(finetune_config.json's "task") and, for classification, the label names (labels.json, index =
class id). Read when exporting a fine-tuned model, written when importing one; the head's
weights themselves live in the directory's checkpoints as
``tf.train.Checkpoint(model=network, head=XLNetForSequenceTask(...))`` (trainer/finetuning.py).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from trainer.finetuning import TASKS, XLNetForSequenceTask
from trainer.model_dir import ModelDirectory
from trainer.network import XLNetNetwork
from trainer.storage import StorageError, read_json, write_json

# The file names belong to ModelDirectory once it names them; until then, the same names here.
FINETUNE_CONFIG = getattr(ModelDirectory, "FINETUNE_CONFIG", "finetune_config.json")
LABELS = getattr(ModelDirectory, "LABELS", "labels.json")


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """A fine-tuning head: ``task`` (one of trainer.finetuning.TASKS) and, for classification,
    the label names (index = class id)."""

    task: str
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
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
    """The head of a fine-tuned model directory, or None when it has no finetune_config.json."""
    if not directory.has(FINETUNE_CONFIG):
        return None
    path = directory.join(FINETUNE_CONFIG)
    values = read_json(path)
    task = values.get("task") if isinstance(values, dict) else None
    if task not in TASKS:
        raise StorageError(f"{path}: \"task\" must be one of {', '.join(TASKS)}, got {task!r}")
    if task != "classification":
        return HeadSpec(task)
    labels = read_json(directory.join(LABELS)) if directory.has(LABELS) else None
    if not isinstance(labels, list) or len(labels) < 2:
        raise StorageError(f"{directory.join(LABELS)}: a classification model needs a JSON list of at least 2 label "
                           "names (index = class id)")
    return HeadSpec(task, tuple(str(label) for label in labels))


def write_head_files(directory: ModelDirectory, head: HeadSpec) -> None:
    """Writes finetune_config.json (the task only; other fine-tuning settings keep their defaults)
    and, for classification, labels.json."""
    write_json(directory.join(FINETUNE_CONFIG), {"task": head.task})
    if head.task == "classification":
        write_json(directory.join(LABELS), list(head.labels))
