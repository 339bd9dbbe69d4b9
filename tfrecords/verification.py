"""Checking a data directory's shard files against its manifest.

Two depths:

* ``check_shard_files`` and ``check_stream_starts``: cheap, run by `xlnet train` at start-up.
  Every shard the manifest lists exists and, where the manifest records ``bytes``, has that size
  (no record read); then one record per stream is read (the records between are skipped by their
  length headers) and parsed against the manifest's ``seq_len``, ``reuse_len`` and stream layout,
  and each shard must end after the records the manifest lists, so a manifest that does not
  describe its records is refused before training.
* ``verify_data_directory``: every record of every shard of every split is read back, files in
  parallel (one thread per file; TensorFlow releases the GIL while it reads and parses), and
  checked: TFRecord framing and CRCs, each record parsing as a record of the manifest's
  ``seq_len``, its ``stream_id`` and ``stream_pos`` where the manifest's stream layout puts it,
  token ids inside the vocabulary, the number of records, the file's size. `xlnet inspect
  DATA_DIR --verify` runs it.

A shard's report names the index of its first bad record: after a framing or CRC error the rest
of the file cannot be trusted, so reading stops there. TensorFlow is imported inside the
functions (the rule of tfrecords/), so that importing this module stays cheap.
"""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from tfrecords.errors import DataError
from tfrecords.manifest import Manifest, ShardEntry, StreamEntry
from tfrecords.schema import ALL_FEATURES, SEG_B, SEQUENCE_FEATURES, parse_records
from tfrecords.tensorflow_errors import error_text

# Records read and parsed per step: large enough that per-batch overhead is negligible.
BATCH_RECORDS = 512
DEFAULT_THREADS = 8


Item = TypeVar("Item")
Result = TypeVar("Result")


def each_in_threads(work: Callable[[Item], Result], items: list[Item], threads: int) -> list[Result]:
    """``work`` of every item, in order, ``threads`` at a time; the first item on the calling thread,
    before any other thread starts. `xlnet train`'s stream-start check runs the process's first
    TensorFlow ops; with every shard's first read started in a thread of its own, TensorFlow's lazy
    start-up (the eager context, the first tf.data iterator) was entered from several threads at
    once, in the window where a start died with SIGSEGV (a call through a null pointer, issue 40;
    not reproduced since, docs/reliability.md). TensorFlow does not promise that this start-up is
    safe to race, so the first item sets it up here, and the threads only use it."""
    if not items:
        return []
    first = work(items[0])
    with ThreadPoolExecutor(max(1, min(threads, len(items) - 1))) as pool:
        return [first, *pool.map(work, items[1:])]


class DamagedDataError(DataError):
    """Shard files that do not match their manifest (missing, or of another size): a data problem,
    not a usage error. The message names every such file and how to check the rest."""


@dataclasses.dataclass(frozen=True)
class BadRecord:
    """The first record of a shard that failed a check, and why."""

    index: int
    problem: str


@dataclasses.dataclass(frozen=True)
class ShardReport:
    """What verifying one shard file found."""

    split: str
    path: str
    size: int | None  # None when the file is missing
    records_read: int
    problems: tuple[str, ...]
    first_bad_record: int | None = None

    @property
    def damaged(self) -> bool:
        return bool(self.problems)

    def describe(self) -> str:
        """One line naming the file and every problem found, its first bad record first."""
        return f"DAMAGED {self.path}: " + "; ".join(self.problems)


@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """Every shard's report, in manifest order, and notes on checks that could not be made."""

    directory: str
    shards: tuple[ShardReport, ...]
    notes: tuple[str, ...] = ()

    @property
    def damaged(self) -> list[ShardReport]:
        return [shard for shard in self.shards if shard.damaged]

    def summary(self) -> str:
        """The one-line verdict."""
        records = sum(shard.records_read for shard in self.shards)
        size = sum(shard.size or 0 for shard in self.shards)
        read = f"{len(self.shards)} shard(s), {records} records in {size} bytes"
        if not self.damaged:
            return f"verified {self.directory}: {read}: all intact"
        missing = sum(shard.size is None for shard in self.shards)
        return (f"verified {self.directory}: {read}: {len(self.damaged)} of {len(self.shards)} shard(s) damaged"
                f"{f' ({missing} missing)' if missing else ''}")


# ------------------------------------------------------------------------------ the cheap check
def check_shard_files(manifest: Manifest, threads: int = DEFAULT_THREADS) -> bool:
    """Raises DamagedDataError when a listed shard is missing or, where the manifest records its
    size, has another size. Reads no record and runs no TensorFlow op (:func:`check_stream_starts`
    reads one per stream). Returns whether sizes were checked (an older manifest records none)."""
    shards = [shard for split in manifest.splits.values() for shard in split.shards]
    problems = [problem for problem in each_in_threads(lambda s: _file_problem(manifest, s), shards, threads)
                if problem]
    if problems:
        raise damaged(manifest, problems)
    return any(shard.bytes is not None for shard in shards)


