"""Reading corpus files through Beam filesystems (local, gs://, ...), plain, .gz or .bz2.

Three input formats:

* ``text``: the XLNet corpus format. One sentence per line; a blank line ends a document;
  a line may end with ``<eop>`` to mark a paragraph end.
* ``jsonl``: one JSON object per line; its ``text_field`` string is one document whose
  non-blank lines are its sentences.
* ``parquet``: one document per row, from its ``text_field`` column, by the same rules
  (pipeline/parquet_input.py).

Robustness rules (each case is counted in ``stats`` under the given key, never silent):

* ``invalid_lines``: a line that is not valid UTF-8, contains a NUL byte (binary junk), or
  (jsonl) is not a JSON object with a string ``text_field``. The line is skipped; it does
  not end the document.
* ``long_lines``: a line longer than ``max_line_bytes`` is skipped without ever holding more
  than ``max_line_bytes`` plus one read chunk in memory.
* ``empty_files``: a file without a single valid line.

Documents are identified by a stable key ``"<file key>:<index in file>"`` where the file
key is the path relative to the non-wildcard prefix of the glob that matched it, so the
same corpus copied from local disk to Cloud Storage keeps its keys (and its splits/streams).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import zlib
from collections import Counter, deque
from dataclasses import dataclass
from typing import Iterable, Iterator

from pipeline.parquet_input import ParquetInputError, check_parquet_files, parquet_documents
from tfrecords.corpus_text import INPUT_FORMATS as LINE_FORMATS
from tfrecords.corpus_text import (  # noqa: F401 (read_raw_lines: this module's readers' API)
    decode_line,
    decompressed,
    directory_input_problem,
    documents_of,
    format_by_name,
    jsonl_documents,
    read_raw_lines,
    text_documents,
)
from tfrecords.errors import UsageError

# Apache Beam's filesystems are imported where files are read: the commands check their flags
# (importing this module for its constants) before paying for Beam's start-up.

# The line formats `xlnet score` reads too (tfrecords/corpus_text.py), and Parquet, which only preprocessing reads.
INPUT_FORMATS = LINE_FORMATS + ("parquet",)
INPUT_FORMAT_HELP = ("text: one sentence per line, blank line between documents; jsonl: one JSON document "
                     "per line; parquet: one document per row (--text-field's column); auto: jsonl for "
                     "*.jsonl/*.ndjson, parquet for *.parquet")
PARQUET_NAME = re.compile(r"\.parquet$")
_GLOB_CHARS = re.compile(r"[*?\[]")


class CorpusError(UsageError):
    """A corpus input problem found before processing (bad glob, unreadable path)."""


@dataclass(frozen=True)
class InputFile:
    """One matched corpus file: its full path and its stable key for document hashing."""

    path: str
    key: str
    size_bytes: int


def _static_prefix(pattern: str) -> str:
    """The directory part of ``pattern`` before its first wildcard."""
    match = _GLOB_CHARS.search(pattern)
    head = pattern[: match.start()] if match else pattern
    return head.rsplit("/", 1)[0] + "/" if "/" in head else ""


def expand_inputs(patterns: Iterable[str]) -> list[InputFile]:
    """Matches every glob through Beam filesystems; raises CorpusError naming a glob that matches nothing."""
    from apache_beam.io.filesystems import FileSystems

    files: dict[str, InputFile] = {}
    for pattern in patterns:
        if not _GLOB_CHARS.search(pattern) and (pattern.endswith("/") or _is_directory(pattern)):
            raise _directory_error(pattern)
        try:
            metadata = FileSystems.match([pattern])[0].metadata_list
        except Exception as error:  # Beam raises BeamIOError with nested details
            raise CorpusError(f"--input {pattern!r}: cannot list files: {error}") from error
        directories = [m.path for m in metadata if _is_directory(m.path)]
        matched = [m for m in metadata if not m.path.endswith("/") and m.path not in directories]
        if directories and (not matched or not _GLOB_CHARS.search(pattern)):
            raise _directory_error(pattern)
        if not matched:
            if not _GLOB_CHARS.search(pattern) and _holds_files(pattern):  # an object store's "directory"
                raise _directory_error(pattern)
            raise CorpusError(f"--input {pattern!r} matches no files")
        prefix = _static_prefix(pattern)
        for meta in matched:
            key = meta.path[len(prefix):] if prefix and meta.path.startswith(prefix) else posixpath.basename(meta.path)
            files.setdefault(meta.path, InputFile(meta.path, key, meta.size_in_bytes))
    return sorted(files.values(), key=lambda f: f.path)


def _is_directory(path: str) -> bool:
    """A local directory (Beam's local match returns a directory named without wildcards)."""
    return "://" not in path and os.path.isdir(path)


def _holds_files(pattern: str) -> bool:
    """Whether there are files under ``pattern`` taken as a directory."""
    from apache_beam.io.filesystems import FileSystems

    try:
        return bool(FileSystems.match([pattern.rstrip("/") + "/*"])[0].metadata_list)
    except Exception:  # cannot list it: the caller's "matches no files" stands
        return False


def _directory_error(pattern: str) -> CorpusError:
    return CorpusError(directory_input_problem(pattern))


def resolve_format(path: str, input_format: str) -> str:
    """'text', 'jsonl' or 'parquet' for a file: ``auto`` picks jsonl for *.jsonl / *.ndjson (optionally
    compressed), parquet for *.parquet."""
    if input_format not in INPUT_FORMATS:
        raise CorpusError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}, got {input_format!r}")
    if input_format != "auto":
        return input_format
    return "parquet" if PARQUET_NAME.search(path) else format_by_name(path)


