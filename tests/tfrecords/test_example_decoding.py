"""tf.train.Example decoding without TensorFlow (tfrecords/example_decoding.py): the records of
tfrecords/example_codec.py decode to what they hold and to what tf.io.parse_example gives; any field
order, unpacked lists and unknown fields read as a protobuf parser reads them; hostile bytes are one
RecordDecodeError naming the shard and record."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfrecords import schema
from tfrecords.errors import exit_code
from tfrecords.example_codec import encode_record
from tfrecords.example_decoding import RecordDecodeError, decode_batch, decode_example

SEQ_LEN = 16
WHERE = "DIR/train-00000-of-00001.tfrecord: record 7"


def record(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {name: rng.integers(0, 2, SEQ_LEN) for name in ("segment_ids", "is_masked", "word_start")}
    out["input_ids"] = rng.integers(0, 40000, SEQ_LEN)  # multi-byte varints
    out.update(label=int(rng.integers(0, 2)), stream_id=int(rng.integers(0, 300)), stream_pos=int(seed * 1000))
    return out


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(entries: list[tuple[str, bytes]], extra: bytes = b"") -> bytes:
    """An Example of map entries (name, Int64List bytes) in the order given, unknown fields ``extra``."""
    feature_map = b"".join(field(1, field(1, name.encode()) + field(2, field(3, values))) for name, values in entries)
    return field(1, feature_map) + extra


def unpacked(values) -> bytes:
    return b"".join(varint(1 << 3 | 0) + varint(int(v)) for v in values)


def packed(values) -> bytes:
    return field(1, b"".join(varint(int(v)) for v in values))


def as_entries(rec: dict, encode=packed) -> list[tuple[str, bytes]]:
    return [(name, encode(np.atleast_1d(rec[name]))) for name in schema.ALL_FEATURES]


def parsed_by_tensorflow(serialized: list[bytes]) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in schema.parse_records(tf.constant(serialized), SEQ_LEN).items()}


def assert_equal_features(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert got[name].dtype == np.int32


def test_decoding_an_encoded_record_gives_the_record_back():
    for seed in range(20):
        rec = record(seed)
        decoded = decode_example(encode_record(rec), SEQ_LEN, WHERE)
        for name in schema.ALL_FEATURES:
            np.testing.assert_array_equal(decoded[name], np.asarray(rec[name]), err_msg=name)


def test_a_batch_decodes_as_tf_io_parse_example_parses_it():
    serialized = [encode_record(record(seed)) for seed in range(30)]
    assert_equal_features(decode_batch(serialized, SEQ_LEN, [WHERE] * 30), parsed_by_tensorflow(serialized))


def test_unpacked_lists_reversed_keys_and_unknown_fields_decode_as_tensorflow_parses_them():
    rec = record(3)
    unknown = varint(5 << 3 | 0) + varint(99) + varint(6 << 3 | 5) + b"abcd" + field(7, b"ignored")
    serialized = [example(list(reversed(as_entries(rec, unpacked))), unknown),
                  example(as_entries(rec) + [("other", packed([1, 2, 3]))])]
    assert_equal_features(decode_batch(serialized, SEQ_LEN, [WHERE] * 2), parsed_by_tensorflow(serialized))


def test_negative_and_large_values_wrap_to_int32_as_tf_cast_does():
    rec = {**record(4), "input_ids": np.array([-1, 2**31, 2**40 + 5, -(2**63)] + [0] * (SEQ_LEN - 4))}
    serialized = [example(as_entries(rec))]
    assert_equal_features(decode_batch(serialized, SEQ_LEN, [WHERE]), parsed_by_tensorflow(serialized))


def hostile_cases() -> dict[str, bytes]:
    good = example(as_entries(record(5)))
    entries = as_entries(record(5))
    return {
        "a varint at byte": good[:1] + b"\xff\xff",  # a truncated length varint
        "claims": field(1, b"")[:1] + varint(len(good) + 50) + good[2:],  # a length past the end
        "lacks the feature stream_pos": example([e for e in entries if e[0] != "stream_pos"]),
        "input_ids holds 3 values": example([(n, packed([1, 2, 3]) if n == "input_ids" else v) for n, v in entries]),
        "label holds 2 values": example([(n, packed([1, 0]) if n == "label" else v) for n, v in entries]),
        "runs past the list's end": example([(n, field(1, b"\x01\x81") if n == "is_masked" else v)
                                             for n, v in entries]),
        "wire type 3": good + varint(9 << 3 | 3),
    }


@pytest.mark.parametrize("problem", list(hostile_cases()))
def test_hostile_bytes_are_one_error_naming_the_shard_and_the_record(problem):
    with pytest.raises(RecordDecodeError) as error:
        decode_example(hostile_cases()[problem], SEQ_LEN, WHERE)
    message = str(error.value)
    assert message.startswith(f"{WHERE}: not a tf.train.Example of the record schema: ") and problem in message
    assert exit_code(error.value) == 3


def test_a_float_list_where_the_schema_has_int64_is_refused():
    entries = [(n, v) for n, v in as_entries(record(6)) if n != "label"]
    float_label = field(1, field(1, b"label") + field(2, field(2, field(1, b"\x00\x00\x80\x3f"))))
    # a second Example.features merges into the first, as protobuf merges a repeated message field
    with pytest.raises(RecordDecodeError, match="label is a float_list"):
        decode_example(example(entries) + field(1, float_label), SEQ_LEN, WHERE)


def test_a_bad_record_in_a_batch_is_named_by_its_own_place():
    serialized = [encode_record(record(seed)) for seed in range(4)]
    serialized[2] = hostile_cases()["input_ids holds 3 values"]
    wheres = [f"DIR/train-00000-of-00001.tfrecord: record {index}" for index in range(4)]
    with pytest.raises(RecordDecodeError, match="^DIR/train-00000-of-00001.tfrecord: record 2: .*input_ids holds 3"):
        decode_batch(serialized, SEQ_LEN, wheres)
