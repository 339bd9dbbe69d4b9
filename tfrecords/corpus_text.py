"""The corpus formats `xlnet preprocess` reads, as rules on lines: one place for the pipeline's
reader (Beam filesystems, pipeline/corpus.py) and the trainer's (tf.io.gfile, `xlnet score`).

* ``text``: the XLNet corpus format. One sentence per line; a blank line ends a document;
  a line may end with ``<eop>`` to mark a paragraph end.
* ``jsonl``: one JSON object per line; its ``text_field`` string is one document whose
  non-blank lines are its sentences.

Problems are counted in ``stats`` (``invalid_lines``: not UTF-8, a NUL byte, or a jsonl line that
is not an object with a string ``text_field``; ``long_lines``: longer than ``max_line_bytes``),
never silent. No Beam, no TensorFlow: a handle is any binary file object.
"""
from __future__ import annotations

import bz2
import gzip
import re
from collections import Counter
from typing import BinaryIO, Iterator

from tfrecords.json_documents import load_json

INPUT_FORMATS = ("auto", "text", "jsonl")
JSONL_NAME = re.compile(r"\.(jsonl|ndjson)(\.gz|\.bz2)?$")
READ_CHUNK = 1 << 20


def directory_input_problem(pattern: str, flag: str = "--input") -> str:
    """What to say when a corpus input names a directory (`xlnet preprocess`, `xlnet score`): its
    files are wanted, or a glob of them."""
    directory = pattern.rstrip("/")
    return f"{flag} {pattern!r} is a directory; give its files or a glob, e.g. {flag} '{directory}/*.txt'"


def format_by_name(path: str) -> str:
    """'jsonl' for *.jsonl / *.ndjson (optionally .gz/.bz2), else 'text': what ``auto`` picks."""
    return "jsonl" if JSONL_NAME.search(path) else "text"


def read_raw_lines(handle, max_line_bytes: int, stats: Counter) -> Iterator[bytes]:
    """Yields the lines of a binary file handle (without line ends), skipping over-long lines."""
    pending = b""
    skipping = False  # inside an over-long line that was already counted
    while True:
        chunk = handle.read(READ_CHUNK)
        if not chunk:
            break
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if skipping:
                skipping = False
            elif len(line) > max_line_bytes:
                stats["long_lines"] += 1
            else:
                yield line
        if len(pending) > max_line_bytes:
            if not skipping:
                stats["long_lines"] += 1
            skipping = True
            pending = b""
    if pending and not skipping:
        yield pending


def decode_line(raw: bytes, stats: Counter) -> str | None:
    """UTF-8 text of a line, or None (counted as invalid) for undecodable or binary lines."""
    if b"\x00" in raw:
        stats["invalid_lines"] += 1
        return None
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError:
        stats["invalid_lines"] += 1
        return None


def text_documents(lines: Iterator[str], stats: Counter) -> Iterator[list[str]]:
    """The documents (lists of sentence lines) of decoded text-format lines."""
    document: list[str] = []
    for line in lines:
        stats["lines"] += 1
        if line.strip():
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def jsonl_documents(lines: Iterator[str], text_field: str, stats: Counter) -> Iterator[list[str]]:
    """The documents of decoded jsonl lines: each object's ``text_field``, split into non-blank lines."""
    for line in lines:
        stats["lines"] += 1
        if not line.strip():
            continue
        try:
            record = load_json(line, "a jsonl line", ValueError)  # a line nested too deep is invalid too
        except ValueError:
            record = None
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            stats["invalid_lines"] += 1
            continue
        document = [sentence for sentence in text.splitlines() if sentence.strip()]
        if document:
            yield document


def decompressed(raw: BinaryIO, path: str) -> BinaryIO:
    """``raw`` (the file's bytes as stored) decompressed by ``path``'s extension with Python's
    gzip/bz2, which, unlike a raw stream decompressor, raise on a truncated file instead of
    silently ending early."""
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if path.endswith(".bz2"):
        return bz2.BZ2File(raw, mode="rb")
    return raw


def documents_of(handle: BinaryIO, file_format: str, text_field: str, max_line_bytes: int,
                 stats: Counter) -> Iterator[list[str]]:
    """The documents of a (decompressed) binary handle in ``file_format`` ('text' or 'jsonl'):
    lines split and decoded, bad ones skipped and counted."""
    decoded = (decode_line(raw, stats) for raw in read_raw_lines(handle, max_line_bytes, stats))
    valid = (line for line in decoded if line is not None)
    if file_format == "jsonl":
        yield from jsonl_documents(valid, text_field, stats)
    else:
        yield from text_documents(valid, stats)