def check_parquet_inputs(files: list[InputFile], input_format: str, text_field: str) -> None:
    """The Parquet inputs' footers read before any work: ParquetInputError (exit 3) in one line naming the first
    file that is not Parquet, lacks ``text_field``'s column or holds no strings in it."""
    check_parquet_files([f.path for f in files if resolve_format(f.path, input_format) == "parquet"], text_field)


class _CountingReader:
    """A binary file handle that counts the stored bytes read through it (``position``)."""

    def __init__(self, handle):
        self._handle = handle
        self.position = 0

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self.position += len(data)
        return data

    def __getattr__(self, name: str):
        return getattr(self._handle, name)

    def __enter__(self) -> "_CountingReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self._handle.close()




def read_documents(path: str, input_format: str = "auto", text_field: str = "text",
                   max_line_bytes: int = 1 << 20, stats: Counter | None = None) -> Iterator[list[str]]:
    """Yields the documents (lists of raw sentence lines) of one corpus file.

    Compression is detected from the extension (.gz, .bz2). Problems are counted in
    ``stats`` (see the module docstring); a file that cannot be decompressed, or is
    truncated, raises CorpusError naming it. ``stats["bytes_read"]`` counts the stored
    (compressed) bytes read so far, so a reader can tell how much of a failed file was lost.
    """
    for _, document in _read(path, input_format, text_field, max_line_bytes, stats, identified=False):
        yield document


def read_identified_documents(path: str, input_format: str = "auto", text_field: str = "text",
                              max_line_bytes: int = 1 << 20, stats: Counter | None = None) -> Iterator[
                                  tuple[str | int, list[str]]]:
    """read_documents' documents with the id a user finds each by (``--removed``): a JSON line's ``id``
    field (a string or an integer), otherwise ``"PATH:LINE"``, the file and line number (from 1, every
    line of the file counted) of the document's first line."""
    yield from _read(path, input_format, text_field, max_line_bytes, stats, identified=True)


def _read(path: str, input_format: str, text_field: str, max_line_bytes: int, stats: Counter | None,
          identified: bool) -> Iterator[tuple[str | int | None, list[str]]]:
    """(id or None, document) of one corpus file: read_documents' rules."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    stats = Counter() if stats is None else stats
    file_format = resolve_format(path, input_format)
    before = stats["lines"] + stats["invalid_lines"] + stats["long_lines"]
    stored = None
    try:
        stored = _CountingReader(FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED))
        with (stored if file_format == "parquet" else decompressed(stored, path)) as handle:  # by extension
            if file_format == "parquet":
                documents = parquet_documents(handle, path, text_field, max_line_bytes, stats, identified)
            elif identified:
                documents = _identified_documents(handle, path, file_format, text_field, max_line_bytes, stats)
            else:
                documents = ((None, document) for document in
                             documents_of(handle, file_format, text_field, max_line_bytes, stats))
            for identity, document in documents:
                stats["bytes_read"] = stored.position
                yield identity, document
        stats["bytes_read"] = stored.position
    except (OSError, EOFError, ValueError, zlib.error, ParquetInputError) as error:  # the last: a file changed
        stats["bytes_read"] = stored.position if stored is not None else 0
        if isinstance(error, CorpusError):
            raise
        raise CorpusError(str(error) if isinstance(error, ParquetInputError) else f"{path}: cannot read: {error}") \
            from error
    if stats["lines"] + stats["invalid_lines"] + stats["long_lines"] == before:
        stats["empty_files"] += 1


class _LineNumbers:
    """The raw lines of a file passed on, remembering the number of the last one and its text once
    decoded: the skipped over-long lines (``stats["long_lines"]``, counted before the next line is
    passed) are counted in the numbers."""

    def __init__(self, raw: Iterator[bytes], stats: Counter):
        self._raw = raw
        self._stats = stats
        self._long_before = stats["long_lines"]
        self._passed = 0
        self.current = 0
        self.text = ""

    def valid_lines(self) -> Iterator[str]:
        for raw in self._raw:
            self._passed += 1
            self.current = self._passed + self._stats["long_lines"] - self._long_before
            line = decode_line(raw, self._stats)
            if line is not None:
                self.text = line
                yield line


def _identified_documents(handle, path: str, file_format: str, text_field: str, max_line_bytes: int,
                          stats: Counter) -> Iterator[tuple[str | int, list[str]]]:
    """(id, document) of a decompressed handle: documents_of's documents, read by the same rules. The
    readers are generators that yield a document as soon as its last line (jsonl: its only line; text: the
    blank line after it) is read, so the line numbers remembered at that moment are the document's."""
    lines = _LineNumbers(read_raw_lines(handle, max_line_bytes, stats), stats)
    if file_format == "jsonl":
        for document in jsonl_documents(lines.valid_lines(), text_field, stats):
            yield _json_id(lines.text) or f"{path}:{lines.current}", document
        return
    starts: deque[int] = deque()

    def marked(valid: Iterator[str]) -> Iterator[str]:
        inside = False
        for line in valid:
            if line.strip() and not inside:
                starts.append(lines.current)
            inside = bool(line.strip())
            yield line

    for document in text_documents(marked(lines.valid_lines()), stats):
        yield f"{path}:{starts.popleft()}", document


def _json_id(line: str) -> str | int | None:
    """A JSON line's ``id`` field when it is a string or an integer."""
    value = json.loads(line).get("id")
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None
