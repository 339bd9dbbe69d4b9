"""Model configuration: one frozen dataclass for the XLNet architecture, presets by name."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from tfrecords.errors import UsageError

FF_ACTIVATIONS = ("gelu", "gelu_exact", "relu")  # trainer/layers/feed_forward.py ACTIVATIONS


class JsonConfig:
    """The dict round trip every frozen configuration dataclass shares (each is saved as JSON next to
    the outputs it made; trainer/runtime/model_dir.py reads and writes those files).

    Subclasses are frozen dataclasses; ``CONFIG_KIND`` names them in error messages.
    """

    CONFIG_KIND = "config"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown {cls.CONFIG_KIND} config keys: {', '.join(unknown)}")
        return cls(**values)

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
        if self.mem_len < 0 or self.reuse_len < 0:
            problems.append("mem_len and reuse_len must be >= 0")
        if problems:
            raise UsageError("invalid model config: " + "; ".join(problems))



def sequence_model_config(config: ModelConfig) -> ModelConfig:
    """The architecture for whole sequences (serving, fine-tuning): same weights, no bi_data, no memory.

    bi_data only changes the relative positions of the backward half of a pretraining batch
    (and would require an even batch); a request or a fine-tuning example is encoded on its
    own, so there is no memory to carry either.
    """
    return config.replace(bi_data=False, mem_len=0)

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
