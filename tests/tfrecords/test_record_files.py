"""TFRecord files without TensorFlow (tfrecords/record_files.py): framing, both CRCs, compression, sizes
checked before reading, TensorFlow's words for a damaged record."""
from __future__ import annotations

import gzip
import struct
import zlib

import pytest
import tensorflow as tf

from tfrecords.errors import exit_code
from tfrecords.record_files import (DamagedRecordError, RecordFile, RemotePathError, frame_record,
                                    load_local_manifest, masked_crc32c)

RECORDS = [b"", b"a", bytes(range(256)) * 3, b"xlnet" * 1000]


def write(path, records=RECORDS, compress=None) -> str:
    data = b"".join(frame_record(record) for record in records)
    with open(path, "wb") as handle:
        handle.write(compress(data) if compress else data)
    return str(path)


def read_all(path: str, compression: str = "") -> list[bytes]:
    out = []
    with RecordFile(path, compression) as records:
        while (record := records.read()) is not None:
            out.append(record)
    return out


def test_framing_equals_tensorflows_writer(tmp_path):
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in RECORDS:
            writer.write(record)
    assert open(path, "rb").read() == b"".join(frame_record(record) for record in RECORDS)
    assert read_all(path) == RECORDS


@pytest.mark.parametrize("compression, compress", [("GZIP", gzip.compress), ("ZLIB", zlib.compress)])
def test_compressed_files_read_as_tfrecorddataset_reads_them(tmp_path, compression, compress):
    path = write(tmp_path / "c.tfrecord", compress=compress)
    assert read_all(path, compression) == [bytes(r.numpy()) for r in
                                           tf.data.TFRecordDataset(path, compression_type=compression)] == RECORDS


@pytest.mark.parametrize("compression, compress", [("", None), ("GZIP", gzip.compress)])
def test_skip_passes_records_by_their_headers(tmp_path, compression, compress):
    path = write(tmp_path / "s.tfrecord", compress=compress)
    with RecordFile(path, compression) as records:
        assert records.skip(2) == 2 and records.read() == RECORDS[2]
        assert records.skip(5) == 1 and records.read() is None


def test_a_flipped_data_byte_is_a_corrupted_record_at_tensorflows_offset(tmp_path):
    path = write(tmp_path / "d.tfrecord")
    data = bytearray(open(path, "rb").read())
    second = len(frame_record(RECORDS[0])) + len(frame_record(RECORDS[1]))  # record 2's offset
    data[second + 12 + 5] ^= 1
    open(path, "wb").write(bytes(data))
    with pytest.raises(DamagedRecordError, match=f"{path}: corrupted record at {second + 12} ") as error:
        read_all(path)
    assert exit_code(error.value) == 3
    with pytest.raises(tf.errors.DataLossError, match=f"corrupted record at {second + 12}"):
        list(tf.data.TFRecordDataset(path))


def test_a_flipped_length_byte_is_found_while_skipping_too(tmp_path):
    path = write(tmp_path / "l.tfrecord")
    data = bytearray(open(path, "rb").read())
    offset = len(frame_record(RECORDS[0]))
    data[offset + 1] ^= 1
    open(path, "wb").write(bytes(data))
    with RecordFile(path) as records, pytest.raises(DamagedRecordError, match=f"corrupted record at {offset} "):
        records.skip(3)


def huge_header() -> bytes:
    """A length header of 2**62 bytes with its correct CRC."""
    length = struct.pack("<Q", 1 << 62)
    return length + struct.pack("<I", masked_crc32c(length))


def test_a_length_beyond_the_file_is_a_truncated_record_not_an_allocation(tmp_path):
    path = str(tmp_path / "huge.tfrecord")
    open(path, "wb").write(frame_record(b"ok") + huge_header() + b"short")
    with RecordFile(path) as records:
        assert records.read() == b"ok"
        with pytest.raises(DamagedRecordError, match="truncated record at 18 "):
            records.read()


def test_a_gzip_length_beyond_the_stream_is_a_truncated_record(tmp_path):
    path = str(tmp_path / "huge.tfrecord.gz")
    open(path, "wb").write(gzip.compress(huge_header() + b"short"))
    with RecordFile(path, "GZIP") as records, pytest.raises(DamagedRecordError, match="truncated record at 0 "):
        records.read()


def test_a_file_cut_inside_a_record_is_a_truncated_record_as_tensorflow_says(tmp_path):
    path = write(tmp_path / "cut.tfrecord")
    data = open(path, "rb").read()
    offset = len(frame_record(RECORDS[0])) + len(frame_record(RECORDS[1]))
    open(path, "wb").write(data[:offset + 20])
    with pytest.raises(DamagedRecordError, match=f"truncated record at {offset} "):
        read_all(path)
    with pytest.raises(tf.errors.DataLossError, match=f"truncated record at {offset}"):
        list(tf.data.TFRecordDataset(path))


def test_a_file_cut_inside_a_length_header_ends_there_as_in_tensorflow(tmp_path):
    path = write(tmp_path / "header.tfrecord", RECORDS[:2])
    open(path, "ab").write(b"\x01\x02\x03")
    assert read_all(path) == RECORDS[:2] == [bytes(r.numpy()) for r in tf.data.TFRecordDataset(path)]


def test_a_remote_path_is_refused_in_one_line_naming_what_to_do():
    with pytest.raises(RemotePathError) as error:
        RecordFile("gs://bucket/data/train-00000-of-00001.tfrecord")
    message = str(error.value)
    assert "\n" not in message and "local disk" in message and exit_code(error.value) == 2


def test_the_manifest_loads_without_tensorflow_as_with_it(small_data_dir):
    from tfrecords.manifest import load_manifest

    assert load_local_manifest(small_data_dir) == load_manifest(small_data_dir)
    assert load_local_manifest(small_data_dir).directory == load_manifest(small_data_dir).directory
