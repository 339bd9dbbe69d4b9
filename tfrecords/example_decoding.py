"""tf.train.Example records decoded without TensorFlow: the reading side of tfrecords/example_codec.py.

The protobuf wire format is parsed by hand (Example -> Features -> map<string, Feature> -> Int64List),
as a protobuf parser reads it: fields in any order, unknown fields skipped, an Int64List packed or
not, a repeated message merged, the last of a map's duplicate keys kept. The result is what
tfrecords.schema.parse_records gives: int32 arrays, [seq_len] for SEQUENCE_FEATURES and scalars for
SCALAR_FEATURES (int64 values cast to int32 as tf.cast does: wrapped). Packed values are decoded with
NumPy, a record's few fields in Python. Bytes that are not such a record (a varint or a length past
its message's end, a missing feature, a list of another length or type) are one RecordDecodeError
(exit status 3) naming the shard and the record.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tfrecords.errors import DataError
from tfrecords.schema import ALL_FEATURES, SCALAR_FEATURES, SEQUENCE_FEATURES

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10
_WANTED = {name.encode(): name for name in ALL_FEATURES}
_INT64_LIST = 3  # Feature's oneof: 1 bytes_list, 2 float_list, 3 int64_list
_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


class RecordDecodeError(DataError):
    """A record whose bytes are not a tf.train.Example of the record schema (exit status 3)."""


class _Malformed(Exception):
    """What is wrong with a record's bytes; RecordDecodeError adds where the record is."""


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos``."""
    result = shift = 0
    for index in range(pos, min(end, pos + _MAX_VARINT_BYTES)):
        byte = data[index]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, index + 1
        shift += 7
    if end - pos < _MAX_VARINT_BYTES:
        raise _Malformed(f"a varint at byte {pos} runs past the end of its message (byte {end})")
    raise _Malformed(f"a varint at byte {pos} is longer than {_MAX_VARINT_BYTES} bytes")


def _fields(data: bytes, pos: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, start, stop) of each field of the message in data[pos:end]; for a
    varint field start is its value, for the others [start, stop) its bytes. A list, and one-byte
    varints read inline: this loop is most of the decoding's time."""
    fields = []
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _Malformed(f"field number 0 at byte {pos}")
        if wire == LENGTH_DELIMITED:
            length = data[pos] if pos < end else 0x80
            if length < 0x80:
                pos += 1
            else:
                length, pos = _varint(data, pos, end)
        elif wire == VARINT:
            value, pos = _varint(data, pos, end)
            fields.append((number, wire, value, pos))
            continue
        elif wire in (FIXED64, FIXED32):
            length = 8 if wire == FIXED64 else 4
        else:
            raise _Malformed(f"wire type {wire} of field {number} at byte {pos} is not one this format uses")
        if length > end - pos:
            raise _Malformed(f"field {number} at byte {pos} claims {length} bytes, its message has {end - pos} left")
        fields.append((number, wire, pos, pos + length))
        pos += length
    return fields


def packed_varints(data: bytes, start: int, stop: int) -> np.ndarray:
    """The varints in data[start:stop] (a packed repeated field) as int64, decoded with NumPy."""
    raw = np.frombuffer(data, np.uint8, stop - start, start)
    if not raw.size or raw.max() < 0x80:  # token flags, segment ids, small ids: one byte each
        return raw.astype(np.int64)
    ends = np.flatnonzero(raw < 0x80)
    if not ends.size or ends[-1] != raw.size - 1:
        raise _Malformed(f"the last varint of a packed list at byte {start} runs past the list's end (byte {stop})")
    starts = np.concatenate(([0], ends[:-1] + 1))
    lengths = ends - starts + 1
    if lengths.max() > _MAX_VARINT_BYTES:
        raise _Malformed(f"a packed list at byte {start} holds a varint longer than {_MAX_VARINT_BYTES} bytes")
    place = (np.arange(raw.size) - np.repeat(starts, lengths)).astype(np.uint64) * np.uint64(7)
    with np.errstate(over="ignore"):  # a 10th byte's bits beyond 64 drop, as protobuf's do
        groups = (raw & 0x7F).astype(np.uint64) << place
    return np.add.reduceat(groups, starts).view(np.int64)  # disjoint bits: the sum is their OR


# A feature as found is (pieces, kind): its packed payloads as (start, stop) spans and its unpacked values
# as int64 arrays, in order; the Feature's kind (1 bytes_list, 2 float_list, 3 int64_list; None when unset).


def _int64_list(data: bytes, start: int, stop: int) -> list:
    """An Int64List's values (field 1, packed or one varint each), in order, as pieces."""
    pieces: list = []
    for number, wire, first, last in _fields(data, start, stop):
        if number != 1:
            continue
        if wire == LENGTH_DELIMITED:
            pieces.append((first, last))
        elif wire == VARINT:
            pieces.append(np.array([first], np.uint64).view(np.int64))
        else:
            raise _Malformed(f"Int64List.value at byte {first} has wire type {wire}")
    return pieces


def _feature(data: bytes, start: int, stop: int, pieces: list, kind: int | None) -> tuple[list, int | None]:
    """A Feature merged into (its pieces so far, its kind so far): the last kind set wins (a oneof),
    values of repeated int64_list fields add up (a message merged)."""
    for number, wire, first, last in _fields(data, start, stop):
        if number not in _KINDS or wire != LENGTH_DELIMITED:
            continue
        if number != kind:
            pieces, kind = [], number
        if number == _INT64_LIST:
            pieces = pieces + _int64_list(data, first, last)
    return pieces, kind


