"""One reading for every JSON file a user gives us (tfrecords/json_documents.py): bytes that are not UTF-8,
text that is not JSON and nesting too deep for Python's parser or for the code that walks the value are one
sentence naming the file, with the exit status of the file's kind, through every reader that takes such a file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tfrecords.errors import DataError, UsageError
from tfrecords.json_documents import MAX_DEPTH, load_json, nesting_depth
from tfrecords.manifest import ManifestError, load_manifest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "fixtures" / "legacy" / "data"  # a preprocessed data directory, so --config is read
# Deeper than Python's recursion limit: json.loads raises RecursionError, not a ValueError.
TOO_DEEP_TO_PARSE = "[" * 100000 + "]" * 100000
# Parses, but deeper than MAX_DEPTH: printing or walking it near the recursion limit would fail later.
PARSES_BUT_TOO_DEEP = '{"train": ' + "[" * 900 + "]" * 900 + "}"


def test_a_document_is_read_as_its_value():
    assert load_json(b'{"a": [1, {"b": null}]}', "f.json", DataError) == {"a": [1, {"b": None}]}


def test_nesting_too_deep_to_parse_is_the_callers_error_naming_the_file():
    with pytest.raises(DataError) as raised:
        load_json(TOO_DEEP_TO_PARSE, "d/f.json", DataError)
    assert str(raised.value) == f"d/f.json is not valid JSON: it nests arrays or objects deeper than {MAX_DEPTH} levels"


def test_nesting_that_parses_but_is_deeper_than_any_file_of_ours_is_refused():
    with pytest.raises(UsageError, match=f"f.json is not valid JSON: it nests arrays or objects deeper than {MAX_DEPTH}"):
        load_json(PARSES_BUT_TOO_DEEP, "f.json", UsageError)


def test_a_document_exactly_max_depth_deep_is_read():
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert nesting_depth(load_json(text, "f.json", DataError), MAX_DEPTH) == MAX_DEPTH


def test_bytes_that_are_not_utf8_and_text_that_is_not_json_name_the_file_and_what_was_expected():
    with pytest.raises(DataError, match="f.json is not a valid manifest: 'utf-8' codec can't decode byte 0xff"):
        load_json(b'{"a": \xff}', "f.json", DataError, "a valid manifest")
    with pytest.raises(DataError, match="f.json is not valid JSON: Expecting value: line 1 column 1"):
        load_json("nope", "f.json", DataError)


def test_a_deep_manifest_is_a_manifest_error_naming_the_file_by_both_readers(tmp_path):
    from pipeline.data_directory import read_manifest

    (tmp_path / "manifest.json").write_text(TOO_DEEP_TO_PARSE)
    for read in (load_manifest, read_manifest):  # the trainer's (tf.io.gfile) and the pipeline's (Beam)
        with pytest.raises(ManifestError, match=f"{tmp_path / 'manifest.json'} is not a valid manifest: it nests"):
            read(str(tmp_path))


def test_a_deep_model_directory_file_is_a_storage_error_naming_the_file(tmp_path):
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.storage import StorageError

    (tmp_path / ModelDirectory.MODEL_CONFIG).write_text(TOO_DEEP_TO_PARSE)
    with pytest.raises(StorageError, match=f"{tmp_path / ModelDirectory.MODEL_CONFIG} is not valid JSON: it nests"):
        ModelDirectory(str(tmp_path)).model_config


@pytest.mark.parametrize("text", [TOO_DEEP_TO_PARSE, PARSES_BUT_TOO_DEEP], ids=["too-deep-to-parse", "parses"])
def test_xlnet_train_with_a_deep_config_file_exits_2_in_one_line_naming_the_flag(tmp_path, text):
    (tmp_path / "deep.json").write_text(text)
    run = subprocess.run([sys.executable, str(REPO / "xlnet_cli.py"), "train", "--config", str(tmp_path / "deep.json"),
                          "--data", str(DATA), "--model-dir", str(tmp_path / "model")],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stderr.endswith(f"xlnet train: error: --config {tmp_path / 'deep.json'} is not valid JSON: it nests "
                               f"arrays or objects deeper than {MAX_DEPTH} levels\n")
    assert "Traceback" not in run.stderr


def test_a_deep_squad_file_is_a_squad_data_error_naming_the_file(tmp_path):
    from trainer.inputs.squad import SquadDataError, read_squad

    (tmp_path / "train.json").write_text(TOO_DEEP_TO_PARSE)
    with pytest.raises(SquadDataError, match=f"{tmp_path / 'train.json'} is not valid JSON: it nests"):
        read_squad(str(tmp_path / "train.json"))


def test_a_deep_fine_tuning_row_is_named_by_file_and_line(tmp_path):
    from trainer.inputs.text_files import FinetuneDataError, rows

    (tmp_path / "train.jsonl").write_text('{"text": "fine", "label": "a"}\n' + TOO_DEEP_TO_PARSE + "\n")
    with pytest.raises(FinetuneDataError, match=f"{tmp_path / 'train.jsonl'}:2 is not valid JSON: it nests"):
        list(rows(str(tmp_path / "train.jsonl"), None))


def test_a_deep_corpus_line_is_counted_as_invalid_and_the_others_read():
    from collections import Counter

    from tfrecords.corpus_text import jsonl_documents

    stats = Counter()
    documents = list(jsonl_documents(iter([TOO_DEEP_TO_PARSE, PARSES_BUT_TOO_DEEP, '{"text": "a line"}']), "text",
                                     stats))
    assert documents == [["a line"]] and stats["invalid_lines"] == 2
