"""Training configuration: one frozen dataclass for how to train, presets by name, overrides.

The model architecture lives in trainer/config.py (ModelConfig); this module holds the data
shapes the trainer feeds (seq_len, num_predict, perm_size), batch sizes, the step budget,
the optimizer and schedule, precision, and the checkpoint / evaluation / logging cadence.

Both configurations are resolved the same way, lowest to highest precedence:
preset -> ``--config FILE`` (JSON ``{"model": {...}, "train": {...}}``) -> ``--set key=value``.
A ``--set`` key is ``model.NAME``, ``train.NAME`` or a bare NAME that exists in exactly one of
the two configurations.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from trainer.config import MODEL_PRESETS, JsonConfig, ModelConfig, model_preset

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
DECAYS = ("linear", "cosine")


@dataclasses.dataclass(frozen=True)
class LoopConfig(JsonConfig):
    """What the controller (trainer/controller.py) needs of any task: batch, steps, optimizer and
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

    CONFIG_KIND = "training"
    POSITIVE = ("train_batch_size", "eval_batch_size", "train_steps", "steps_per_loop", "accumulation_steps",
                "checkpoint_every", "keep_checkpoints")
    NON_NEGATIVE = ("warmup_steps", "eval_every", "weight_decay", "end_learning_rate", "clip_norm")

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"invalid {self.CONFIG_KIND} config: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Every invalid field value, described (subclasses add their own)."""
        problems = [f"{name} must be positive, got {getattr(self, name)}" for name in self.POSITIVE
                    if getattr(self, name) <= 0]
        problems += [f"{name} must be >= 0, got {getattr(self, name)}" for name in self.NON_NEGATIVE
                     if getattr(self, name) < 0]
        if self.learning_rate <= 0:
            problems.append(f"learning_rate must be positive, got {self.learning_rate}")
        if self.decay not in DECAYS:
            problems.append(f"decay must be one of {', '.join(DECAYS)}, got {self.decay!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        return problems

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

    POSITIVE = LoopConfig.POSITIVE + ("seq_len", "num_predict", "perm_size", "eval_steps")

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.num_predict > self.seq_len:
            problems.append(f"num_predict ({self.num_predict}) exceeds seq_len ({self.seq_len})")
        return problems

    def check_model(self, model: ModelConfig) -> None:
        """Raises ValueError naming every inconsistency between this and the model config."""
        problems = []
        if not 0 < model.reuse_len < self.seq_len:
            problems.append(f"model.reuse_len ({model.reuse_len}) must be in (0, train.seq_len={self.seq_len})")
        elif model.reuse_len % self.perm_size or (self.seq_len - model.reuse_len) % self.perm_size:
            problems.append(f"train.perm_size ({self.perm_size}) must divide model.reuse_len ({model.reuse_len}) "
                            f"and seq_len - reuse_len ({self.seq_len - model.reuse_len})")
        if model.bi_data and (self.train_batch_size % 2 or self.eval_batch_size % 2):
            problems.append("bi_data needs even train_batch_size and eval_batch_size (forward + backward halves)")
        if problems:
            raise ValueError("training config does not fit the model config: " + "; ".join(problems))


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
    """Returns the named training preset with a clear error for unknown names."""
    try:
        return TRAIN_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(TRAIN_PRESETS)}") from None


def _field_types(cls) -> dict[str, type]:
    return {f.name: type(f.default) for f in dataclasses.fields(cls)}


def _convert(text: str, kind: type, key: str) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"--set {key}={text}: expected true or false")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"--set {key}={text}: expected a {kind.__name__}") from None


def parse_overrides(items: Iterable[str], config_class: type = None,
                    scope_name: str = "train") -> tuple[dict[str, Any], dict[str, Any]]:
    """Parses ``--set`` items into (model changes, changes of ``config_class``), typed by the
    dataclass fields. ``config_class`` (TrainConfig by default) is addressed as
    ``<scope_name>.NAME``; either configuration's fields may also be given as a bare NAME."""
    config_class = config_class or TrainConfig
    model_types, other_types = _field_types(ModelConfig), _field_types(config_class)
    kind = config_class.__name__
    model_changes: dict[str, Any] = {}
    other_changes: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        scope, _, name = key.strip().rpartition(".")
        if scope == "model" or (not scope and name in model_types and name not in other_types):
            if name not in model_types:
                raise ValueError(f"--set {key}: ModelConfig has no field {name!r}")
            model_changes[name] = _convert(value, model_types[name], key)
        elif scope == scope_name or (not scope and name in other_types and name not in model_types):
            if name not in other_types:
                raise ValueError(f"--set {key}: {kind} has no field {name!r}")
            other_changes[name] = _convert(value, other_types[name], key)
        elif not scope and name in model_types and name in other_types:
            raise ValueError(f"--set {key}: ambiguous, write model.{name} or {scope_name}.{name}")
        else:
            raise ValueError(f"--set {key}: no such field in ModelConfig or {kind} "
                             f"(use model.NAME or {scope_name}.NAME)")
    return model_changes, other_changes


def load_config_file(path: str, scope_name: str = "train") -> tuple[dict[str, Any], dict[str, Any]]:
    """Reads a ``--config`` JSON file ``{"model": {...}, "<scope_name>": {...}}`` (local or gs://)."""
    from trainer.storage import StorageError, read_json

    try:
        values = read_json(path)
    except StorageError as error:
        raise ValueError(f"--config {error}") from None
    if not isinstance(values, dict) or set(values) - {"model", scope_name}:
        raise ValueError(f"--config {path}: expected a JSON object with keys 'model' and/or '{scope_name}'")
    return dict(values.get("model", {})), dict(values.get(scope_name, {}))


def resolve_model_and(model: ModelConfig, other: JsonConfig, config_file: str | None, overrides: Iterable[str],
                      scope_name: str) -> tuple[ModelConfig, Any, set[str]]:
    """Applies ``--config FILE`` then ``--set`` items over a model config and a second config
    (TrainConfig or FinetuneConfig, addressed as ``scope_name``); returns both and the model
    keys set explicitly."""
    model_values, other_values = model.to_dict(), other.to_dict()
    explicit: set[str] = set()
    if config_file:
        file_model, file_other = load_config_file(config_file, scope_name)
        model_values.update(file_model)
        other_values.update(file_other)
        explicit |= set(file_model)
    set_model, set_other = parse_overrides(overrides, type(other), scope_name)
    model_values.update(set_model)
    other_values.update(set_other)
    explicit |= set(set_model)
    return ModelConfig.from_dict(model_values), type(other).from_dict(other_values), explicit


def resolve_configs(preset: str, config_file: str | None = None, overrides: Iterable[str] = (),
                    base_model: ModelConfig | None = None) -> tuple[ModelConfig, TrainConfig, set[str]]:
    """Resolves preset -> config file -> overrides into (ModelConfig, TrainConfig, explicit model keys).

    ``base_model`` (for example the config of an --init-checkpoint) replaces the model preset.
    The returned key set names the model fields the user set explicitly, so a caller can tell
    a deliberate value from a preset default (the vocabulary size, for instance).
    """
    model, train, explicit = resolve_model_and(base_model or model_preset(preset), train_preset(preset),
                                               config_file, overrides, "train")
    train.check_model(model)
    return model, train, explicit
