"""Which fine-tuning head a model carries, without TensorFlow: :class:`HeadSpec` and its rules.

"Task" here means the fine-tuning task kind, the same word as ``FinetuneConfig.task`` and
``xlnet finetune --task``: what the head predicts, one of :data:`TASKS`. The three
:data:`SEQUENCE_TASKS` share one head on the ``<cls>`` summary (trainer/models/sequence_model.py);
``squad`` is extractive question answering (trainer/models/question_answering.py).

A fine-tuned model directory (trainer/runtime/model_dir.py) records its head in
finetune_config.json and labels.json; the interop formats (trainer/conversion/) carry the same
facts in their own files. Either way a HeadSpec says which head to build, and
trainer/models/heads.py builds it over a network. The rules a head obeys (the task kinds, the
labels a classifier needs, the units of ``logits_proj``, a squad head's beam widths) are written
here once; the head models apply the same functions.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import Optional

SEQUENCE_TASKS = ("classification", "regression", "multiple-choice")  # one head on the <cls> summary
TASKS = SEQUENCE_TASKS + ("squad",)  # squad: extractive question answering


def check_task(task: str, tasks: tuple[str, ...] = TASKS) -> None:
    """Raises ValueError unless ``task`` is one of ``tasks``."""
    if task not in tasks:
        raise ValueError(f"task must be one of {', '.join(tasks)}, got {task!r}")


def check_label_count(task: str, count: int) -> None:
    """Raises ValueError when a classification head would have fewer than 2 classes."""
    if task == "classification" and count < 2:
        raise ValueError(f"classification needs at least 2 labels, got {count}")


def logits_units(task: str, classes: int) -> int:
    """Units of a sequence head's ``logits_proj``: one per class for classification, else 1 (the
    regression score, or the score of each multiple-choice option)."""
    return classes if task == "classification" else 1


def check_beam_widths(start_n_top, end_n_top) -> None:
    """Raises ValueError unless a squad head's beam widths (starts kept, ends kept per start) are both
    integers of at least 1."""
    if not all(isinstance(width, numbers.Integral) and width >= 1 for width in (start_n_top, end_n_top)):
        raise ValueError(f"a squad head needs start_n_top and end_n_top of at least 1, got {start_n_top} "
                         f"and {end_n_top}")


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
        check_task(self.task)
        check_label_count(self.task, len(self.labels))
        if self.task == "squad":
            check_beam_widths(self.start_n_top, self.end_n_top)

    @property
    def num_labels(self) -> int:
        """Units of logits_proj: one per class, or 1 (regression, each multiple-choice option)."""
        return logits_units(self.task, len(self.labels))

    @property
    def sequence_task(self) -> bool:
        """True for the heads on the <cls> summary (XLNetForSequenceTask), False for squad."""
        return self.task in SEQUENCE_TASKS
