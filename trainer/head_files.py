"""The fine-tuning head of a model directory, as the interop formats need it: which task
(finetune_config.json), for classification the label names (labels.json, index = class id) and,
for squad, the beam widths (finetune_config.json's start_n_top, end_n_top), read and written
through ModelDirectory (trainer/model_dir.py). The head's weights live in the directory's
checkpoints as ``tf.train.Checkpoint(model=network, head=...)``: an XLNetForSequenceTask
(trainer/finetuning.py) or, for squad, an XLNetForQuestionAnswering (trainer/squad_head.py).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from trainer.finetune_config import SEQUENCE_TASKS, TASKS, FinetuneConfig
from trainer.finetuning import XLNetForSequenceTask
from trainer.model_dir import ModelDirectory, ModelDirectoryError
from trainer.network import XLNetNetwork


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """A fine-tuning head: ``task`` (one of trainer.finetune_config.TASKS), for classification the
    label names (index = class id), for squad the beam widths ``start_n_top``, ``end_n_top``."""

    task: str
    labels: tuple[str, ...] = ()
    start_n_top: int = FinetuneConfig.start_n_top
    end_n_top: int = FinetuneConfig.end_n_top

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task == "classification" and len(self.labels) < 2:
            raise ValueError(f"classification needs at least 2 labels, got {len(self.labels)}")
        if self.start_n_top < 1 or self.end_n_top < 1:
            raise ValueError(f"start_n_top and end_n_top must be at least 1, got {self.start_n_top} and "
                             f"{self.end_n_top}")

    @property
    def num_labels(self) -> int:
        """Units of logits_proj: one per class, or 1 (regression, each multiple-choice option)."""
        return len(self.labels) if self.task == "classification" else 1

    @property
    def sequence_task(self) -> bool:
        """True for the heads on the <cls> summary (XLNetForSequenceTask), False for squad."""
        return self.task in SEQUENCE_TASKS

    def build(self, network: XLNetNetwork):
        """The head model over ``network`` (every weight created, ready for a restore or an assign):
        an XLNetForSequenceTask, or for squad an XLNetForQuestionAnswering."""
        if self.task == "squad":
            from trainer.squad_head import XLNetForQuestionAnswering

            return XLNetForQuestionAnswering(network, self.start_n_top, self.end_n_top)
        return XLNetForSequenceTask(network, self.task, self.num_labels)


def read_head_spec(directory: ModelDirectory) -> Optional[HeadSpec]:
    """The head of a fine-tuned model directory, or None for a pretrained one (no finetune_config.json)."""
    config = directory.finetune_config
    if config is None:
        return None
    if config.task == "squad":
        return HeadSpec("squad", start_n_top=config.start_n_top, end_n_top=config.end_n_top)
    if config.task != "classification":
        return HeadSpec(config.task)
    if directory.labels is None:
        raise ModelDirectoryError(f"{directory.join(ModelDirectory.LABELS)}: file not found (a classification "
                                  "model directory names its labels there)")
    return HeadSpec(config.task, directory.labels)


def write_head_files(directory: ModelDirectory, head: HeadSpec) -> None:
    """Writes finetune_config.json (the task and, for squad, the beam widths; every other
    fine-tuning setting at its default) and, for classification, labels.json."""
    config = FinetuneConfig(task=head.task, start_n_top=head.start_n_top, end_n_top=head.end_n_top)
    directory.write_finetune_files(config, head.labels if head.task == "classification" else None)
