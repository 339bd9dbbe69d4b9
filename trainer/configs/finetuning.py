"""Fine-tuning configuration: one frozen dataclass for how to fine-tune, presets by name.

The architecture comes from the --init-checkpoint model directory (or a model preset for a
baseline from random weights), made whole-sequence by ``trainer.models.config.sequence_model_config``.
Resolved like pretraining (trainer/configs/training.py): preset -> ``--config FILE`` (JSON
``{"model": {...}, "finetune": {...}}``) -> ``--set key=value``, and saved as
finetune_config.json in the output model directory.
"""
from __future__ import annotations

import dataclasses

from trainer.configs.training import LoopConfig
from trainer.models.config import MODEL_PRESETS, named_preset
from trainer.models.head_spec import TASKS

# The most segments a text is read in (fine-tuning's max_segments, `xlnet export --max-segments`).
# Fine-tuning builds one copy of the network per segment into its step's graph (encode_segments is
# a Python loop, traced): for the tiny preset on 2 loaded CPU cores, the first step came after 18 s
# with 2 segments, 36 s with 8 and 221 s with 32 (1000 never reached a step in 9 minutes), and
# every step reads N - 1 segments forward before the last. At 32 a text spans 32 x
# max_seq_length pieces (16,384 at Base's 512), and the head reads n_layer x mem_len pieces back
# at most (docs/finetuning.md, "Long documents").
MAX_SEGMENTS = 32
# A SQuAD context needs room: the original's run_squad.py sequence length, the squad default of
# every preset (a --config file, --set or --max-seq-length still changes it).
SQUAD_MAX_SEQ_LENGTH = 512


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(LoopConfig):
    """How to fine-tune: the task, the sequence length, layer-wise LR decay, and the loop's settings.

    ``layer_decay_rate`` r multiplies the learning rate of block l (of n) by r^(n-1-l), the
    original's ``lr_layer_decay_rate`` (see trainer/runtime/optimization.py); 1.0 turns it off.
    ``eval_every`` steps (and once at the end) the whole eval file is scored.

    ``max_segments`` N > 1 (classification, regression, multiple choice): a text up to N segments of
    ``max_seq_length`` is read segment by segment, each seeing the last ``mem_len`` states of the
    ones before (the model's ``mem_len``: ``--set mem_len=M``), the head reading the last
    segment's ``<cls>`` (docs/finetuning.md, "Long documents").
    """

    task: str = "classification"
    max_seq_length: int = 128
    layer_decay_rate: float = 1.0
    max_segments: int = dataclasses.field(default=1, metadata={
        "help": "segments of max_seq_length a text is read in, through the memory (mem_len); "
                "1: one segment, as XLNet's fine-tuning; not for squad"})
    # Set from the training file, not by hand: its rows have a second text (text_b), so the
    # served signatures take one too.
    text_pair: bool = False
    # squad only (the one home of these defaults; `xlnet finetune`'s flags and help, the SQuAD
    # features, answers and head all take them from here). The defaults are run_squad.py's.
    doc_stride: int = dataclasses.field(default=128, metadata={"help": "pieces between the starts of context windows"})
    max_query_length: int = dataclasses.field(default=64, metadata={
        "help": "question pieces kept; longer ones are truncated and counted"})
    max_answer_length: int = dataclasses.field(default=30, metadata={"help": "longest answer in pieces"})
    n_best: int = dataclasses.field(default=20, metadata={"help": "candidate answers kept per question"})
    start_n_top: int = dataclasses.field(default=5, metadata={"help": "beam width: start positions per window"})
    end_n_top: int = dataclasses.field(default=5, metadata={"help": "beam width: end positions per start"})

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
        if not 1 <= self.max_segments <= MAX_SEGMENTS:
            problems.append(f"max_segments must be in 1..{MAX_SEGMENTS} (segments read per text; each is one more "
                            f"copy of the network in the step's graph and one more pass per step), got "
                            f"{self.max_segments}")
        if self.task == "squad":
            problems += squad_length_problems(self.max_seq_length, self.max_query_length)
            if self.max_segments > 1:
                problems.append(f"max_segments must be 1 for task squad (a long context is read in windows of "
                                f"doc_stride), got {self.max_segments}")
        return problems

    def for_task(self, task: str) -> "FinetuneConfig":
        """These settings for ``task``: squad's sequence length is SQUAD_MAX_SEQ_LENGTH."""
        if task == "squad":
            return self.replace(task=task, max_seq_length=SQUAD_MAX_SEQ_LENGTH)
        return self.replace(task=task)


def squad_length_problems(max_length: int, max_query_length: int) -> list[str]:
    """The SQuAD window rule: a sequence holds the question, <sep>, at least one context piece,
    <sep> and <cls>, so ``max_length`` must exceed ``max_query_length`` by at least 4. Checked by the
    configuration (before any file is read), by the feature builder and by the served ``answer``."""
    if max_length < max_query_length + 4:
        return [f"max_seq_length ({max_length}) must exceed max_query_length ({max_query_length}) by at least 4 "
                "(<sep>, <sep>, <cls> and one context piece)"]
    return []


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
    """The named fine-tuning preset."""
    return named_preset(FINETUNE_PRESETS, name)


@dataclasses.dataclass(frozen=True)
class FieldNames:
    """Column or key names of classification / regression files, and their format
    (TensorFlow-free: `xlnet finetune --help` shows the defaults)."""

    text: str = "text"
    text_b: str = "text_b"
    label: str = "label"
    file_format: str | None = None  # None: from the extension
