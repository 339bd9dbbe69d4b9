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

Span masks follow tfrecords/span_masking.py: every record gets exactly ``num_predict``
targets, split between its context and its A/B part.

All randomness comes from the ``numpy.random.Generator`` passed in, which the caller seeds
per (seed, split, stream): the records of a stream do not depend on the runner.

Speed: the A/B choice is a short scalar loop per record, but everything else runs on
``[records, seq_len]`` matrices for ``CHUNK_RECORDS`` records of a stream at a time: token
gathering, segment ids, word starts and the span sampler.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from tfrecords.pair_lengths import trim_a_b
from tfrecords.record_config import RecordConfig
from tfrecords.schema import SEG_A, SEG_B, SEG_CLS
from tfrecords.span_masking import SpanMasker


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

