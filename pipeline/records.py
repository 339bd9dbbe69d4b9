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

Speed: the A/B choice is a short scalar loop per record, but everything else runs on
``[records, seq_len]`` matrices for ``CHUNK_RECORDS`` records of a stream at a time: token
gathering, segment ids, word starts, and the span sampler, which advances every record's
span cursor in lock-step (one NumPy step per span for all records) using per-row lookup
tables (next maskable word start, next blocked position, k-th boundary).
"""
from __future__ import annotations

import math
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


# Records per batch of the vectorised builder: bounds memory ([CHUNK, seq_len] matrices)
# independently of stream length. Part of the algorithm: changing it changes the bytes.
CHUNK_RECORDS = 256


@dataclass
class RecordBatch:
    """Records of one stream, batch-major: [n, seq_len] int32 matrices and [n] scalars."""

    input_ids: np.ndarray
    segment_ids: np.ndarray
    is_masked: np.ndarray
    word_start: np.ndarray
    label: np.ndarray
    stream_id: np.ndarray
    stream_pos: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    def record(self, row: int) -> dict:
        """One record as a feature dict (tfrecords.schema names)."""
        return {name: getattr(self, name)[row] for name in
                ("input_ids", "segment_ids", "is_masked", "word_start", "label", "stream_id", "stream_pos")}


def _next_true(flags: np.ndarray) -> np.ndarray:
    """[R, L+1]: for each position p the first q >= p with flags[q], or L when none."""
    rows, length = flags.shape
    where = np.where(flags, np.arange(length), length)
    out = np.empty((rows, length + 1), dtype=np.int64)
    out[:, length] = length
    out[:, :length] = np.minimum.accumulate(where[:, ::-1], axis=1)[:, ::-1]
    return out


class SpanMasker:
    """Samples span masks for one part of many records at once (see the module docstring)."""

    def __init__(self, config: RecordConfig):
        self._config = config
        probabilities = 1.0 / np.arange(1, config.max_gram + 1)
        self._cdf = np.cumsum(probabilities / probabilities.sum())
        self._cdf[-1] = 1.0

    def sample(self, word_start: np.ndarray, maskable: np.ndarray, goal: int, rng: np.random.Generator) -> np.ndarray:
        """bool mask [L] with exactly ``goal`` maskable positions set (``goal`` <= maskable count)."""
        return self.sample_batch(word_start[None], maskable[None], goal, rng)[0]

    def mask_records(self, word_start: np.ndarray, maskable: np.ndarray, reverse: bool,
                     rng: np.random.Generator) -> np.ndarray:
        """bool masks [R, seq_len] of whole records: num_predict split between the context part
        (first reuse_len positions) and the A/B part; reversed streams are masked right to left,
        so their spans start at word starts of the reversed text as the forward ones do."""
        c, reuse = self._config, self._config.reuse_len
        word_start = np.asarray(word_start, dtype=bool)
        return np.concatenate([
            self._mask_part(word_start[:, :reuse], maskable[:, :reuse], c.context_budget, reverse, rng),
            self._mask_part(word_start[:, reuse:], maskable[:, reuse:], c.ab_budget, reverse, rng)], axis=1)

    def _mask_part(self, word_start: np.ndarray, maskable: np.ndarray, goal: int, reverse: bool,
                   rng: np.random.Generator) -> np.ndarray:
        if reverse:
            return self.sample_batch(word_start[:, ::-1], maskable[:, ::-1], goal, rng)[:, ::-1]
        return self.sample_batch(word_start, maskable, goal, rng)

    def sample_batch(self, word_start: np.ndarray, maskable: np.ndarray, goal: int,
                     rng: np.random.Generator) -> np.ndarray:
        """bool masks [R, L]: each row gets exactly ``goal`` targets among its maskable positions."""
        word_start = np.asarray(word_start, dtype=bool)
        maskable = np.asarray(maskable, dtype=bool)
        rows, seg_len = word_start.shape
        if goal <= 0 or rows == 0:
            return np.zeros((rows, seg_len), dtype=bool)
        return self._top_up(self.spans(word_start, maskable, goal, rng), maskable, goal, rng)

    def spans(self, word_start: np.ndarray, maskable: np.ndarray, goal: int, rng: np.random.Generator) -> np.ndarray:
        """The n-gram spans alone, before the top-up: int [R, L], 1 inside a span, else 0."""
        c = self._config
        rows, seg_len = word_start.shape
        is_bound = word_start | ~maskable  # spans end at word starts and never cover blocked tokens
        next_start = _next_true(word_start & maskable)
        next_blocked = _next_true(~maskable)
        rank = np.zeros((rows, seg_len + 1), dtype=np.int64)
        np.cumsum(is_bound, axis=1, out=rank[:, 1:])
        num_bounds = rank[:, -1]
        bound_pos = np.full((rows, seg_len + c.max_gram + 2), seg_len, dtype=np.int64)
        r_idx, p_idx = np.nonzero(is_bound)
        bound_pos[r_idx, rank[r_idx, p_idx]] = p_idx
        row = np.arange(rows)
        cur = np.zeros(rows, dtype=np.int64)
        count = np.zeros(rows, dtype=np.int64)
        active = np.ones(rows, dtype=bool)
        delta = np.zeros((rows, seg_len + 1), dtype=np.int64)
        grams_range = np.arange(1, c.max_gram + 1)
        while active.any():
            grams = np.searchsorted(self._cdf, rng.random(rows), side="right") + 1
            offsets = rng.random(rows)
            remaining = goal - count
            n = np.minimum(grams, remaining)
            window = n * c.mask_alpha // c.mask_beta
            left = (offsets * window).astype(np.int64)
            beg = next_start[row, np.minimum(cur + left, seg_len)]
            k = rank[row, np.minimum(beg, seg_len)]
            if c.subword_spans:
                stop = beg + n >= seg_len
                end = np.minimum(beg + n, next_blocked[row, np.minimum(beg + 1, seg_len)])
                skip = np.zeros(rows, dtype=bool)
            else:
                stop = (beg >= seg_len) | (k + n >= num_bounds)
                ends = bound_pos[row[:, None], k[:, None] + grams_range[None, :]]  # [R, max_gram]
                ends = np.minimum(ends, next_blocked[row, np.minimum(beg + 1, seg_len)][:, None])
                fits = (grams_range[None, :] <= n[:, None]) & (ends - beg[:, None] <= remaining[:, None])
                m = np.where(fits.any(axis=1), c.max_gram - np.argmax(fits[:, ::-1], axis=1), 0)
                end = ends[row, np.maximum(m - 1, 0)]
                skip = m == 0  # one word longer than the remaining budget: leave it unmasked
            active &= ~stop & (beg < seg_len)
            place = active & ~skip
            delta[row[place], beg[place]] += 1
            delta[row[place], end[place]] -= 1
            count = np.where(place, count + end - beg, count)
            jump = bound_pos[row, np.minimum(k + 1, bound_pos.shape[1] - 1)]
            cur = np.where(place, end + window - left, np.where(active & skip, jump, cur))
            active &= (cur < seg_len) & (count < goal)
        return np.cumsum(delta[:, :seg_len], axis=1)

    def _top_up(self, spans: np.ndarray, maskable: np.ndarray, goal: int, rng) -> np.ndarray:
        """Adds random single maskable tokens until every row has ``goal`` targets."""
        mask = spans > 0
        need = goal - mask.sum(axis=1)
        rows = np.flatnonzero(need)
        if len(rows) == 0:
            return mask
        # Per row, the `need` candidates with the smallest uniform keys: a uniform random choice.
        keys = rng.random((len(rows), mask.shape[1]))
        keys[~maskable[rows] | mask[rows]] = 2.0  # never chosen
        most = int(need[rows].max())
        smallest = np.argpartition(keys, most - 1, axis=1)[:, :most]
        smallest = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1)
        take = np.arange(most)[None, :] < need[rows][:, None]
        mask[np.repeat(rows, take.sum(axis=1)), smallest[take]] = True
        return mask


def split_a_b(length: int, sentence_starts: np.ndarray, begin: int, ab_len: int,
              rng: np.random.Generator) -> tuple[int, int, int, int] | None:
    """Chooses A = [begin, begin + a_len) and B = [b_begin, b_begin + b_len) and the label, or None."""
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
    a_len, b_len = trim_a_b(a_end - begin, b_end - b_begin, ab_len)
    return a_len, b_begin, b_len, label


def trim_a_b(a_len: int, b_len: int, total: int) -> tuple[int, int]:
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
        self._word_start_table = np.asarray(word_start_table, dtype=bool)
        self._sep, self._cls = sep_id, cls_id
        self._masker = SpanMasker(config)

    def layout(self, ids: np.ndarray, sentence_starts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """[n, 5] int64 rows (start, a_len, b_begin, b_len, label) of every record of the stream."""
        c = self._config
        rows = []
        start = 0
        while start + c.seq_len <= len(ids):
            split = split_a_b(len(ids), sentence_starts, start + c.reuse_len, c.ab_len, rng)
            if split is None:
                break
            rows.append((start,) + split)
            start += c.reuse_len
        return np.array(rows, dtype=np.int64).reshape(-1, 5)

    def build(self, ids: np.ndarray, sentence_starts: np.ndarray, stream_id: int, reverse: bool,
              rng: np.random.Generator) -> Iterator[RecordBatch]:
        """The stream's records in stream_pos order, in batches of up to CHUNK_RECORDS."""
        layout = self.layout(ids, sentence_starts, rng)
        source = np.concatenate([np.asarray(ids, dtype=np.int32), np.array([self._sep, self._cls], np.int32)])
        for first in range(0, len(layout), CHUNK_RECORDS):
            yield self._batch(source, layout[first:first + CHUNK_RECORDS], first, stream_id, reverse, rng)

    def _batch(self, source: np.ndarray, layout: np.ndarray, first: int, stream_id: int, reverse: bool,
               rng: np.random.Generator) -> RecordBatch:
        c = self._config
        rows = len(layout)
        start, a_len, b_begin, b_len, label = (layout[:, i:i + 1] for i in range(5))
        col = np.arange(c.seq_len)[None, :]
        sep_at = c.reuse_len + a_len  # position of the first <sep>
        sep_index, cls_index = len(source) - 2, len(source) - 1
        gather = np.where(col < sep_at, start + col,
                          np.where(col == sep_at, sep_index,
                                   np.where(col < c.seq_len - 2, b_begin + col - sep_at - 1,
                                            np.where(col == c.seq_len - 2, sep_index, cls_index))))
        input_ids = source[gather]
        segment_ids = np.where(col <= sep_at, SEG_A, np.where(col < c.seq_len - 1, SEG_B, SEG_CLS))
        word_start = self._word_start_table[input_ids]
        maskable = (input_ids != self._sep) & (input_ids != self._cls)
        is_masked = self._masker.mask_records(word_start, maskable, reverse, rng)
        return RecordBatch(
            input_ids=input_ids, segment_ids=segment_ids.astype(np.int32), is_masked=is_masked.astype(np.int32),
            word_start=word_start.astype(np.int32), label=layout[:, 4].astype(np.int32),
            stream_id=np.full(rows, stream_id, dtype=np.int64), stream_pos=np.arange(first, first + rows))

