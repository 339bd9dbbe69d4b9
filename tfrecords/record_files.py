"""TFRecord files and the manifest read without TensorFlow, for the NumPy reader (tfrecords/numpy_reader.py).

A TFRecord is ``length`` (uint64, little-endian), the masked CRC32C of those 8 bytes, ``length`` bytes
of data and the masked CRC32C of the data. Both CRCs are checked (google_crc32c). A damaged record is
a DamagedRecordError (exit status 3) in TensorFlow's words ("corrupted record at OFFSET", "truncated
record at OFFSET", OFFSET counted in the uncompressed stream as TFRecordDataset counts it), with the
file's path in front. As TFRecordDataset: records skipped (``skip``) have their length header checked
but not their data; a file that ends inside a length header ends there (the readers then report the
stream that ended early). Stricter than TensorFlow, which returns a last record whose data CRC was cut
off unchecked: that record is reported truncated here.

Files are read with plain ``open``: the repository's only remote-storage access is TensorFlow's
filesystem (tf.io.gfile), so a path with a scheme (gs://...) is refused in one line saying what to do.
Paths stay plain strings (pathlib would mangle gs://).
"""
from __future__ import annotations

import gzip
import io
import os
import struct
import zlib
from typing import BinaryIO

import google_crc32c

from tfrecords.errors import DataError, UsageError
from tfrecords.manifest import Manifest, manifest_location, missing_manifest_error, parse_manifest

HEADER_BYTES = 12  # uint64 length + masked CRC32C of it
FOOTER_BYTES = 4  # masked CRC32C of the data
READ_BUFFER_BYTES = 256 << 10
# Compressed streams have no size to check a length against, so their records are read in chunks of
# at most this many bytes: a damaged length costs the rest of the stream, never a 2**64-byte buffer.
CHUNK_BYTES = 1 << 20
COMPRESSION_TYPES = ("", "GZIP", "ZLIB")
_MASK_DELTA = 0xA282EAD8


class DamagedRecordError(DataError):
    """A shard whose bytes are not whole TFRecords (a CRC mismatch, a record cut short): what the
    tf.data reader reports as TensorFlow's DataLossError, exit status 3."""


class RemotePathError(UsageError):
    """A path the TensorFlow-free reader cannot open (a scheme such as gs://): exit status 2."""


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C of ``data`` (CRC rotated right by 15 bits plus a constant)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord (what tf.io.TFRecordWriter writes for it)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def check_local(path: str) -> str:
    """``path`` when it is a local file path; RemotePathError naming what to do for any other scheme."""
    if "://" in path:
        raise RemotePathError(f"{path}: the TensorFlow-free reader reads local files only (this repository reaches "
                              "gs:// and other remote storage through TensorFlow's tf.io.gfile); copy the data "
                              "directory to a local disk (gcloud storage cp -r) or read it with tfrecords.reader")
    return path


def load_local_manifest(path: str) -> Manifest:
    """DIR/manifest.json (``path`` the directory or the file) read with plain ``open`` and validated
    as tfrecords.manifest.load_manifest does through tf.io.gfile."""
    file_path, _ = manifest_location(check_local(path))
    if not os.path.isfile(file_path):
        raise missing_manifest_error(file_path)
    with open(file_path, "rb") as handle:
        return parse_manifest(handle.read(), file_path)


