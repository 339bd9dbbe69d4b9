"""Fine-tuning configuration: one frozen dataclass for how to fine-tune, presets by name.

The architecture comes from the --init-checkpoint model directory (or a model preset for a
baseline from random weights), made whole-sequence by ``trainer.config.sequence_model_config``.
Resolved like pretraining (trainer/train_config.py): preset -> ``--config FILE`` (JSON
``{"model": {...}, "finetune": {...}}``) -> ``--set key=value``, and saved as
finetune_config.json in the output model directory.
"""
from __future__ import annotations

import dataclasses

from trainer.config import MODEL_PRESETS
from trainer.train_config import LoopConfig

SEQUENCE_TASKS = ("classification", "regression", "multiple-choice")  # one head on the <cls> summary
TASKS = SEQUENCE_TASKS + ("squad",)  # squad: extractive question answering (trainer/squad_task.py)


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(LoopConfig):
    """How to fine-tune: the task, the sequence length, layer-wise LR decay, and the loop's settings.

    ``layer_decay_rate`` r multiplies the learning rate of block l (of n) by r^(n-1-l), the
    original's ``lr_layer_decay_rate`` (see trainer/optimization.py); 1.0 turns it off.
    ``eval_every`` steps (and once at the end) the whole eval file is scored.
    """

    task: str = "classification"
    max_seq_length: int = 128
    layer_decay_rate: float = 1.0
    # Set from the training file, not by hand: its rows have a second text (text_b), so the
    # served signatures take one too.
    text_pair: bool = False
    # squad only: context windows every doc_stride pieces, questions cut to max_query_length
    # pieces, answers of at most max_answer_length pieces, n_best candidates per question from
    # a start_n_top x end_n_top beam per window.
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best: int = 20
    start_n_top: int = 5
    end_n_top: int = 5

    CONFIG_KIND = "fine-tuning"
    POSITIVE = LoopConfig.POSITIVE + ("max_seq_length", "layer_decay_rate", "doc_stride", "max_query_length",
                                      "max_answer_length", "n_best", "start_n_top", "end_n_top")

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.task not in TASKS:
            problems.append(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.max_seq_length < 3:
            problems.append(f"max_seq_length must be at least 3 (<sep>, <sep>, <cls>), got {self.max_seq_length}")
        if self.layer_decay_rate > 1:
            problems.append(f"layer_decay_rate must be in (0, 1], got {self.layer_decay_rate}")
        return problems


# Same names as the model presets. base and large follow the original's run_classifier.py
# scripts (batch 32, Adam epsilon 1e-8, warm-up, no weight decay); tiny suits the bundled
# Rotten Tomatoes set on two CPU cores.
FINETUNE_PRESETS: dict[str, FinetuneConfig] = {
    "tiny": FinetuneConfig(train_batch_size=32, eval_batch_size=64, train_steps=600, steps_per_loop=50,
                           learning_rate=5e-4, warmup_steps=60, weight_decay=0.0, adam_epsilon=1e-8,
                           checkpoint_every=200, eval_every=200, max_seq_length=64),
    "base": FinetuneConfig(train_batch_size=32, eval_batch_size=64, train_steps=4000, learning_rate=2e-5,
                           warmup_steps=500, weight_decay=0.0, adam_epsilon=1e-8, checkpoint_every=500,
                           eval_every=500, max_seq_length=128),
    "large": FinetuneConfig(train_batch_size=32, eval_batch_size=64, train_steps=4000, learning_rate=1e-5,
                            warmup_steps=500, weight_decay=0.0, adam_epsilon=1e-8, checkpoint_every=500,
                            eval_every=500, max_seq_length=128),
}
assert set(FINETUNE_PRESETS) == set(MODEL_PRESETS), "fine-tuning and model presets must share their names"


def finetune_preset(name: str) -> FinetuneConfig:
    """The named fine-tuning preset, with a clear error for unknown names."""
    try:
        return FINETUNE_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(FINETUNE_PRESETS)}") from None
