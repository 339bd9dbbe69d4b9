"""Which fine-tuning head a model carries: :class:`HeadSpec`, and building that head over a network.

A fine-tuned model directory (trainer/runtime/model_dir.py) records its head in
finetune_config.json and labels.json; the interop formats (trainer/conversion/) carry the same
facts in their own files. Either way a HeadSpec says which head to build: an
:class:`XLNetForSequenceTask` (trainer/models/sequence_model.py) on the ``<cls>`` summary, or for
squad an :class:`XLNetForQuestionAnswering` (trainer/models/question_answering.py) with its beam
widths.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

SEQUENCE_TASKS = ("classification", "regression", "multiple-choice")  # one head on the <cls> summary
TASKS = SEQUENCE_TASKS + ("squad",)  # squad: extractive question answering


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """A fine-tuning head: ``task`` (one of TASKS), for classification the label names (index =
    class id), for squad the beam widths ``start_n_top`` and ``end_n_top`` (required: where they
    come from, finetune_config.json or a Hugging Face config.json, says what they are)."""

    task: str
    labels: tuple[str, ...] = ()
    start_n_top: Optional[int] = None
    end_n_top: Optional[int] = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task == "classification" and len(self.labels) < 2:
            raise ValueError(f"classification needs at least 2 labels, got {len(self.labels)}")
        widths = (self.start_n_top, self.end_n_top)
        if self.task == "squad" and not all(isinstance(width, int) and width >= 1 for width in widths):
            raise ValueError(f"a squad head needs start_n_top and end_n_top of at least 1, got {self.start_n_top} "
                             f"and {self.end_n_top}")

    @property
    def num_labels(self) -> int:
        """Units of logits_proj: one per class, or 1 (regression, each multiple-choice option)."""
        return len(self.labels) if self.task == "classification" else 1

    @property
    def sequence_task(self) -> bool:
        """True for the heads on the <cls> summary (XLNetForSequenceTask), False for squad."""
        return self.task in SEQUENCE_TASKS

    def build(self, network):
        """The head model over ``network`` (an XLNetNetwork; every weight created, ready for a
        restore or an assign): an XLNetForSequenceTask, or for squad an XLNetForQuestionAnswering."""
        if self.task == "squad":
            from trainer.models.question_answering import XLNetForQuestionAnswering

            return XLNetForQuestionAnswering(network, self.start_n_top, self.end_n_top)
        from trainer.models.sequence_model import XLNetForSequenceTask

        return XLNetForSequenceTask(network, self.task, self.num_labels)
