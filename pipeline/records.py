"""Building XLNet records from one text stream: A/B segments and span masks.

A record (see tfrecords/schema.py) is ``context + A + <sep> + B + <sep> + <cls>``, exactly
``seq_len`` tokens, where ``context`` is the ``reuse_len`` tokens at the record's start
position and consecutive records of a stream start ``reuse_len`` tokens apart.

A/B split (as the reference): from ``begin = start + reuse_len`` collect sentence cut
points while the span is shorter than ``ab_len = seq_len - reuse_len - 3``. With
probability 0.5, or when there is no cut point, B is a random span elsewhere in the
stream widened to sentence boundaries (label 0); otherwise A ends at a random cut point
and B continues it (label 1). The longer of A and B is trimmed from the right until
``len(A) + len(B) == ab_len``. The stream ends when fewer than ``seq_len`` tokens remain
or no A/B span fits.

Span masks: the ``num_predict`` budget is split between the context part
(``ceil(num_predict / 2)``: 43 of 85) and the A/B part (the rest: 42 of 85). Within a part,
n-grams with ``p(n) ~ 1/n`` for ``n <= max_gram`` are placed left to right, each in a window
of ``n * mask_alpha // mask_beta`` tokens at a random offset moved forward to a word start.
A span covers ``n`` whole words (pieces up to the ``n+1``-th word start); the
``subword_spans`` flag reproduces the original's behaviour of ``n`` pieces instead. Spans
never cover ``<sep>``/``<cls>``; a span that would exceed the remaining budget is shortened
by whole words (skipped if even one word is too long), so each part gets exactly its
budget, the shortfall being topped up with random single maskable tokens. Every record
therefore has exactly ``num_predict`` targets. For reversed streams (bi_data) masks are
sampled on the segment flipped back to reading order so that spans follow words, as the
original does.

All randomness comes from the ``numpy.random.Generator`` passed in, which the caller seeds
per (seed, split, stream): the records of a stream do not depend on the runner.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np

from tfrecords.schema import SEG_A, SEG_B, SEG_CLS


class ConfigError(ValueError):
    """An impossible preprocessing configuration; the message names the flag(s)."""


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
        if self.reuse_len % perm or (self.seq_len - self.reuse_len) % perm:
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


@dataclass
class Record:
    """One record before serialisation (arrays of length seq_len, int32)."""

    input_ids: np.ndarray
    segment_ids: np.ndarray
    is_masked: np.ndarray
    word_start: np.ndarray
    label: int
    stream_id: int
    stream_pos: int


class SpanMasker:
    """Samples span masks for one part of a record (see the module docstring)."""

    def __init__(self, config: RecordConfig):
        self._config = config
        probabilities = 1.0 / np.arange(1, config.max_gram + 1)
        self._cdf = np.cumsum(probabilities / probabilities.sum())
        self._cdf[-1] = 1.0

    def _draws(self, rng: np.random.Generator, count: int) -> tuple[list[int], list[float]]:
        grams = (np.searchsorted(self._cdf, rng.random(count), side="right") + 1).tolist()
        return grams, rng.random(count).tolist()

    def sample(self, word_start: np.ndarray, maskable: np.ndarray, goal: int, rng: np.random.Generator) -> np.ndarray:
        """bool mask with exactly ``goal`` maskable positions set (``goal`` <= maskable count)."""
        seg_len = len(word_start)
        mask = np.zeros(seg_len, dtype=bool)
        if goal <= 0:
            return mask
        alpha, beta, subword = self._config.mask_alpha, self._config.mask_beta, self._config.subword_spans
        starts = np.flatnonzero(word_start & maskable).tolist()
        blocked = np.flatnonzero(~maskable).tolist()
        bounds = np.flatnonzero(word_start | ~maskable).tolist()
        grams, offsets = self._draws(rng, goal + 8)
        draw = count = cur = 0
        while cur < seg_len and count < goal:
            if draw == len(grams):
                grams, offsets = self._draws(rng, goal + 8)
                draw = 0
            remaining = goal - count
            n = min(grams[draw], remaining)
            window = n * alpha // beta
            left = int(offsets[draw] * window)
            draw += 1
            k = bisect_left(starts, cur + left)
            if k == len(starts):
                break
            beg = starts[k]
            b = bisect_right(blocked, beg)
            stop = blocked[b] if b < len(blocked) else seg_len
            if subword:
                if beg + n >= seg_len:
                    break
                end = min(beg + n, stop)
            else:
                j = bisect_right(bounds, beg)  # bounds[j + m - 1] ends a span of m words
                if j + n - 1 >= len(bounds):
                    break
                m = n
                while m > 0 and min(bounds[j + m - 1], stop) - beg > remaining:
                    m -= 1
                if m == 0:  # a single word longer than the remaining budget: leave it unmasked
                    cur = bounds[j]
                    continue
                end = min(bounds[j + m - 1], stop)
            mask[beg:end] = True
            count += end - beg
            cur = end + window - left
        if count < goal:
            candidates = np.flatnonzero(maskable & ~mask)
            mask[rng.choice(candidates, goal - count, replace=False)] = True
        return mask


def split_a_b(length: int, sentence_starts: np.ndarray, begin: int, ab_len: int,
              rng: np.random.Generator) -> tuple[int, int, int, int, int] | None:
    """Chooses A = [begin, a_end) and B = [b_begin, b_end) (trimmed) and the label, or None."""
    if begin + ab_len >= length:
        return None
    lo = np.searchsorted(sentence_starts, begin, side="right")
    hi = np.searchsorted(sentence_starts, begin + ab_len, side="left")
    end = int(sentence_starts[hi]) if hi < len(sentence_starts) else length
    cuts = sentence_starts[lo:hi]
    if len(cuts) == 0 or rng.random() < 0.5:
        label = 0
        a_end = end if len(cuts) == 0 else int(cuts[rng.integers(len(cuts))])
        b_len = max(1, ab_len - (a_end - begin))
        b_begin = int(rng.integers(0, length - b_len))  # uniform in [0, length - 1 - b_len]
        b_end = b_begin + b_len
        k = np.searchsorted(sentence_starts, b_begin, side="right") - 1
        b_begin = int(sentence_starts[k]) if k >= 0 else 0
        k = np.searchsorted(sentence_starts, b_end, side="left")
        b_end = min(int(sentence_starts[k]) if k < len(sentence_starts) else length, max(b_end, length - 1))
    else:
        label = 1
        a_end = int(cuts[rng.integers(len(cuts))])
        b_begin, b_end = a_end, end
    a_len, b_len = _trim(a_end - begin, b_end - b_begin, ab_len)
    return a_len, b_begin, b_len, label, a_end


def _trim(a_len: int, b_len: int, total: int) -> tuple[int, int]:
    """Trims the longer of A/B by one token at a time until they fit in ``total`` (closed form)."""
    excess = a_len + b_len - total
    if excess <= 0:
        return a_len, b_len
    gap = min(excess, abs(a_len - b_len))
    if a_len > b_len:
        a_len -= gap
    else:
        b_len -= gap
    excess -= gap
    # Equal lengths: the reference trims B first, then alternates.
    return a_len - excess // 2, b_len - (excess - excess // 2)


class RecordBuilder:
    """Turns one stream's tokens into records (the module docstring has the rules)."""

    def __init__(self, config: RecordConfig, word_start_table: np.ndarray, sep_id: int, cls_id: int):
        config.validate()
        self._config = config
        self._word_start_table = word_start_table
        self._sep, self._cls = sep_id, cls_id
        self._masker = SpanMasker(config)
        self._tail = np.array([sep_id, cls_id], dtype=np.int32)

    def build(self, ids: np.ndarray, sentence_starts: np.ndarray, stream_id: int, reverse: bool,
              rng: np.random.Generator) -> Iterator[Record]:
        """Records of one stream in stream_pos order. ``sentence_starts``: sorted positions > 0."""
        c = self._config
        length = len(ids)
        start = pos = 0
        segment_ids = np.full(c.seq_len, SEG_A, dtype=np.int32)
        segment_ids[-1] = SEG_CLS
        while start + c.seq_len <= length:
            begin = start + c.reuse_len
            split = split_a_b(length, sentence_starts, begin, c.ab_len, rng)
            if split is None:
                break
            a_len, b_begin, b_len, label, _ = split
            input_ids = np.concatenate([
                ids[start:begin + a_len], self._tail[:1], ids[b_begin:b_begin + b_len], self._tail])
            word_start = self._word_start_table[input_ids]
            maskable = (input_ids != self._sep) & (input_ids != self._cls)
            is_masked = np.concatenate([
                self._mask(word_start[:c.reuse_len], maskable[:c.reuse_len], c.context_budget, reverse, rng),
                self._mask(word_start[c.reuse_len:], maskable[c.reuse_len:], c.ab_budget, reverse, rng)])
            segs = segment_ids.copy()
            segs[begin - start + a_len + 1:-1] = SEG_B
            yield Record(input_ids=input_ids, segment_ids=segs, is_masked=is_masked.astype(np.int32),
                         word_start=word_start.astype(np.int32), label=label, stream_id=stream_id, stream_pos=pos)
            start += c.reuse_len
            pos += 1

    def _mask(self, word_start: np.ndarray, maskable: np.ndarray, goal: int, reverse: bool,
              rng: np.random.Generator) -> np.ndarray:
        if reverse:
            return self._masker.sample(word_start[::-1], maskable[::-1], goal, rng)[::-1]
        return self._masker.sample(word_start, maskable, goal, rng)