def check_stream_starts(manifest: Manifest, threads: int = DEFAULT_THREADS) -> None:
    """Raises DamagedDataError when a shard's records do not match the manifest: its record count, or
    the first record of one of its streams (see :func:`stream_start_problem`). Reads one record per
    stream through tf.data, so it runs TensorFlow ops: `xlnet train` runs it once its strategy is
    made (a deterministic or multi-worker run must configure TensorFlow before its first op)."""
    shards = [shard for split in manifest.splits.values() for shard in split.shards]
    problems = [problem for problem in each_in_threads(lambda s: stream_start_problem(manifest, s), shards, threads)
                if problem]
    if problems:
        raise damaged(manifest, problems)


def damaged(manifest: Manifest, problems: list[str]) -> DamagedDataError:
    """The error naming every damaged shard of ``manifest`` and how to check the rest."""
    return DamagedDataError(f"damaged data in {manifest.directory}: " + "; ".join(problems)
                            + f"; run `xlnet inspect {manifest.directory} --verify` to check every record")


def stream_start_problem(manifest: Manifest, shard: ShardEntry) -> str | None:
    """What is wrong with the shard's record count or with the first record of one of its streams,
    against the manifest; None when all agree. One record per stream is read and parsed (as a record
    of the manifest's ``seq_len``, at its stream's id and position 0, with room for the manifest's
    ``reuse_len``), and the last record the manifest lists must be the file's last. The records in
    between are skipped, not read: TFRecordDataset.skip reads only their length headers."""
    import tensorflow as tf

    path = manifest.shard_path(shard)

    def records_from(index: int, count: int) -> list:
        dataset = tf.data.TFRecordDataset(path, compression_type=manifest.compression_type, buffer_size=1 << 20)
        return list(dataset.skip(index).take(count))

    try:
        if shard.records:
            tail = records_from(shard.records - 1, 2)
            if not tail:
                dataset = tf.data.TFRecordDataset(path, compression_type=manifest.compression_type)
                return f"{path}: {short_file(shard, int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)))}"
            if len(tail) > 1:
                return f"{path}: holds more than the {shard.records} records the manifest lists (records)"
        for stream in sorted(shard.streams, key=lambda s: s.first_record_index_in_file):
            if stream.records:
                (record,) = records_from(stream.first_record_index_in_file, 1)
                problem = first_record_problem(record, stream, manifest)
                if problem:
                    return (f"{path}: record {stream.first_record_index_in_file}, the first of stream "
                            f"{stream.stream_id}: {problem}")
    except tf.errors.OpError as error:
        return f"{path}: cannot be read ({error_text(error)})"
    return None


def stream_at(shard: ShardEntry, index: int) -> StreamEntry | None:
    """The stream the manifest places record ``index`` of the shard in (the first not to end before it)."""
    return next((stream for stream in sorted(shard.streams, key=lambda s: s.first_record_index_in_file)
                 if stream.first_record_index_in_file + stream.records > index), None)


def short_file(shard: ShardEntry, count: int) -> str:
    """A shard file that ends after ``count`` records, fewer than its manifest lists, in words: the
    stream it ends inside (the first one that does not hold its records)."""
    stream = stream_at(shard, count)
    first = stream.first_record_index_in_file
    return (f"the file ends after {count} records, the manifest lists {shard.records} (records): stream "
            f"{stream.stream_id} ({stream.records} records from record {first}) "
            + (f"holds only {count - first}" if count > first else "is not there"))


