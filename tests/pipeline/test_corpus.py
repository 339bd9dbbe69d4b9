"""Corpus reading (pipeline/corpus.py): formats, stable document keys, robustness rules."""
from __future__ import annotations

import bz2
import io
import json
from collections import Counter

import pytest

from pipeline.corpus import CorpusError, expand_inputs, read_documents, read_raw_lines, resolve_format


def test_blank_lines_end_documents_and_eop_lines_stay_in_them(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("First sentence.\nEnd of paragraph. <eop>\nNext paragraph.\n\n\n  \nSecond document.\n")
    assert list(read_documents(str(path))) == [
        ["First sentence.", "End of paragraph. <eop>", "Next paragraph."], ["Second document."]]


def test_bundled_gzip_corpus_reads_every_document(corpus_files):
    stats = Counter()
    counts = [sum(1 for _ in read_documents(path, stats=stats)) for path in corpus_files]
    assert counts == [1189, 10033]  # KJV chapters, Wikipedia summaries (data/README.md)
    assert stats["invalid_lines"] == stats["long_lines"] == 0


def test_bz2_and_crlf_files_are_read(tmp_path):
    path = tmp_path / "c.txt.bz2"
    path.write_bytes(bz2.compress(b"One.\r\nTwo.\r\n\r\nThree.\r\n"))
    assert list(read_documents(str(path))) == [["One.", "Two."], ["Three."]]


def test_jsonl_documents_use_the_text_field_and_count_bad_lines(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"body": "A.\nB.\n\nC."}) + "\n[1, 2]\n{broken\n" + json.dumps({"body": 3}) + "\n")
    stats = Counter()
    assert list(read_documents(str(path), text_field="body", stats=stats)) == [["A.", "B.", "C."]]
    assert stats["invalid_lines"] == 3


def test_format_is_chosen_by_extension_unless_given():
    assert resolve_format("gs://b/x.jsonl.gz", "auto") == "jsonl"
    assert resolve_format("x.ndjson", "auto") == "jsonl"
    assert resolve_format("x.txt.gz", "auto") == "text"
    assert resolve_format("x.jsonl", "text") == "text"
    with pytest.raises(CorpusError, match="--input-format"):
        resolve_format("x.txt", "csv")


def test_over_long_lines_are_skipped_in_bounded_memory():
    stats = Counter()
    data = b"short\n" + b"y" * 5000 + b"\nafter\n" + b"z" * 5000
    lines = list(read_raw_lines(io.BytesIO(data), max_line_bytes=100, stats=stats))
    assert lines == [b"short", b"after"] and stats["long_lines"] == 2


def test_document_keys_are_relative_to_the_glob_so_copies_keep_their_placement(tmp_path):
    for root in ("local", "copy"):
        (tmp_path / root / "sub").mkdir(parents=True)
        (tmp_path / root / "sub" / "a.txt").write_text("x\n")
    local = expand_inputs([str(tmp_path / "local" / "*" / "*.txt")])
    copy = expand_inputs([str(tmp_path / "copy" / "*" / "*.txt")])
    assert [f.key for f in local] == [f.key for f in copy] == ["sub/a.txt"]


def test_every_glob_must_match_something(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(CorpusError, match="missing"):
        expand_inputs([str(tmp_path / "*.txt"), str(tmp_path / "missing*.txt")])
