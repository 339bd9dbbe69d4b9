"""Model configuration: one frozen dataclass for the XLNet architecture, presets by name."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import typing
from typing import Any, Mapping

from tfrecords.errors import UsageError

FF_ACTIVATIONS = ("gelu", "gelu_exact", "relu")  # trainer/layers/feed_forward.py ACTIVATIONS
# The largest max_new_tokens the generate signature and `xlnet generate` accept (trainer/models/generation.py),
# here so that the generation settings are checked without TensorFlow (before `xlnet generate` loads it).
MAX_NEW_TOKENS_CAP = 4096


class InvalidConfigError(UsageError):
    """A configuration with values it cannot take; ``problems`` lists them, each starting with the
    field it is about (so that a caller that knows where each field was set can say so)."""

    def __init__(self, kind: str, problems: list[str]):
        super().__init__(f"invalid {kind} config: " + "; ".join(problems))
        self.kind, self.problems = kind, list(problems)


def expected_type(kind: Any) -> str:
    """A field type in words, as an error message says what a value should have been."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        return "true or false"
    if kind is int:
        return "an integer"
    if kind is float:
        return "a finite number"
    if kind is str:
        return "a string"
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"a list, each {expected_type(args[0])}"
    if origin is tuple:
        return f"a list [{', '.join(expected_type(arg) for arg in args)}]"
    return getattr(kind, "__name__", str(kind))


def has_type(value: Any, kind: Any) -> bool:
    """Whether ``value`` (as JSON or a command line gives it) is a ``kind``: bool is not a number, an
    integer is a float, a float must be finite, a tuple may come as a JSON list."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return (isinstance(value, numbers.Real) and not isinstance(value, bool)
                and math.isfinite(value))
    if kind is str:
        return isinstance(value, str)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(has_type(item, args[0]) for item in value)
        return len(value) == len(args) and all(has_type(item, arg) for item, arg in zip(value, args))
    return True  # a type this check does not know: left to the config's own validation


def shown(value: Any) -> str:
    """A value as the JSON of a --config file writes it ("two", true, 2.7, NaN)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The declared type of every field of the dataclass ``cls`` (annotations resolved)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def type_problems(cls: type, values: Mapping[str, Any]) -> list[str]:
    """``NAME: expected TYPE, got VALUE`` for every value in ``values`` that is not of its field's
    type (unknown names are left to the caller)."""
    types = field_types(cls)
    return [f"{name}: expected {expected_type(types[name])}, got {shown(value)}"
            for name, value in values.items() if name in types and not has_type(value, types[name])]


def with_origin(problem: str, origins: Mapping[str, str] | None) -> str:
    """``problem`` (which starts with the field it is about) followed by where that field was set."""
    field = problem.split(" ", 1)[0].rstrip(":,")
    origin = (origins or {}).get(field)
    return f"{problem} (set by {origin})" if origin else problem


