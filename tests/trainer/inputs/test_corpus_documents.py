"""Corpus files for `xlnet score`, read through tf.io.gfile (trainer/inputs/corpus_documents.py):
the preprocessing formats, gs://, and tokens as preprocessing makes them."""
from __future__ import annotations

import bz2
import gzip
import json
from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from tfrecords.text_normalization import normalize_text
from trainer.inputs.corpus_documents import (
    CorpusInputError,
    corpus_documents,
    matching_corpus_files,
    read_corpus_documents,
    tokenize_document,
)

TEXT = b"First sentence.\nEnd of paragraph. <eop>\n\xc3\x28 not utf-8\n\n\nSecond document.\n"


def test_text_documents_end_at_blank_lines_and_bad_lines_are_counted(tmp_path):
    path = tmp_path / "c.txt.bz2"
    path.write_bytes(bz2.compress(TEXT))
    stats = Counter()
    assert list(read_corpus_documents(str(path), stats=stats)) == [
        ["First sentence.", "End of paragraph. <eop>"], ["Second document."]]
    assert stats["invalid_lines"] == 1


def test_jsonl_documents_by_extension(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    path.write_bytes(gzip.compress((json.dumps({"body": "A.\n\nB."}) + "\n").encode()))
    assert list(read_corpus_documents(str(path), text_field="body")) == [["A.", "B."]]


def test_a_gs_glob_is_read_through_tensorflow(gcs_prefix):
    for name in ("b.txt.gz", "a.txt.gz"):
        with tf.io.gfile.GFile(gcs_prefix + name, "wb") as handle:
            handle.write(gzip.compress(TEXT))
    files = matching_corpus_files([gcs_prefix + "*.txt.gz"])
    assert files == [gcs_prefix + "a.txt.gz", gcs_prefix + "b.txt.gz"]
    assert len(list(read_corpus_documents(files[1]))) == 2


def test_a_truncated_file_and_a_glob_matching_nothing_are_named(tmp_path):
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(TEXT * 50)[:-20])
    with pytest.raises(CorpusInputError, match=f"{path}: cannot read"):
        list(read_corpus_documents(str(path)))
    with pytest.raises(CorpusInputError, match="--input .* matches no files"):
        matching_corpus_files([str(tmp_path / "none*.txt")])


def test_documents_are_tokenised_line_by_line_as_preprocessing_does(tmp_path, vocab):
    processor = vocab.processor()
    lines = ["First  sentence.", "``Quoted'' line.", "   "]
    expected = [piece for line in lines if normalize_text(line) for piece in processor.encode(normalize_text(line))]
    np.testing.assert_array_equal(tokenize_document(processor, lines, uncased=False), expected)
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines) + "\n\n \n")
    stats = Counter()
    documents = list(corpus_documents([str(path)], processor, False, stats=stats))
    assert [(d.path, d.index) for d in documents] == [(str(path), 0)]
    np.testing.assert_array_equal(documents[0].ids, expected)
