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
class TrainConfig(JsonConfig):
    """How to train: data shapes, batch, steps, optimizer, precision, cadence, seed.

    Batch sizes are GLOBAL (summed over replicas and workers) and count rows of one
    micro-step; with ``accumulation_steps`` > 1 one optimizer step sees
    ``train_batch_size * accumulation_steps`` records. With bi_data half of the rows are
    backward streams, so the batch must be even per replica.
    """

    seq_len: int = 512
    num_predict: int = 85
    perm_size: int = 256
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
    eval_steps: int = 100
    resample_masks: bool = False  # new span masks each epoch from the stored word-start flags
    seed: int = 0
    # Bit-identical losses from run to run: deterministic kernels and one CPU thread per op and
    # between ops (multi-threaded kernels add up partial sums in an order that varies with the
    # scheduling; the differences, ~1e-7 per step, grow over thousands of steps). Slower.
    deterministic: bool = False

    CONFIG_KIND = "training"

    def __post_init__(self) -> None:
        problems = []
        for name in ("seq_len", "num_predict", "perm_size", "train_batch_size", "eval_batch_size",
                     "train_steps", "steps_per_loop", "accumulation_steps", "checkpoint_every",
                     "keep_checkpoints", "eval_steps"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("warmup_steps", "eval_every", "weight_decay", "end_learning_rate", "clip_norm"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            problems.append(f"learning_rate must be positive, got {self.learning_rate}")
        if self.num_predict > self.seq_len:
            problems.append(f"num_predict ({self.num_predict}) exceeds seq_len ({self.seq_len})")
        if self.decay not in DECAYS:
            problems.append(f"decay must be one of {', '.join(DECAYS)}, got {self.decay!r}")
        if self.precision not in PRECISIONS:
            problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if problems:
            raise ValueError("invalid training config: " + "; ".join(problems))

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

    @property
    def examples_per_step(self) -> int:
        """Records consumed by one optimizer step (all replicas, all micro-steps)."""
        return self.train_batch_size * self.accumulation_steps


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


def parse_overrides(items: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parses ``--set`` items into (model changes, train changes), typed by the dataclass fields."""
    model_types, train_types = _field_types(ModelConfig), _field_types(TrainConfig)
    model_changes: dict[str, Any] = {}
    train_changes: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        scope, _, name = key.strip().rpartition(".")
        if scope == "model" or (not scope and name in model_types and name not in train_types):
            if name not in model_types:
                raise ValueError(f"--set {key}: ModelConfig has no field {name!r}")
            model_changes[name] = _convert(value, model_types[name], key)
        elif scope == "train" or (not scope and name in train_types and name not in model_types):
            if name not in train_types:
                raise ValueError(f"--set {key}: TrainConfig has no field {name!r}")
            train_changes[name] = _convert(value, train_types[name], key)
        elif not scope and name in model_types and name in train_types:
            raise ValueError(f"--set {key}: ambiguous, write model.{name} or train.{name}")
        else:
            raise ValueError(f"--set {key}: no such field in ModelConfig or TrainConfig "
                             "(use model.NAME or train.NAME)")
    return model_changes, train_changes


def load_config_file(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Reads a ``--config`` JSON file ``{"model": {...}, "train": {...}}`` (local or gs://)."""
    from trainer.storage import StorageError, read_json

    try:
        values = read_json(path)
    except StorageError as error:
        raise ValueError(f"--config {error}") from None
    if not isinstance(values, dict) or set(values) - {"model", "train"}:
        raise ValueError(f"--config {path}: expected a JSON object with keys 'model' and/or 'train'")
    return dict(values.get("model", {})), dict(values.get("train", {}))


def resolve_configs(preset: str, config_file: str | None = None, overrides: Iterable[str] = (),
                    base_model: ModelConfig | None = None) -> tuple[ModelConfig, TrainConfig, set[str]]:
    """Resolves preset -> config file -> overrides into (ModelConfig, TrainConfig, explicit model keys).

    ``base_model`` (for example the config of an --init-checkpoint) replaces the model preset.
    The returned key set names the model fields the user set explicitly, so a caller can tell
    a deliberate value from a preset default (the vocabulary size, for instance).
    """
    model_values = (base_model or model_preset(preset)).to_dict()
    train_values = train_preset(preset).to_dict()
    explicit: set[str] = set()
    if config_file:
        file_model, file_train = load_config_file(config_file)
        model_values.update(file_model)
        train_values.update(file_train)
        explicit |= set(file_model)
    set_model, set_train = parse_overrides(overrides)
    model_values.update(set_model)
    train_values.update(set_train)
    explicit |= set(set_model)
    model, train = ModelConfig.from_dict(model_values), TrainConfig.from_dict(train_values)
    train.check_model(model)
    return model, train, explicit
