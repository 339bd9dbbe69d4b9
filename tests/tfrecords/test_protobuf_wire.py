"""The protobuf wire reader (tfrecords/protobuf_wire.py), against messages protobuf itself serialises."""
from __future__ import annotations

import pytest

from tfrecords.protobuf_wire import fields


def test_fields_are_read_in_order_with_their_wire_types():
    from google.protobuf import struct_pb2

    message = struct_pb2.Value(number_value=2.5).SerializeToString()  # field 2, a double
    assert list(fields(message)) == [(2, 1, message[1:])]
    listed = struct_pb2.ListValue(values=[struct_pb2.Value(bool_value=True)]).SerializeToString()
    ((number, wire_type, payload),) = fields(listed)
    assert (number, wire_type) == (1, 2) and list(fields(payload)) == [(4, 0, 1)]


@pytest.mark.parametrize("data", [b"\x08", b"\x12\x05ab", b"\x0d\x00", b"\x0b"])
def test_bytes_that_are_no_message_are_a_value_error(data):
    with pytest.raises(ValueError):
        list(fields(data))
