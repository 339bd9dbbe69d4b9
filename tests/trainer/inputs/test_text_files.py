"""The readers every fine-tuning input shares (trainer/inputs/text_files.py): typed fields and files."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from trainer.inputs.sequence_examples import count_truncated, read_text_examples
from trainer.inputs.squad import SquadDataError
from trainer.inputs.text_files import FinetuneDataError, field, matching_files, read_text, rows
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import corpus_lines


def test_a_field_of_the_expected_type_is_returned():
    assert field({"text": "Jazz.", "label": 2}, "label", "f.jsonl:3", (str, int)) == 2


@pytest.mark.parametrize("row, kind, message", [
    ({"text": "Jazz."}, str, "f.jsonl:3: missing field 'label' \\(fields: text\\)"),
    ({"label": None}, str, "f.jsonl:3: field 'label' is null, expected str"),
    ({"label": True}, int, "f.jsonl:3: field 'label' is bool, expected int"),
    (["a", "b"], str, "f.jsonl:3: expected a JSON object, got list"),
])
def test_a_missing_or_mistyped_field_names_the_place_and_the_field(row, kind, message):
    with pytest.raises(FinetuneDataError, match=message):
        field(row, "label", "f.jsonl:3", kind)


def test_a_json_boolean_is_a_boolean_field_and_the_error_class_is_the_readers():
    assert field({"is_impossible": False}, "is_impossible", "q", bool) is False
    with pytest.raises(SquadDataError, match="field 'id' is float, expected str or int"):
        field({"id": 1.5}, "id", "q", (str, int), error=SquadDataError)


def test_files_of_a_glob_are_read_in_sorted_order_with_a_byte_order_mark_dropped(tmp_path):
    (tmp_path / "b.tsv").write_text("text\tlabel\nsecond\tno\n")
    (tmp_path / "a.tsv").write_bytes("\ufefftext\tlabel\nfirst\tyes\n".encode("utf-8"))
    assert matching_files(str(tmp_path / "*.tsv")) == [str(tmp_path / "a.tsv"), str(tmp_path / "b.tsv")]
    assert read_text(str(tmp_path / "a.tsv")).startswith("text\t")
    assert [(path.rsplit("/", 1)[1], line, row) for path, line, row in rows(str(tmp_path / "*.tsv"), None)] == [
        ("a.tsv", 2, {"text": "first", "label": "yes"}), ("b.tsv", 2, {"text": "second", "label": "no"})]


def test_a_glob_without_files_and_a_file_that_is_not_utf8_are_named(tmp_path):
    with pytest.raises(FinetuneDataError, match="no file matches"):
        matching_files(str(tmp_path / "*.csv"))
    (tmp_path / "latin.csv").write_bytes(b"text,label\ncaf\xe9,yes\n")
    with pytest.raises(FinetuneDataError, match="latin.csv: not UTF-8 text"):
        read_text(str(tmp_path / "latin.csv"))


LONG_FIELD = 200_000  # characters: beyond csv's default field_size_limit of 131,072


def long_text() -> str:
    """Real sentences (no tab) joined up to exactly LONG_FIELD characters."""
    text = ""
    for sentence in corpus_lines(3000):
        text += sentence.replace("\t", " ") + " "
        if len(text) >= LONG_FIELD:
            return text[:LONG_FIELD]
    raise AssertionError("the bundled corpus is shorter than LONG_FIELD")


def write_long_example(path: Path, text: str) -> None:
    """One labeled row holding ``text``, in the format of ``path``'s extension."""
    if path.suffix == ".jsonl":
        path.write_text(json.dumps({"text": text, "label": "fresh"}) + "\n", encoding="utf-8")
    elif path.suffix == ".tsv":  # GLUE's TSV: no quoting, the quotes of the text stay as they are
        path.write_text(f"text\tlabel\n{text}\tfresh\n", encoding="utf-8")
    else:
        with path.open("w", encoding="utf-8", newline="") as handle:
            csv.writer(handle).writerows([["text", "label"], [text, "fresh"]])


@pytest.mark.parametrize("name", ["long.csv", "long.tsv", "long.jsonl"])
def test_a_field_longer_than_csvs_default_limit_is_read_whole_and_truncated_by_the_encoder(tmp_path, vocab, name):
    text = long_text()
    write_long_example(tmp_path / name, text)
    examples = read_text_examples(str(tmp_path / name))
    assert [(len(example.text), example.label) for example in examples] == [(LONG_FIELD, "fresh")]
    assert examples[0].text == text
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), max_length=64, uncased=False)
    assert count_truncated(examples, encoder) == 1


def test_reading_a_long_field_leaves_the_process_csv_limit_as_it_was(tmp_path):
    before = csv.field_size_limit()
    write_long_example(tmp_path / "long.csv", long_text())
    assert len(read_text_examples(str(tmp_path / "long.csv"))[0].text) == LONG_FIELD
    assert csv.field_size_limit() == before
    with pytest.raises(csv.Error, match="field larger than field limit"):
        list(csv.reader(io.StringIO((tmp_path / "long.csv").read_text(encoding="utf-8"))))
