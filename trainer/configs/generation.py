"""How `xlnet generate` continues a prompt: one frozen dataclass, its defaults the command's.

The factorisation, the cache and the sampling are trainer/models/generation.py's; this is what a
run chooses.
"""
from __future__ import annotations

import dataclasses

from trainer.models.config import MAX_NEW_TOKENS_CAP, InvalidConfigError, JsonConfig


@dataclasses.dataclass(frozen=True)
class GenerateConfig(JsonConfig):
    """Length, sampling and cache of a generation.

    temperature 0 is greedy decoding; above 0, tokens are sampled from softmax(logits /
    temperature) restricted to ``top_k`` and ``top_p`` (trainer/models/generation.choose_tokens),
    the noise a hash of (seed, step, token): the same seed gives the same text.
    """

    max_new_tokens: int = dataclasses.field(default=64, metadata={
        "help": "tokens to generate at most per prompt (a row stops earlier at <eod> or <eos>)"})
    temperature: float = dataclasses.field(default=0.0, metadata={
        "help": "sampling temperature; 0: greedy (the most likely token)"})
    top_k: int = dataclasses.field(default=0, metadata={"help": "sample among the k most likely tokens; 0: all"})
    top_p: float = dataclasses.field(default=1.0, metadata={
        "help": "sample among the most likely tokens whose probability reaches p (nucleus); 1: all"})
    seed: int = dataclasses.field(default=0, metadata={"help": "sampling seed"})
    mem_len: int = dataclasses.field(default=-1, metadata={
        "help": "positions of the key/value cache; once the prompt and the new tokens exceed it the oldest fall "
                "out; -1: the model's mem_len, or the whole prompt and continuation for a model without one; a "
                "cache that would not fit this machine's memory is refused, naming the largest that fits"})

    CONFIG_KIND = "generation"

    def __post_init__(self) -> None:
        self.check_field_types()
        problems = []
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS_CAP:
            problems.append(f"max_new_tokens must be in 1..{MAX_NEW_TOKENS_CAP}, got {self.max_new_tokens}")
        if self.temperature < 0:
            problems.append(f"temperature must be >= 0 (0: greedy), got {self.temperature}")
        if self.top_k < 0:
            problems.append(f"top_k must be >= 0 (0: no limit), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.mem_len < 1 and self.mem_len != -1:
            problems.append(f"mem_len must be -1 (the model's) or >= 1, got {self.mem_len}")
        if problems:
            raise InvalidConfigError(self.CONFIG_KIND, problems)

    def resolved_mem_len(self, model_mem_len: int, prompt_length: int) -> int:
        """The cache size: ``mem_len``; for -1 the model's, or ``prompt_length + max_new_tokens``
        (nothing falls out) for a model without memory."""
        if self.mem_len != -1:
            return self.mem_len
        return model_mem_len if model_mem_len > 0 else prompt_length + self.max_new_tokens
