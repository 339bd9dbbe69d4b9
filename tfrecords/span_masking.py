"""Span masks of XLNet records: which positions are prediction targets.

The ``num_predict`` budget is split between the context part (``ceil(num_predict / 2)``: 43 of
85) and the A/B part (the rest: 42 of 85). Within a part, n-grams with ``p(n) ~ 1/n`` for
``n <= max_gram`` are placed left to right, each in a window of ``n * mask_alpha // mask_beta``
tokens at a random offset moved forward to a word start. A span covers ``n`` whole words
(pieces up to the ``n+1``-th word start); the ``subword_spans`` flag reproduces the original's
behaviour of ``n`` pieces instead. Spans never cover ``<sep>``/``<cls>``; a span that would
exceed the remaining budget is shortened by whole words (skipped if even one word is too long),
so each part gets exactly its budget, the shortfall being topped up with random single
maskable tokens. Every record therefore has exactly ``num_predict`` targets. For reversed
streams (bi_data) masks are sampled on the segment flipped back to reading order so that spans
follow words, as the original does.

Used by the record builder (pipeline/records.py) and by the reader's per-epoch resampling
(tfrecords/reader.py), so both draw masks by the same rule. All randomness comes from the
``numpy.random.Generator`` passed in.

Speed: the sampler advances every record's span cursor in lock-step (one NumPy step per span
for all records of a batch) using per-row lookup tables (next maskable word start, next
blocked position, k-th boundary).
"""
from __future__ import annotations

import numpy as np

from tfrecords.record_config import RecordConfig


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
