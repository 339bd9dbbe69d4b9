"""Record serialisation: the TF-free encoder matches tf.train.Example, and the schema round-trips."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.records import RecordBuilder
from tfrecords.example_codec import encode_batch, encode_record, encode_varints
from tfrecords.record_config import RecordConfig
from tfrecords.schema import ALL_FEATURES, parse_records, serialize_record


@pytest.fixture(scope="module")
def batch(vocab, corpus_sample):
    processor = vocab.processor()
    with open(corpus_sample, encoding="utf-8") as handle:
        lines = [line for line in handle.read().splitlines()[:600] if line.strip()]
    pieces = [p for p in processor.encode(lines, out_type=int) if p]
    ids = np.concatenate([np.array(p, dtype=np.int32) for p in pieces])
    starts = np.cumsum([len(p) for p in pieces])[:-1]
    builder = RecordBuilder(RecordConfig(seq_len=128, reuse_len=64, num_predict=21), vocab.word_start_table(),
                            vocab.special_ids.sep, vocab.special_ids.cls)
    return next(builder.build(ids, starts, 17, False, np.random.default_rng(0)))


def test_fast_encoder_writes_exactly_the_tf_example_bytes(batch):
    encoded = encode_batch(batch.__dict__)
    assert len(encoded) == len(batch) > 50
    for row in range(0, len(batch), 7):
        assert encoded[row] == serialize_record(batch.record(row))


def test_single_record_encoder_matches_for_large_and_negative_values():
    rng = np.random.default_rng(0)
    for high in (2, 300, 40_000, 5_000_000, 2**62):
        record = {name: rng.integers(0, high, 64) for name in ("input_ids", "segment_ids", "is_masked", "word_start")}
        record.update(label=1, stream_id=high % 1000, stream_pos=7)
        assert encode_record(record) == serialize_record(record)
    record["input_ids"][3] = -1
    record["stream_pos"] = -2
    assert encode_record(record) == serialize_record(record)


def test_varints_follow_the_protobuf_encoding():
    assert encode_varints(np.array([0, 1, 127, 128, 300, 16384])) == bytes(
        [0, 1, 127, 0x80, 0x01, 0xAC, 0x02, 0x80, 0x80, 0x01])


def test_schema_round_trip_through_tf_parsing(batch):
    import tensorflow as tf

    serialized = tf.constant(encode_batch(batch.__dict__))
    parsed = parse_records(serialized, 128)
    assert set(parsed) == set(ALL_FEATURES)
    for name in ALL_FEATURES:
        np.testing.assert_array_equal(parsed[name].numpy(), getattr(batch, name))
        assert parsed[name].dtype == tf.int32
