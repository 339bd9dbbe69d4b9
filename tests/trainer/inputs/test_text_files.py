"""The readers every fine-tuning input shares (trainer/inputs/text_files.py): typed fields and files."""
from __future__ import annotations

import pytest

from trainer.inputs.squad import SquadDataError
from trainer.inputs.text_files import FinetuneDataError, field, matching_files, read_text, rows


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