class JsonConfig:
    """The dict round trip every frozen configuration dataclass shares (each is saved as JSON next to
    the outputs it made; trainer/runtime/model_dir.py reads and writes those files).

    Subclasses are frozen dataclasses; ``CONFIG_KIND`` names them in error messages.
    """

    CONFIG_KIND = "config"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], origins: Mapping[str, str] | None = None):
        """The config of ``values`` (JSON: a field's tuples may be lists), every value checked against
        its field's declared type before anything else (bool is not a number; an integer is a float;
        floats are finite). ``origins`` (field -> where it was set, e.g. "--set n_layer=2") is named
        after each problem about that field."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown {cls.CONFIG_KIND} config keys: {', '.join(unknown)}")
        types = field_types(cls)
        problems = type_problems(cls, values)
        if problems:
            raise InvalidConfigError(cls.CONFIG_KIND, [with_origin(problem, origins) for problem in problems])
        values = {name: float(value) if types[name] is float else value for name, value in values.items()}
        try:
            return cls(**values)
        except InvalidConfigError as error:
            if not origins:
                raise
            problems = [with_origin(problem, origins) for problem in error.problems]
            raise InvalidConfigError(error.kind, problems) from None

    def check_field_types(self) -> None:
        """InvalidConfigError when a field holds a value of another type than declared (a config built
        in code, not through from_dict); run first by each config's validation."""
        problems = type_problems(type(self), {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if problems:
            raise InvalidConfigError(self.CONFIG_KIND, problems)

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class ModelConfig(JsonConfig):
    """Architecture of an XLNet network (everything needed to build its variables and graph).

    Sequence shapes that belong to the data (seq_len, num_predict, perm_size) live in the
    training configuration; ``reuse_len`` and ``mem_len`` are here because the network caches
    the first ``reuse_len`` positions of each segment and keeps the last ``mem_len`` as memory.
    """

    vocab_size: int = 32000
    n_layer: int = 12
    d_model: int = 768
    n_head: int = 12
    d_head: int = 64
    d_inner: int = 3072
    # "gelu" (tanh approximation, as the original), "gelu_exact" (erf: Hugging Face's "gelu") or "relu"
    ff_activation: str = "gelu"
    untie_r: bool = True
    dropout: float = 0.1
    dropatt: float = 0.1
    attn_type: str = "bi"  # "bi" (XLNet) or "uni" (Transformer-XL style)
    bi_data: bool = True
    clamp_len: int = -1  # -1: no clamping of relative distances
    mem_len: int = 384
    reuse_len: int = 256
    initializer_range: float = 0.02

    CONFIG_KIND = "model"

    def __post_init__(self) -> None:
        self.check_field_types()
        problems = []
        for name in ("vocab_size", "n_layer", "d_model", "n_head", "d_head", "d_inner"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        if self.ff_activation not in FF_ACTIVATIONS:
            problems.append(f"ff_activation must be one of {', '.join(FF_ACTIVATIONS)}, got {self.ff_activation!r}")
        if self.attn_type not in ("bi", "uni"):
            problems.append(f"attn_type must be 'bi' or 'uni', got {self.attn_type!r}")
        for name in ("dropout", "dropatt"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("mem_len", "reuse_len"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.clamp_len < -1:
            problems.append(f"clamp_len must be -1 (no clamping) or >= 0, got {self.clamp_len}")
        if self.initializer_range <= 0:
            problems.append(f"initializer_range must be positive, got {self.initializer_range}")
        if problems:
            raise InvalidConfigError(self.CONFIG_KIND, problems)



def sequence_model_config(config: ModelConfig, mem_len: int = 0) -> ModelConfig:
    """The architecture for whole sequences (serving, fine-tuning): same weights, no bi_data, and no
    memory unless a text is read over several segments.

    bi_data only changes the relative positions of the backward half of a pretraining batch
    (and would require an even batch); a request or a fine-tuning example is encoded on its
    own. ``mem_len`` 0: one segment per text, nothing to carry. ``mem_len`` > 0: a text read over
    several segments (``XLNetNetwork.encode_segments``, fine-tuning's ``max_segments``) keeps the
    last ``mem_len`` states of the segments before, every position of a segment cached
    (reuse_len 0: consecutive segments do not overlap, as pretraining records do).
    """
    if mem_len < 0:
        raise InvalidConfigError("model", [f"mem_len must be >= 0, got {mem_len}"])
    if mem_len == 0:
        return config.replace(bi_data=False, mem_len=0)
    return config.replace(bi_data=False, mem_len=mem_len, reuse_len=0)

# The reference table (XLNet paper / released models) for base and large; tiny is ours,
# small enough to train on two CPU cores in minutes for tests and the demo.
MODEL_PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(vocab_size=8000, n_layer=4, d_model=128, n_head=4, d_head=32, d_inner=512,
                        mem_len=64, reuse_len=64),
    "base": ModelConfig(vocab_size=32000, n_layer=12, d_model=768, n_head=12, d_head=64, d_inner=3072,
                        mem_len=384, reuse_len=256),
    "large": ModelConfig(vocab_size=32000, n_layer=24, d_model=1024, n_head=16, d_head=64, d_inner=4096,
                         mem_len=384, reuse_len=256),
}


def named_preset(presets: Mapping[str, Any], name: str) -> Any:
    """``presets[name]``, or a ValueError naming the presets there are (every preset table shares
    the names tiny, base and large)."""
    try:
        return presets[name]
    except KeyError:
        raise UsageError(f"unknown preset {name!r}; choose one of {', '.join(presets)}") from None


def model_preset(name: str) -> ModelConfig:
    """The named architecture ('tiny', 'base', 'large')."""
    return named_preset(MODEL_PRESETS, name)