def first_record_problem(serialized, stream: StreamEntry, manifest: Manifest) -> str | None:
    """What does not match the manifest in a stream's first record (the record's features and their
    lengths against ``seq_len``, its stream_id and stream_pos, room for ``reuse_len``), or None."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    seq_len, reuse_len = manifest.seq_len, manifest.reuse_len
    try:
        features = example_pb2.Example.FromString(serialized.numpy()).features.feature
    except DecodeError:
        return "not a record (it does not decode as a tf.train.Example)"
    values = {}
    for name in ALL_FEATURES:
        if name not in features or features[name].WhichOneof("kind") != "int64_list":
            return f"lacks the integer feature {name} of the record schema"
        values[name] = np.asarray(features[name].int64_list.value, np.int64)
    for name in SEQUENCE_FEATURES:
        if len(values[name]) != seq_len:
            return f"{name} holds {len(values[name])} values, the manifest's seq_len is {seq_len} (seq_len)"
    stream_id, stream_pos = int(values["stream_id"][0]), int(values["stream_pos"][0])
    if (stream_id, stream_pos) != (stream.stream_id, 0):
        return (f"holds stream_id {stream_id}, stream_pos {stream_pos}; the manifest's stream layout puts "
                f"stream_id {stream.stream_id}, stream_pos 0 there")
    b_positions = np.flatnonzero(values["segment_ids"] == SEG_B)
    if len(b_positions) and b_positions[0] < reuse_len + 2:
        return (f"its second part (B) starts at position {b_positions[0]}, too early for the manifest's reuse_len "
                f"{reuse_len} (reuse_len: the context, one token of A and <sep> come before B)")
    return None


def _file_problem(manifest: Manifest, shard: ShardEntry) -> str | None:
    path = manifest.shard_path(shard)
    if "://" not in path:  # Python's own checks: a host without TensorFlow checks its data too
        if not os.path.exists(path):
            expected = f"expected {shard.bytes} bytes" if shard.bytes is not None else "listed in the manifest"
            return f"{path}: {expected}, found no such file"
        try:
            size = os.path.getsize(path) if shard.bytes is not None else None
        except OSError as error:
            return f"{path}: cannot be checked ({error.strerror})"
        return None if size == shard.bytes else f"{path}: expected {shard.bytes} bytes, found {size} bytes"
    import tensorflow as tf

    try:
        if not tf.io.gfile.exists(path):
            expected = f"expected {shard.bytes} bytes" if shard.bytes is not None else "listed in the manifest"
            return f"{path}: {expected}, found no such file"
        size = tf.io.gfile.stat(path).length if shard.bytes is not None else None
    except tf.errors.OpError as error:  # e.g. no permission: the file cannot be vouched for
        return f"{path}: cannot be checked ({error_text(error)})"
    if size != shard.bytes:
        return f"{path}: expected {shard.bytes} bytes, found {size} bytes"
    return None


# ---------------------------------------------------------------------------- the full reading
def verify_data_directory(manifest: Manifest, threads: int = DEFAULT_THREADS) -> VerificationReport:
    """Reads every record of every shard of every split (``threads`` files at a time) and checks it
    against ``manifest``; see the module docstring for the checks."""
    jobs = [(name, shard) for name, split in manifest.splits.items() for shard in split.shards]
    vocab_size = manifest.vocab.get("vocab_size")
    reports = tuple(each_in_threads(lambda job: verify_shard(manifest, job[0], job[1], vocab_size), jobs, threads))
    notes = ()
    if vocab_size is None:
        notes = ("token ids not checked: the manifest records no vocab_size",)
    if any(shard.bytes is None for _, shard in jobs):
        notes += ("file sizes not checked: the manifest records none (written before sizes were recorded)",)
    return VerificationReport(manifest.directory, reports, notes)


def verify_shard(manifest: Manifest, split: str, shard: ShardEntry, vocab_size: int | None) -> ShardReport:
    """Reads one shard file through and reports what does not match its manifest entry."""
    import tensorflow as tf

    path = manifest.shard_path(shard)
    try:
        if not tf.io.gfile.exists(path):
            return ShardReport(split, path, None, 0, ("missing (the manifest lists it, the directory lacks it)",))
        size = tf.io.gfile.stat(path).length
    except tf.errors.OpError as error:  # e.g. no permission: the file cannot be vouched for
        return ShardReport(split, path, None, 0, (f"cannot be read ({error_text(error)})",))
    problems = []
    if shard.bytes is not None and size != shard.bytes:
        problems.append(f"{size} bytes, the manifest says {shard.bytes}")
    check = record_checker(shard, manifest.seq_len, vocab_size)
    records_read, bad = scan_records(path, manifest.compression_type, check)
    if bad is None and records_read != shard.records:
        inside = stream_at(shard, records_read)
        where = (f" (stream {inside.stream_id} ends early: the manifest lists {inside.records} records of it from "
                 f"record {inside.first_record_index_in_file})" if inside is not None else "")
        bad = BadRecord(records_read, f"the file ends after {records_read} records, the manifest says "
                                      f"{shard.records}{where}")
    if bad is not None:
        problems.insert(0, f"first bad record {bad.index}: {bad.problem}")
    return ShardReport(split, path, size, records_read, tuple(problems), bad.index if bad else None)


# check(index of the batch's first record, batch of serialized records) -> the first bad record or None
Checker = Callable[[int, Any], Optional[BadRecord]]


def scan_records(path: str, compression: str, check: Checker) -> tuple[int, BadRecord | None]:
    """Reads a shard file through, handing ``check`` each batch of serialized records with the index
    of its first record; stops at the first bad record ``check`` returns. (records read, first bad
    record or None): batches while all is well; after a read error the failed batch is read again
    record by record, to name the exact record."""
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset(path, compression_type=compression, buffer_size=1 << 20)
    position = 0
    iterator = iter(dataset.batch(BATCH_RECORDS))
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return position, None
        except tf.errors.OpError:
            return _scan_one_by_one(dataset.skip(position), position, check)
        bad = check(position, batch)
        if bad is not None:
            return bad.index, bad
        position += int(batch.shape[0])


def _scan_one_by_one(dataset, position: int, check: Checker) -> tuple[int, BadRecord | None]:
    import tensorflow as tf

    iterator = iter(dataset)
    while True:
        try:
            record = next(iterator)
        except StopIteration:  # the error did not repeat: nothing to name
            return position, None
        except tf.errors.OpError as error:
            return position, BadRecord(position, f"unreadable ({error_text(error)})")
        bad = check(position, tf.reshape(record, [1]))
        if bad is not None:
            return position, bad
        position += 1


def record_checker(shard: ShardEntry, seq_len: int, vocab_size: int | None) -> Checker:
    """The checks of `xlnet inspect --verify` for one shard's records, as a Checker: a check of a batch of serialized records starting at a record index: parse, stream layout,
    token ids. Returns the first bad record of the batch, or None."""
    expected_stream = np.full(shard.records, -1, np.int64)
    expected_pos = np.zeros(shard.records, np.int64)
    for stream in shard.streams:
        first = stream.first_record_index_in_file
        expected_stream[first:first + stream.records] = stream.stream_id
        expected_pos[first:first + stream.records] = np.arange(stream.records)

    def check(start: int, batch) -> BadRecord | None:
        parsed = _parse(batch, seq_len, start)
        if isinstance(parsed, BadRecord):
            return parsed
        return _first_bad(start, parsed, expected_stream, expected_pos, vocab_size)

    return check


def _parse(batch, seq_len: int, start: int) -> dict | BadRecord:
    """The batch's features as NumPy arrays, or the first record that does not parse."""
    import tensorflow as tf

    try:
        return {name: value.numpy() for name, value in parse_records(batch, seq_len).items()}
    except tf.errors.InvalidArgumentError:
        for offset in range(int(batch.shape[0])):
            try:
                parse_records(batch[offset:offset + 1], seq_len)
            except tf.errors.InvalidArgumentError as error:
                return BadRecord(start + offset, f"not a record of seq_len {seq_len} ({error_text(error)})")
        return BadRecord(start, f"the records from here on do not parse together as seq_len {seq_len} records")


