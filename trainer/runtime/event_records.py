"""TensorBoard event files written and read without TensorFlow: the ``Event`` protocol buffer's few
fields a scalar needs, in the protobuf wire format, framed as TFRecords.

Both training engines write their scalars with these (trainer/runtime/event_files.py
``EventFileWriter``: the JAX engine runs where TensorFlow is not installed), and every event file is
read back with them, whoever wrote it: a scalar
written as a ``simple_value`` (this writer, TF1 summaries) or as a float tensor (``tf.summary``).
The fields (tensorflow/core/util/event.proto, summary.proto, tensor.proto): Event.wall_time = 1
(double), step = 2 (int64), file_version = 3 (string), summary = 5; Summary.value = 1; Value.tag = 1,
simple_value = 2 (float), tensor = 8; TensorProto.dtype = 1, tensor_content = 4, float_val = 5,
double_val = 6.
"""
from __future__ import annotations

import struct
from typing import Mapping, NamedTuple

from tfrecords.protobuf_wire import fields
from tfrecords.record_files import masked_crc32c
from trainer.runtime import file_system

FILE_VERSION = "brain.Event:2"
_DT_FLOAT, _DT_DOUBLE = 1, 2


class ScalarEvent(NamedTuple):
    """One event as read back: its step, and its scalars (tag, value) in order; ``summary`` False for
    an event without one (the file-version header)."""

    step: int
    scalars: tuple[tuple[str, float], ...]
    summary: bool


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 is ten bytes, as protobuf writes it
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire_type) + payload


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _field(number, 2, _varint(len(payload)) + payload)


def encode_event(wall_time: float, step: int = 0, scalars: Mapping[str, float] | None = None,
                 file_version: str | None = None) -> bytes:
    """The bytes of an Event: its wall time and step, and either ``scalars`` as simple values or a file version."""
    out = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(int(step)))
    if file_version is not None:
        out += _length_delimited(3, file_version.encode("utf-8"))
    if scalars:
        values = b"".join(_length_delimited(1, _length_delimited(1, tag.encode("utf-8"))
                                            + _field(2, 5, struct.pack("<f", float(value))))
                          for tag, value in scalars.items())
        out += _length_delimited(5, values)
    return out


def _tensor_value(data: bytes) -> float | None:
    """The value of a scalar float TensorProto (tf.summary.scalar's), or None for another tensor."""
    dtype, content, floats, doubles = None, None, [], []
    for number, wire_type, value in fields(data):
        if number == 1 and wire_type == 0:
            dtype = value
        elif number == 4 and wire_type == 2:
            content = value
        elif number == 5:  # packed (wire type 2) or one at a time (5)
            floats += struct.unpack(f"<{len(value) // 4}f", value)
        elif number == 6:
            doubles += struct.unpack(f"<{len(value) // 8}d", value)
    if dtype == _DT_FLOAT:
        values = struct.unpack(f"<{len(content) // 4}f", content) if content else floats
    elif dtype == _DT_DOUBLE:
        values = struct.unpack(f"<{len(content) // 8}d", content) if content else doubles
    else:
        return None
    return float(values[0]) if len(values) == 1 else None


def decode_event(data: bytes) -> ScalarEvent:
    """The step and scalars of an Event's bytes (ValueError for bytes that are no Event)."""
    step, scalars, summary = 0, [], False
    for number, wire_type, value in fields(data):
        if number == 2 and wire_type == 0:
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 5 and wire_type == 2:
            summary = True
            for value_number, _, entry in fields(value):
                if value_number != 1:
                    continue
                tag, number_value = None, None
                for part, part_type, part_value in fields(entry):
                    if part == 1 and part_type == 2:
                        tag = part_value.decode("utf-8", "replace")
                    elif part == 2 and part_type == 5:
                        number_value = struct.unpack("<f", part_value)[0]
                    elif part == 8 and part_type == 2:
                        number_value = _tensor_value(part_value)
                if tag is not None and number_value is not None:
                    scalars.append((tag, float(number_value)))
    return ScalarEvent(step, tuple(scalars), summary)


def framed_records(data: bytes) -> tuple[list[bytes], bool]:
    """(the records of TFRecord-framed ``data``, whether they end cleanly): a last record cut short or
    with a wrong checksum (a writer killed mid-write) ends the list, and the second value is False."""
    records, position = [], 0
    while position < len(data):
        header = data[position:position + 12]
        if len(header) < 12:
            return records, False
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc or position + 16 + length > len(data):
            return records, False
        record = data[position + 12:position + 12 + length]
        (data_crc,) = struct.unpack("<I", data[position + 12 + length:position + 16 + length])
        if masked_crc32c(record) != data_crc:
            return records, False
        records.append(record)
        position += 16 + length
    return records, True


def read_records(path: str) -> tuple[list[bytes], bool]:
    """The records of the event file ``path`` (local or gs://), and whether they end cleanly."""
    with file_system.open_file(path, "rb") as handle:
        return framed_records(handle.read())
