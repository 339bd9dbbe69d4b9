"""Document placement into splits/streams/shards (pipeline/streams.py)."""
from __future__ import annotations

from collections import Counter

import numpy as np

from pipeline.streams import (
    TokenizedDocument,
    concatenate_stream,
    place_document,
    reverse_stream,
    shard_of_stream,
    streams_of_shard,
)


def test_placement_is_a_pure_function_of_seed_and_key():
    assert place_document("wiki.txt.gz:17", 0, 0.05, 16) == place_document("wiki.txt.gz:17", 0, 0.05, 16)
    assert place_document("wiki.txt.gz:17", 0, 0.05, 16) != place_document("wiki.txt.gz:17", 1, 0.05, 16)


def test_valid_fraction_and_stream_balance_hold_over_many_documents():
    placements = [place_document(f"corpus.txt:{i}", 0, 0.1, 8) for i in range(20000)]
    valid = sum(p.split == "valid" for p in placements) / len(placements)
    per_stream = Counter(p.stream for p in placements)
    assert 0.09 < valid < 0.11
    assert sorted(per_stream) == list(range(8)) and min(per_stream.values()) > 2300
    assert all(p.split == "train" for p in (place_document(f"c:{i}", 0, 0.0, 8) for i in range(500)))


def test_stream_order_does_not_depend_on_arrival_order():
    docs = [TokenizedDocument(f"f:{i}", 0, place_document(f"f:{i}", 0, 0.0, 1).order,
                              np.arange(i, i + 3, dtype=np.int32).tobytes(), np.array([2, 1], np.int32).tobytes())
            for i in range(30)]
    ids_a, starts_a = concatenate_stream(docs)
    ids_b, starts_b = concatenate_stream(list(reversed(docs)))
    np.testing.assert_array_equal(ids_a, ids_b)
    np.testing.assert_array_equal(starts_a, starts_b)
    assert len(ids_a) == 90 and len(starts_a) == 59


def test_reversed_stream_mirrors_tokens_and_sentence_starts():
    ids = np.arange(10, dtype=np.int32)
    reversed_ids, reversed_starts = reverse_stream(ids, np.array([3, 7]))
    np.testing.assert_array_equal(reversed_ids, ids[::-1])
    np.testing.assert_array_equal(reversed_starts, [3, 7])  # sentences of 3, 4, 3 tokens read backwards
    np.testing.assert_array_equal(reverse_stream(ids, np.array([2]))[1], [8])


def test_every_stream_has_exactly_one_shard():
    owners = {s: shard for shard in range(3) for s in streams_of_shard(shard, 3, 10)}
    assert sorted(owners) == list(range(10))
    assert all(shard_of_stream(s, 3) == owner for s, owner in owners.items())
