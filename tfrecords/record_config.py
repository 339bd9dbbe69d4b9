"""Shape of XLNet records and of their span masks: the configuration both halves share.

`xlnet preprocess` builds records with it (pipeline/records.py) and stores it whole in the
manifest; the reader rebuilds it from the manifest to resample span masks per epoch
(tfrecords/reader.py). The rules it encodes are described in pipeline/records.py (record
layout) and tfrecords/span_masking.py (span masks).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from tfrecords.errors import UsageError


class ConfigError(UsageError):
    """An impossible preprocessing configuration; the message names the flag(s)."""


def record_parts(seq_len: int, reuse_len: int) -> tuple[tuple[str, int], tuple[str, int]]:
    """The two parts of a record, in order, as (name, length): the memory-reuse context (its first
    ``reuse_len`` positions) and the A/B part (the ``seq_len - reuse_len`` after it, ``<cls>`` last).
    The factorisation order permutes each part on its own (trainer/models/permutation.py)."""
    return ("reuse_len", reuse_len), ("seq_len - reuse_len", seq_len - reuse_len)


def undivided_parts(seq_len: int, reuse_len: int, perm_size: int) -> list[tuple[str, int]]:
    """The parts of a record that ``perm_size`` (>= 1) does not split into whole permutation blocks,
    as (name, length): the memory-reuse context (``reuse_len``) and the A/B part
    (``seq_len - reuse_len``), in that order; empty when both split. A permutation block never
    straddles the two parts, so the data (``xlnet preprocess``), the training configuration and the
    on-device permutation builder (trainer/models/permutation.py) all refuse a non-empty answer."""
    return [(name, length) for name, length in record_parts(seq_len, reuse_len) if length % perm_size]


@dataclass(frozen=True)
class RecordConfig:
    """Shape of the records and of their span masks."""

    seq_len: int = 512
    reuse_len: int = 256
    num_predict: int = 85
    perm_size: int | None = None  # permutation block size the data must allow; None -> reuse_len
    mask_alpha: int = 6
    mask_beta: int = 1
    max_gram: int = 5
    subword_spans: bool = False

    @property
    def ab_len(self) -> int:
        """Tokens available for A and B together."""
        return self.seq_len - self.reuse_len - 3

    @property
    def context_budget(self) -> int:
        return math.ceil(self.num_predict / 2) if self.reuse_len > 0 else 0

    @property
    def ab_budget(self) -> int:
        return self.num_predict - self.context_budget

    @property
    def effective_perm_size(self) -> int:
        return self.perm_size if self.perm_size is not None else self.reuse_len

    def validate(self) -> None:
        """Raises ConfigError naming the flag for any configuration that cannot produce records."""
        if self.seq_len < 1:
            raise ConfigError(f"--seq-len must be positive, got {self.seq_len}")
        if not 0 <= self.reuse_len < self.seq_len:
            raise ConfigError(f"--reuse-len must be in [0, --seq-len), got {self.reuse_len} with --seq-len {self.seq_len}")
        if self.ab_len < 2:
            raise ConfigError(
                f"--seq-len {self.seq_len} is too short for A/B segments with --reuse-len {self.reuse_len}: "
                f"seq_len - reuse_len - 3 = {self.ab_len} tokens remain for A and B, at least 2 are needed")
        perm = self.effective_perm_size
        if perm < 1:
            raise ConfigError(f"--perm-size must be positive, got {perm}")
        if undivided_parts(self.seq_len, self.reuse_len, perm):
            raise ConfigError(
                f"--perm-size {perm} must divide both --reuse-len {self.reuse_len} and "
                f"seq_len - reuse_len = {self.seq_len - self.reuse_len} (permutation blocks cannot straddle parts)")
        if self.num_predict < 1:
            raise ConfigError(f"--num-predict must be positive, got {self.num_predict}")
        if self.context_budget > self.reuse_len or self.ab_budget > self.ab_len:
            raise ConfigError(
                f"--num-predict {self.num_predict} is too large for --seq-len {self.seq_len} / --reuse-len "
                f"{self.reuse_len}: its halves {self.context_budget} (context) and {self.ab_budget} (A/B) must fit "
                f"in {self.reuse_len} context and {self.ab_len} A/B positions")
        if self.mask_beta < 1 or self.mask_alpha < self.mask_beta:
            raise ConfigError(f"--mask-alpha ({self.mask_alpha}) must be >= --mask-beta ({self.mask_beta}) >= 1")
        if self.max_gram < 1:
            raise ConfigError(f"--max-gram must be >= 1, got {self.max_gram}")

    def to_dict(self) -> dict:
        values = asdict(self)
        values["perm_size"] = self.effective_perm_size
        return values

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "RecordConfig":
        """The record fields of a larger mapping (e.g. a manifest's whole preprocess config)."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})
