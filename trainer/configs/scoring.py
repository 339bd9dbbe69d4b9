"""How `xlnet score` reads text: one frozen dataclass, its defaults the command's.

The factorisation and the memory are trainer/models/scoring.py's; this is what a run chooses.
"""
from __future__ import annotations

import dataclasses

from trainer.models.config import InvalidConfigError, JsonConfig


@dataclasses.dataclass(frozen=True)
class ScoreConfig(JsonConfig):
    """Segments, memory and context of natural-order scoring.

    Each document is read as ``[<eod>] + its tokens + [<eod>]`` with ``eod`` (what surrounds a
    document in the pretraining streams, `xlnet preprocess --eod`): the leading ``<eod>`` is the
    context, then the first ``context_length`` tokens of the document are context too (not
    scored); everything after, the closing ``<eod>`` included, is scored. The context must fit in
    the first segment.
    """

    segment_len: int = dataclasses.field(default=512, metadata={"help": "tokens per segment"})
    mem_len: int = dataclasses.field(default=-1, metadata={
        "help": "positions of memory each segment sees before it (Transformer-XL); -1: the model's mem_len"})
    context_length: int = dataclasses.field(default=0, metadata={
        "help": "leading tokens of each document that are context, seen but not scored"})
    batch_size: int = dataclasses.field(default=8, metadata={"help": "documents scored together"})
    eod: bool = dataclasses.field(default=True, metadata={
        "help": "put <eod> before each document (its context) and after it (scored), as the pretraining "
                "streams do"})

    CONFIG_KIND = "scoring"

    def __post_init__(self) -> None:
        self.check_field_types()
        problems = [f"{name} must be positive, got {getattr(self, name)}" for name in ("segment_len", "batch_size")
                    if getattr(self, name) <= 0]
        if self.mem_len < -1:
            problems.append(f"mem_len must be -1 (the model's) or >= 0, got {self.mem_len}")
        if self.context_length < 0:
            problems.append(f"context_length must be >= 0, got {self.context_length}")
        elif self.context_tokens > self.segment_len:
            problems.append(f"context_length {self.context_length} (plus <eod>) must fit in segment_len "
                            f"{self.segment_len}: the context is read whole, in the first segment")
        if self.context_tokens == 0:
            problems.append("context_length 0 without eod leaves the first token nothing to see: "
                            "give context_length >= 1 or keep eod")
        if problems:
            raise InvalidConfigError(self.CONFIG_KIND, problems)

    @property
    def context_tokens(self) -> int:
        """Tokens of context in front of the scored ones: the <eod> (with eod) and context_length."""
        return int(self.eod) + self.context_length

    def resolved_mem_len(self, model_mem_len: int) -> int:
        """The memory to read with: ``mem_len``, or the model's for -1."""
        return model_mem_len if self.mem_len == -1 else self.mem_len
