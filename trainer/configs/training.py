"""Training configuration: one frozen dataclass for how to train, presets by name, overrides.

The model architecture lives in trainer/models/config.py (ModelConfig); this module holds the data
shapes the trainer feeds (seq_len, num_predict, perm_size), batch sizes, the step budget,
the optimizer and schedule, precision, and the checkpoint / evaluation / logging cadence.

Both configurations are resolved the same way, lowest to highest precedence:
preset -> ``--config FILE`` (JSON ``{"model": {...}, "train": {...}}``) -> ``--set key=value``.
A ``--set`` key is ``model.NAME``, ``train.NAME`` or a bare NAME that exists in exactly one of
the two configurations.
"""
from __future__ import annotations

import dataclasses
import re

from tfrecords.errors import UsageError
from tfrecords.record_config import undivided_parts
from trainer.models.config import MODEL_PRESETS, InvalidConfigError, JsonConfig, ModelConfig, named_preset

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
DECAYS = ("linear", "cosine")
# What the backward pass recomputes instead of keeping (docs/training.md, "Fitting a model on your device"):
# nothing; each layer's attention (scores, position and segment terms, probabilities, their dropout);
# or each whole layer, keeping only its inputs (the content and query streams).
REMAT_MODES = ("none", "attention", "full")


def profile_window(text: str) -> tuple[int, int] | None:
    """The (START, END) steps of a ``START:END`` profile window, None unless 1 <= START <= END."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return (first, last) if 1 <= first <= last else None


@dataclasses.dataclass(frozen=True)
class LoopConfig(JsonConfig):
    """What the controller (trainer/runtime/controller.py) needs of any task: batch, steps, optimizer and
    schedule, precision, checkpoint / evaluation / logging cadence, seed.

    Batch sizes are GLOBAL (summed over replicas and workers) and count rows of one
    micro-step; with ``accumulation_steps`` > 1 one optimizer step sees
    ``train_batch_size * accumulation_steps`` examples.
    """

    train_batch_size: int = 32
    eval_batch_size: int = 32
    train_steps: int = 500_000
    steps_per_loop: int = 100
    accumulation_steps: int = 1
    learning_rate: float = 4e-4
    end_learning_rate: float = 0.0
    warmup_steps: int = 40_000
    decay: str = "linear"  # "linear" or "cosine" after the linear warm-up
    weight_decay: float = 0.01
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.999
    adam_epsilon: float = 1e-6
    clip_norm: float = 1.0
    precision: str = "float32"  # "float32", "mixed_bfloat16" or "mixed_float16" (loss scaling)
    jit_compile: bool = False
    checkpoint_every: int = 1000
    keep_checkpoints: int = 5
    eval_every: int = 5000  # 0 disables periodic evaluation
    seed: int = 0
    # Bit-identical losses from run to run: deterministic kernels and one CPU thread per op and
    # between ops (multi-threaded kernels add up partial sums in an order that varies with the
    # scheduling; the differences, ~1e-7 per step, grow over thousands of steps). Slower.
    deterministic: bool = False
    remat: str = "none"  # "none", "attention" or "full": what the backward pass recomputes instead of keeping
    # Before building, shrink the micro-batch (raising accumulation_steps, same global batch) and pick a
    # remat mode until the planned peak fits the device's memory (trainer/planning/).
    auto_fit: bool = False
    # Checkpoints written by a background thread while the next steps run (trainer/runtime/checkpoint_writer.py):
    # a save waits only for the write before it, and the run for its last checkpoint.
    async_checkpoint: bool = False
    # Steps traced by TensorFlow's profiler, "START:END" (1-based, both included), into
    # tensorboard/train/plugins/profile/ where TensorBoard's profile plugin reads them; "" traces nothing.
    profile_steps: str = ""
    # How long SIGTERM / Ctrl-C waits for the running loop of steps to end (then a checkpoint is saved);
    # a loop still running then is given up, the run saving nothing more (trainer/runtime/preemption.py).
    preemption_grace_seconds: float = 20.0

    CONFIG_KIND = "training"
    POSITIVE = ("train_batch_size", "eval_batch_size", "train_steps", "steps_per_loop", "accumulation_steps",
                "checkpoint_every", "keep_checkpoints")
    NON_NEGATIVE = ("warmup_steps", "eval_every", "weight_decay", "end_learning_rate", "clip_norm",
                    "preemption_grace_seconds")

    def __post_init__(self) -> None:
        self.check_field_types()
        problems = self.problems()
        if problems:
            raise InvalidConfigError(self.CONFIG_KIND, problems)

    def problems(self) -> list[str]:
        """Every invalid field value, described (subclasses add their own)."""
        problems = [f"{name} must be positive, got {getattr(self, name)}" for name in self.POSITIVE
                    if getattr(self, name) <= 0]
        problems += [f"{name} must be >= 0, got {getattr(self, name)}" for name in self.NON_NEGATIVE
                     if getattr(self, name) < 0]
        if self.learning_rate <= 0:
            problems.append(f"learning_rate must be positive, got {self.learning_rate}")
        if self.adam_epsilon <= 0:
            problems.append(f"adam_epsilon must be positive, got {self.adam_epsilon}")
        for name in ("adam_beta_1", "adam_beta_2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.decay not in DECAYS:
            problems.append(f"decay must be one of {', '.join(DECAYS)}, got {self.decay!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.remat not in REMAT_MODES:
            problems.append(f"remat must be one of {', '.join(REMAT_MODES)}, got {self.remat!r}")
        if self.profile_steps and profile_window(self.profile_steps) is None:
            problems.append(f"profile_steps must be START:END, whole steps with 1 <= START <= END (e.g. 100:105), "
                            f"got {self.profile_steps!r}")
        elif self.profile_steps and profile_window(self.profile_steps)[0] > self.train_steps > 0:
            problems.append(f"profile_steps {self.profile_steps} starts after the run's last step (train_steps "
                            f"{self.train_steps}): nothing would be traced; choose a START of at most {self.train_steps}")
        return problems

    @property
    def profile_window(self) -> tuple[int, int] | None:
        """(first, last) step the profiler traces, both included; None when nothing is traced."""
        return profile_window(self.profile_steps) if self.profile_steps else None

    @property
    def examples_per_step(self) -> int:
        """Examples consumed by one optimizer step (all replicas, all micro-steps)."""
        return self.train_batch_size * self.accumulation_steps


@dataclasses.dataclass(frozen=True)
class TrainConfig(LoopConfig):
    """How to pretrain: the loop's settings plus the data shapes the reader feeds.

    With bi_data half of the rows are backward streams, so the batch must be even per replica.
    """

    seq_len: int = 512
    num_predict: int = 85
    perm_size: int = 256
    eval_steps: int = 100
    resample_masks: bool = False  # new span masks each epoch from the stored word-start flags
    # The data directories of a mixture and their normalised weights, ((directory, weight), ...), as
    # `xlnet train --data ... --mixture-weights ...` gave them; empty for one --data. Saved so that a
    # resume with another mixture (which would read other batches) is refused.
    mixture: tuple[tuple[str, float], ...] = ()

    POSITIVE = LoopConfig.POSITIVE + ("seq_len", "num_predict", "perm_size", "eval_steps")
    # Fields set by a command's flags, not by --set.
    FLAG_ONLY = {"mixture": "--data and --mixture-weights"}

    def __post_init__(self) -> None:
        self.check_field_types()  # before the mixture is converted
        # JSON gives lists; the frozen config holds tuples, so that configs read back compare equal.
        object.__setattr__(self, "mixture", tuple((str(name), float(weight)) for name, weight in self.mixture))
        super().__post_init__()

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.num_predict > self.seq_len:
            problems.append(f"num_predict ({self.num_predict}) exceeds seq_len ({self.seq_len})")
        weights = [weight for _, weight in self.mixture]
        if weights and (min(weights) <= 0 or abs(sum(weights) - 1.0) > 1e-6):
            problems.append(f"mixture weights must be positive and sum to 1, got {weights}")
        return problems

    def check_model(self, model: ModelConfig) -> None:
        """Raises UsageError (a ValueError) naming every inconsistency between this and the model config."""
        problems = []
        if not 0 < model.reuse_len < self.seq_len:
            problems.append(f"model.reuse_len ({model.reuse_len}) must be in (0, train.seq_len={self.seq_len})")
        elif undivided_parts(self.seq_len, model.reuse_len, self.perm_size):
            problems.append(f"train.perm_size ({self.perm_size}) must divide model.reuse_len ({model.reuse_len}) "
                            f"and seq_len - reuse_len ({self.seq_len - model.reuse_len})")
        if model.bi_data and (self.train_batch_size % 2 or self.eval_batch_size % 2):
            problems.append("bi_data needs even train_batch_size and eval_batch_size (forward + backward halves)")
        if problems:
            raise UsageError("training config does not fit the model config: " + "; ".join(problems))


# Same names as MODEL_PRESETS. tiny matches the bundled corpus (seq_len 128, reuse_len 64,
# num_predict 21) and trains on two CPU cores; base and large follow the paper's table.
TRAIN_PRESETS: dict[str, TrainConfig] = {
    "tiny": TrainConfig(seq_len=128, num_predict=21, perm_size=64, train_batch_size=16, eval_batch_size=16,
                        train_steps=1000, steps_per_loop=50, learning_rate=1e-3, warmup_steps=100,
                        checkpoint_every=200, eval_every=500, eval_steps=20),
    "base": TrainConfig(seq_len=512, num_predict=85, perm_size=256, train_batch_size=2048,
                        eval_batch_size=256, train_steps=500_000, learning_rate=4e-4, warmup_steps=40_000),
    "large": TrainConfig(seq_len=512, num_predict=85, perm_size=256, train_batch_size=8192,
                         eval_batch_size=256, train_steps=500_000, learning_rate=4e-4, warmup_steps=40_000),
}
assert set(TRAIN_PRESETS) == set(MODEL_PRESETS), "train and model presets must share their names"


def train_preset(name: str) -> TrainConfig:
    """The named pretraining preset."""
    return named_preset(TRAIN_PRESETS, name)