def _features(data: bytes) -> dict[str, tuple[list, int | None]]:
    """The schema's features present in an Example: name -> (pieces, kind)."""
    found: dict[str, tuple[list, int | None]] = {}
    for number, wire, start, stop in _fields(data, 0, len(data)):
        if number != 1 or wire != LENGTH_DELIMITED:
            continue  # Example.features is field 1; anything else is unknown
        for entry_number, entry_wire, entry_start, entry_stop in _fields(data, start, stop):
            if entry_number != 1 or entry_wire != LENGTH_DELIMITED:
                continue  # Features.feature (the map) is field 1
            key, values = b"", []
            for part, part_wire, first, last in _fields(data, entry_start, entry_stop):
                if part == 1 and part_wire == LENGTH_DELIMITED:
                    key = data[first:last]
                elif part == 2 and part_wire == LENGTH_DELIMITED:
                    values.append((first, last))
            name = _WANTED.get(bytes(key))
            if name is not None:  # a map entry replaces an earlier one of the same key
                pieces, kind = [], None
                for first, last in values:
                    pieces, kind = _feature(data, first, last, pieces, kind)
                found[name] = (pieces, kind)
    return found


def _expected(name: str, seq_len: int) -> int:
    return seq_len if name in SEQUENCE_FEATURES else 1


def _checked_kind(name: str, feature: tuple[list, int | None] | None) -> list:
    """The pieces of a feature that is there and an int64_list (or empty)."""
    if feature is None:
        raise _Malformed(f"it lacks the feature {name}")
    pieces, kind = feature
    if kind not in (None, _INT64_LIST):
        raise _Malformed(f"{name} is a {_KINDS[kind]}, the schema has an int64_list")
    return pieces


def _values(data: bytes, name: str, feature: tuple[list, int | None] | None, seq_len: int) -> np.ndarray:
    pieces = _checked_kind(name, feature)
    arrays = [piece if isinstance(piece, np.ndarray) else packed_varints(data, *piece) for piece in pieces]
    values = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
    length = _expected(name, seq_len)
    if values.size != length:
        raise _Malformed(f"{name} holds {values.size} values, the schema has {length}"
                         + (" (seq_len)" if name in SEQUENCE_FEATURES else ""))
    return values.astype(np.int32)


def decode_example(data: bytes, seq_len: int, where: str) -> dict[str, np.ndarray]:
    """One serialized record -> int32 features (schema.parse_records of one record); ``where`` (the
    shard and record, e.g. "DIR/train-00000-of-00004.tfrecord: record 12") leads any RecordDecodeError."""
    try:
        found = _features(data)
        out = {name: _values(data, name, found.get(name), seq_len) for name in ALL_FEATURES}
    except _Malformed as problem:
        raise RecordDecodeError(f"{where}: not a tf.train.Example of the record schema: {problem}") from None
    for name in SCALAR_FEATURES:
        out[name] = out[name].reshape(())
    return out


def _joined(records: Sequence[bytes], found: list[dict], name: str, seq_len: int) -> np.ndarray | None:
    """One feature of every record decoded at once (the records' payloads joined, one NumPy pass), when
    each record holds it as one packed list of the schema's length; None otherwise (decoded one by one)."""
    spans = [_checked_kind(name, features.get(name)) for features in found]
    if not all(len(pieces) == 1 and isinstance(pieces[0], tuple) for pieces in spans):
        return None
    sizes = np.array([last - first for (first, last), in spans])
    if not sizes.all() or any(data[last - 1] >= 0x80 for data, ((first, last),) in zip(records, spans)):
        return None  # an empty list, or one whose last varint runs on: told one by one
    joined = b"".join(data[first:last] for data, ((first, last),) in zip(records, spans))
    raw = np.frombuffer(joined, np.uint8)
    counts = np.add.reduceat(raw < 0x80, np.concatenate(([0], np.cumsum(sizes)[:-1])))
    length = _expected(name, seq_len)
    if (counts != length).any():
        return None
    return packed_varints(joined, 0, len(joined)).astype(np.int32).reshape(-1, length)


def decode_batch(records: Sequence[bytes], seq_len: int, wheres: Sequence[str]) -> dict[str, np.ndarray]:
    """Serialized records -> int32 features [n, seq_len] and [n] (schema.parse_records of a batch)."""
    if not records:
        return {name: np.zeros((0, seq_len) if name in SEQUENCE_FEATURES else (0,), np.int32) for name in ALL_FEATURES}
    try:
        found = [_features(data) for data in records]
        out = {name: _joined(records, found, name, seq_len) for name in ALL_FEATURES}
    except _Malformed:
        out = {name: None for name in ALL_FEATURES}  # decoded one by one below, naming the first bad record
    if any(value is None for value in out.values()):
        decoded = [decode_example(data, seq_len, where) for data, where in zip(records, wheres)]
        return {name: np.stack([record[name] for record in decoded]) for name in ALL_FEATURES}
    return {name: value.reshape(-1) if name in SCALAR_FEATURES else value for name, value in out.items()}