def _first_bad(start: int, parsed: dict, expected_stream: np.ndarray, expected_pos: np.ndarray,
               vocab_size: int | None) -> BadRecord | None:
    """The first record of a parsed batch that sits where the manifest does not expect it, or that
    holds a token id outside the vocabulary."""
    indices = np.arange(start, start + len(parsed["stream_id"]))
    findings = _layout_findings(indices, parsed, expected_stream, expected_pos)
    if vocab_size is not None:
        findings += _token_findings(start, parsed["input_ids"], vocab_size)
    return BadRecord(*min(findings)) if findings else None


def _layout_findings(indices: np.ndarray, parsed: dict, expected_stream: np.ndarray,
                     expected_pos: np.ndarray) -> list[tuple[int, str]]:
    """(index, problem) of the first record beyond the manifest's count, and of the first whose
    stream_id or stream_pos is not where the manifest's stream layout puts it."""
    findings = []
    beyond = indices >= len(expected_stream)
    if beyond.any():
        findings.append((int(indices[beyond][0]), f"more records than the manifest's {len(expected_stream)}"))
    inside = indices[~beyond]
    for name, expected in (("stream_id", expected_stream), ("stream_pos", expected_pos)):
        wrong = np.flatnonzero(parsed[name][:len(inside)] != expected[inside])
        if len(wrong):
            row = wrong[0]
            findings.append((int(inside[row]), f"{name} {parsed[name][row]}, the manifest's layout puts "
                                               f"{name} {expected[inside[row]]} here"))
    return findings


def _token_findings(start: int, ids: np.ndarray, vocab_size: int) -> list[tuple[int, str]]:
    """(index, problem) of the first record holding a token id outside [0, vocab_size)."""
    outside = (ids < 0) | (ids >= vocab_size)
    rows = np.flatnonzero(outside.any(axis=1))
    if not len(rows):
        return []
    first = ids[rows[0]][outside[rows[0]]][0]
    return [(start + int(rows[0]), f"token id {first} outside the vocabulary (size {vocab_size})")]