class ZlibReader(io.RawIOBase):
    """The decompressed bytes of a zlib stream (TFRecordDataset's compression_type "ZLIB")."""

    def __init__(self, raw: BinaryIO):
        super().__init__()
        self._raw, self._zlib, self._pending = raw, zlib.decompressobj(), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending and not self._zlib.eof:
            compressed = self._zlib.unconsumed_tail or self._raw.read(READ_BUFFER_BYTES)
            if not compressed:
                break
            self._pending = self._zlib.decompress(compressed, len(buffer))
        count = min(len(buffer), len(self._pending))
        buffer[:count], self._pending = self._pending[:count], self._pending[count:]
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_stream(path: str, compression: str) -> tuple[BinaryIO, int | None]:
    """(the file's uncompressed bytes, its size when known: uncompressed files only)."""
    if compression not in COMPRESSION_TYPES:
        raise UsageError(f"{path}: compression type {compression!r} is not one of TFRecordDataset's "
                         f"{', '.join(repr(c) for c in COMPRESSION_TYPES)}")
    raw = open(check_local(path), "rb", buffering=READ_BUFFER_BYTES)
    if compression == "GZIP":
        return gzip.GzipFile(fileobj=raw, mode="rb"), None
    if compression == "ZLIB":
        return io.BufferedReader(ZlibReader(raw), READ_BUFFER_BYTES), None
    return raw, os.fstat(raw.fileno()).st_size


class RecordFile:
    """One TFRecord file read record by record from its start (``skip``, then ``read``)."""

    def __init__(self, path: str, compression: str = ""):
        self.path = path
        self._stream, self._size = open_stream(path, compression)
        self._raw = self._stream if compression == "" else None
        self.offset = 0  # of the next record, in the uncompressed stream
        self.index = 0  # of the next record

    def __enter__(self) -> "RecordFile":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._stream.close()

    def skip(self, count: int) -> int:
        """Skips up to ``count`` records by their length headers (data not read, as TFRecordDataset's
        skip); returns how many there were."""
        for skipped in range(count):
            length = self._header()
            if length is None:
                return skipped
            if self._raw is not None:
                self._check_room(length)
                self._raw.seek(self.offset + HEADER_BYTES + length + FOOTER_BYTES)
            elif len(self._read_up_to(length + FOOTER_BYTES)) < length + FOOTER_BYTES:
                raise self._truncated(length)
            self._advance(length)
        return count

    def read(self) -> bytes | None:
        """The next record's data, both CRCs checked; None at the end of the file."""
        length = self._header()
        if length is None:
            return None
        self._check_room(length)
        body = self._read_up_to(length + FOOTER_BYTES)
        if len(body) < length + FOOTER_BYTES:
            raise self._truncated(length)
        data = body[:length]
        if struct.unpack("<I", body[length:])[0] != masked_crc32c(data):
            raise DamagedRecordError(f"{self.path}: corrupted record at {self.offset + HEADER_BYTES} "
                                     f"(record {self.index}: its data does not match its CRC)")
        self._advance(length)
        return data

    def _header(self) -> int | None:
        header = self._read(HEADER_BYTES)
        if len(header) < HEADER_BYTES:  # TFRecordDataset ends the file there too, even mid-header
            return None
        if struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
            hint = " (Is this even a TFRecord file?)" if self.offset == 0 else ""
            raise DamagedRecordError(f"{self.path}: corrupted record at {self.offset}{hint} (record {self.index}: "
                                     "its length does not match its CRC)")
        return struct.unpack("<Q", header[:8])[0]

    def _check_room(self, length: int) -> None:
        if self._size is not None and self.offset + HEADER_BYTES + length + FOOTER_BYTES > self._size:
            raise self._truncated(length)

    def _truncated(self, length: int) -> DamagedRecordError:
        return DamagedRecordError(f"{self.path}: truncated record at {self.offset} (record {self.index}: its length "
                                  f"says {length} bytes and its CRC 4 more, the file ends before them)")

    def _read_up_to(self, count: int) -> bytes:
        if self._size is not None:  # the size was checked: one read
            return self._read(count)
        parts, left = [], count
        while left:
            part = self._read(min(left, CHUNK_BYTES))
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    def _read(self, count: int) -> bytes:
        try:
            return self._stream.read(count)
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:  # a compressed stream cut short or damaged
            raise DamagedRecordError(f"{self.path}: its compressed stream is damaged after record {self.index} "
                                     f"({type(error).__name__}: {error})") from None

    def _advance(self, length: int) -> None:
        self.offset += HEADER_BYTES + length + FOOTER_BYTES
        self.index += 1
