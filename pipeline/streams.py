"""Deterministic placement of documents into splits, text streams and shard files.

Every document has a stable key (``"<file key>:<index in file>"``, see pipeline/corpus.py).
A seeded BLAKE2b hash of ``seed`` and that key gives three independent 64-bit numbers:

* the split: ``valid`` when the first, as a fraction of 2**64, is below ``valid_fraction``;
* the text stream: the second modulo ``num_streams`` (streams are numbered per split);
* the order inside the stream: documents are sorted by (third number, key).

Nothing depends on which worker read which file or in what order, so the concatenated
stream, and hence every record, is the same whatever the runner and worker count.
Stream ``s`` of a split lives in shard file ``s % num_shards``; with bi_data its reversed
copy ``s + num_streams`` lives in the same file. Inside a file streams appear by ascending
stream id, each stream's records contiguous in stream_pos order.

A document's tokens are kept as int32 ids plus the length of each sentence (line); the
stream's sentence starts are the cumulative line lengths, which is exactly where the
original's per-line alternating sentence flag flips.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

SPLIT_INDEX = {"train": 0, "valid": 1}


@dataclass(frozen=True)
class Placement:
    split: str
    stream: int
    order: int


def place_document(key: str, seed: int, valid_fraction: float, num_streams: int) -> Placement:
    """Split, stream and in-stream order of the document with stable key ``key``."""
    digest = hashlib.blake2b(f"{seed}\x00{key}".encode("utf-8"), digest_size=24).digest()
    split_draw, stream_draw, order = (int.from_bytes(digest[i:i + 8], "little") for i in (0, 8, 16))
    split = "valid" if split_draw < valid_fraction * 2.0 ** 64 else "train"
    return Placement(split, stream_draw % num_streams, order)


def shard_of_stream(stream: int, num_shards: int) -> int:
    """The shard file holding forward stream ``stream`` (and its reversed copy)."""
    return stream % num_shards


def streams_of_shard(shard: int, num_shards: int, num_streams: int) -> list[int]:
    """Forward stream ids stored in ``shard``, ascending."""
    return list(range(shard, num_streams, num_shards))


@dataclass(frozen=True)
class TokenizedDocument:
    """A document's place and tokens (ids int32 bytes, sentence lengths int32 bytes)."""

    key: str
    stream: int
    order: int
    ids: bytes
    sentence_lengths: bytes

    @property
    def num_tokens(self) -> int:
        return len(self.ids) // 4


def concatenate_stream(documents: list[TokenizedDocument]) -> tuple[np.ndarray, np.ndarray]:
    """The stream's ids and its sentence starts (positions > 0), documents in hash order."""
    ordered = sorted(documents, key=lambda d: (d.order, d.key))
    if not ordered:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    ids = np.concatenate([np.frombuffer(d.ids, dtype=np.int32) for d in ordered])
    lengths = np.concatenate([np.frombuffer(d.sentence_lengths, dtype=np.int32) for d in ordered])
    starts = np.cumsum(lengths, dtype=np.int64)[:-1]
    return ids, starts


def reverse_stream(ids: np.ndarray, sentence_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The reversed stream (bi_data): tokens backwards, sentence starts mirrored."""
    return ids[::-1].copy(), (len(ids) - sentence_starts)[::-1].copy()


def stream_rng(seed: int, split: str, stream_id: int) -> np.random.Generator:
    """The generator for one stream's records: a function of (seed, split, stream id) only."""
    return np.random.default_rng([seed, SPLIT_INDEX[split], stream_id])
