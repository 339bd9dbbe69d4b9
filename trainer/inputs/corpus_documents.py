"""Corpus files read through tf.io.gfile, in the formats `xlnet preprocess` reads (the rules are
tfrecords/corpus_text.py's, shared with the pipeline's Beam reader), and turned into token ids
the way preprocessing tokenises a document.

Paths and globs may be local or gs://; ``.gz`` and ``.bz2`` are decompressed by extension. Lines
that are not UTF-8 (or hold a NUL byte), over-long lines and bad jsonl lines are skipped and
counted in ``stats``, as in preprocessing.
"""
from __future__ import annotations

import dataclasses
import zlib
from collections import Counter
from typing import Iterator, Sequence

import numpy as np
import tensorflow as tf

from tfrecords.corpus_text import INPUT_FORMATS, decompressed, directory_input_problem, documents_of, format_by_name
from tfrecords.errors import UsageError
from tfrecords.text_normalization import normalize_text

MAX_LINE_BYTES = 1 << 20  # xlnet preprocess's default --max-line-bytes


class CorpusInputError(UsageError):
    """A corpus input that cannot be read as given; the message names the flag or file."""


@dataclasses.dataclass(frozen=True)
class Document:
    """One document of a corpus file: ``index`` counts from 0 within ``path``; ``ids`` its tokens."""

    path: str
    index: int
    ids: np.ndarray


def matching_corpus_files(patterns: Sequence[str], flag: str = "--input") -> list[str]:
    """The files of every path or glob, each glob's sorted, in the order given (duplicates once)."""
    files: list[str] = []
    for pattern in patterns:
        try:
            matched = sorted(tf.io.gfile.glob(pattern))
        except tf.errors.OpError as error:
            raise CorpusInputError(f"{flag} {pattern!r}: cannot list files: {error.message.splitlines()[0]}") from None
        files_matched = [path for path in matched if not tf.io.gfile.isdir(path)]
        if not files_matched and (matched or tf.io.gfile.isdir(pattern)):
            raise CorpusInputError(directory_input_problem(pattern, flag))
        if not files_matched:
            raise CorpusInputError(f"{flag} {pattern!r} matches no files")
        matched = files_matched
        files.extend(path for path in matched if path not in files)
    return files


def read_corpus_documents(path: str, input_format: str = "auto", text_field: str = "text",
                          stats: Counter | None = None) -> Iterator[list[str]]:
    """The documents (lists of sentence lines) of one corpus file; CorpusInputError if unreadable."""
    if input_format not in INPUT_FORMATS:
        raise CorpusInputError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}, got {input_format!r}")
    stats = Counter() if stats is None else stats
    file_format = format_by_name(path) if input_format == "auto" else input_format
    try:
        with decompressed(tf.io.gfile.GFile(path, "rb"), path) as handle:
            yield from documents_of(handle, file_format, text_field, MAX_LINE_BYTES, stats)
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as error:
        message = error.message if isinstance(error, tf.errors.OpError) else str(error)
        raise CorpusInputError(f"{path}: cannot read: {message.splitlines()[0] if message else error}") from None


def tokenize_document(processor, lines: Sequence[str], uncased: bool) -> np.ndarray:
    """A document's token ids as `xlnet preprocess` makes them (before any <eod>): each line
    normalised, empty ones dropped, encoded with SentencePiece, the pieces concatenated."""
    texts = [text for text in (normalize_text(line, uncased) for line in lines) if text]
    encoded = processor.encode(texts, out_type=int) if texts else []
    return np.fromiter((piece for ids in encoded for piece in ids), dtype=np.int32)


def corpus_documents(paths: Sequence[str], processor, uncased: bool, input_format: str = "auto",
                     text_field: str = "text", stats: Counter | None = None) -> Iterator[Document]:
    """Every non-empty tokenised document of ``paths`` in order; ``stats`` counts bad lines and
    ``empty_documents`` (no piece left after normalisation)."""
    stats = Counter() if stats is None else stats
    for path in paths:
        for index, lines in enumerate(read_corpus_documents(path, input_format, text_field, stats)):
            ids = tokenize_document(processor, lines, uncased)
            if ids.size:
                yield Document(path, index, ids)
            else:
                stats["empty_documents"] += 1
