"""Labeled text files, read through tf.io.gfile: the readers every fine-tuning input shares.

Paths and globs may be local or gs:// (they stay plain strings: pathlib would turn ``gs://b/x``
into ``gs:/b/x``). Every problem with a file is a :class:`FinetuneDataError` naming the file and,
where there is one, the line.

* CSV (RFC 4180 quoting, header row), TSV (header row, fields split on tabs, no quoting: the
  GLUE convention) or JSON lines (one object per line), chosen by extension (``.csv``, ``.tsv``,
  ``.jsonl``/``.json``) unless a format is given: :func:`rows`. No format limits a field's length
  (the encoder truncates long texts).
* A whole file as text (:func:`read_text`), the files of a glob in sorted order
  (:func:`matching_files`), and a typed required field of a row (:func:`field`), used by the
  SQuAD reader too (trainer/inputs/squad.py).
"""
from __future__ import annotations

import contextlib
import csv
import io
import posixpath
import threading
from typing import Any, Iterator

import tensorflow as tf

from tfrecords.errors import DataError, UsageError
from tfrecords.json_documents import load_json
from tfrecords.tensorflow_errors import UNREACHABLE_ADVICE, is_unreachable

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
# csv.field_size_limit is one setting of the whole process: raised only while a record is parsed,
# under this lock, so that concurrent readers cannot restore each other's value.
_FIELD_SIZE_LIMIT_LOCK = threading.Lock()
_LARGEST_FIELD_SIZE_LIMIT = 2**31 - 1  # the C long csv takes, on every platform


class FinetuneDataError(UsageError):
    """An input file that cannot be used as given; the message names the file and line."""


class InputUnreachableError(DataError):
    """The storage of an input file did not answer (no network, a host that cannot be resolved);
    the path may be right (exit status 3, as trainer/runtime/storage.py's StorageUnreachableError)."""


def input_failure(path: str, doing: str, error: tf.errors.OpError) -> FinetuneDataError | InputUnreachableError:
    """The error for ``error`` met while ``doing`` ("cannot read") ``path``: unreachable storage, or a
    file that cannot be used."""
    message = error.message.splitlines()[0]
    if is_unreachable(message):
        return InputUnreachableError(f"{path} cannot be reached: {message} ({UNREACHABLE_ADVICE})")
    return FinetuneDataError(f"{path}: {doing}: {message}")



def matching_files(pattern: str) -> list[str]:
    """Files matching a path or glob, sorted so reading order never depends on the filesystem."""
    try:
        files = sorted(tf.io.gfile.glob(pattern))
    except tf.errors.OpError as error:
        raise input_failure(pattern, "cannot list files", error) from None
    if not files:
        raise FinetuneDataError(f"{pattern}: no file matches")
    return files


def read_text(path: str) -> str:
    """A whole file as text (a leading UTF-8 byte-order mark, as spreadsheets write, dropped)."""
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            data = handle.read()
    except tf.errors.OpError as error:
        raise input_failure(path, "cannot read", error) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise FinetuneDataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def file_format_of(path: str, file_format: str | None) -> str:
    """``file_format`` if given, else the one the extension names."""
    if file_format is not None:
        if file_format not in set(FORMATS.values()):
            raise FinetuneDataError(f"unknown file format {file_format!r}: use csv, tsv or jsonl")
        return file_format
    extension = posixpath.splitext(path)[1].lower()
    if extension not in FORMATS:
        raise FinetuneDataError(f"{path}: cannot tell the format from the extension; "
                                f"name it .csv, .tsv or .jsonl, or give the format")
    return FORMATS[extension]


def delimited_rows(path: str, text: str, delimiter: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) for each record of a CSV/TSV file with a header; blank lines skipped. A field
    may be as long as the file: no length limit, as for JSON lines (the encoder truncates)."""
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True)
    header: list[str] | None = None
    end = 0
    try:
        for record in _records(reader, limit=len(text)):
            # A quoted CSV field may span lines: report the record's first line.
            line, end = end + 1, reader.line_num
            if not record:
                continue
            if header is None:
                header = record
            elif len(record) != len(header):
                raise FinetuneDataError(f"{path}:{line}: {len(record)} fields, the header has {len(header)}")
            else:
                yield line, dict(zip(header, record))
    except csv.Error as error:
        raise FinetuneDataError(f"{path}:{reader.line_num}: {error}") from None


def _records(reader: Iterator[list[str]], limit: int) -> Iterator[list[str]]:
    """The records of a csv reader, each parsed with fields of up to ``limit`` characters allowed
    (csv's default, 131,072, would refuse a long text), the process's limit restored in between."""
    while True:
        with _field_size_limit(limit):
            record = next(reader, None)
        if record is None:
            return
        yield record


@contextlib.contextmanager
def _field_size_limit(limit: int) -> Iterator[None]:
    """csv.field_size_limit at least ``limit`` inside the block, as it was after it."""
    with _FIELD_SIZE_LIMIT_LOCK:
        previous = csv.field_size_limit()
        csv.field_size_limit(max(previous, min(limit, _LARGEST_FIELD_SIZE_LIMIT)))
        try:
            yield
        finally:
            csv.field_size_limit(previous)


def json_rows(path: str, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) for each non-blank line of a JSON-lines file."""
    # Only "\n" ends a line: str.splitlines would also split at U+2028 or U+0085, which
    # json.dumps(ensure_ascii=False) leaves unescaped inside strings.
    for line, content in enumerate(text.split("\n"), start=1):
        if not content.strip():
            continue
        row = load_json(content, f"{path}:{line}", FinetuneDataError)  # deep nesting too: one line naming it
        if not isinstance(row, dict):
            raise FinetuneDataError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
        yield line, row


def rows(pattern: str, file_format: str | None) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(path, line, row) over every matching file; a file without rows is an error."""
    for path in matching_files(pattern):
        kind = file_format_of(path, file_format)
        text = read_text(path)
        rows = json_rows(path, text) if kind == "jsonl" else delimited_rows(path, text, _DELIMITERS[kind])
        empty = True
        for line, row in rows:
            empty = False
            yield path, line, row
        if empty:
            raise FinetuneDataError(f"{path}: no examples in the file")


def field(row: Any, name: str, where: str, kind: type | tuple[type, ...] = str,
          error: type[FinetuneDataError] = FinetuneDataError) -> Any:
    """A required field of type ``kind`` of a JSON object or a CSV/TSV row; ``error`` (a
    FinetuneDataError) names ``where``, the field and what was found. A JSON true/false is never
    taken for an integer."""
    if not isinstance(row, dict):
        raise error(f"{where}: expected a JSON object, got {type(row).__name__}")
    if name not in row:
        raise error(f"{where}: missing field {name!r} (fields: {', '.join(map(str, row))})")
    value = row[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        found = "null" if value is None else type(value).__name__
        raise error(f"{where}: field {name!r} is {found}, expected {type_names(kind)}")
    return value


def type_names(kind: type | tuple[type, ...]) -> str:
    """``str``, or ``str or int`` for a tuple of types, as error messages name them."""
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
