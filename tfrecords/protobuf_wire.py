"""The protocol-buffer wire format read by hand, for the messages read without their generated classes
(TensorFlow's ``Event``, SentencePiece's ``ModelProto``): one reader of fields, bounds checked.

``tfrecords/example_decoding.py`` keeps its own offset-based reader: it decodes every training record
and works on offsets into one buffer, without the copies this one makes.
"""
from __future__ import annotations

from typing import Iterator


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a serialised message, in order: an int for a varint, the raw
    little-endian bytes of a fixed-width field (8 bytes for wire type 1, 4 for 5), the payload of a
    length-delimited one. Raises ValueError for bytes that are no message (a field running past the end,
    a group's wire type)."""
    position = 0

    def varint() -> int:
        nonlocal position
        result = shift = 0
        while True:
            if position >= len(data) or shift > 63:
                raise ValueError("a varint runs past the message")
            byte = data[position]
            position += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    while position < len(data):
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            yield number, wire_type, varint()
        elif wire_type in (1, 5):
            width = 8 if wire_type == 1 else 4
            if position + width > len(data):
                raise ValueError("a fixed-width field runs past the message")
            yield number, wire_type, data[position:position + width]
            position += width
        elif wire_type == 2:
            length = varint()
            if position + length > len(data):
                raise ValueError("a field runs past the message")
            yield number, wire_type, data[position:position + length]
            position += length
        else:
            raise ValueError(f"wire type {wire_type} (a group) is not read")
