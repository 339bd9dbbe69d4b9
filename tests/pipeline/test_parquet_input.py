"""`xlnet preprocess --input-format parquet` (pipeline/parquet_input.py): a row's --text-field column is a document,
read by the JSON-lines rules into the same records; its `id` column names it in --removed; a file that is not
Parquet, lacks the column or holds no strings in it is one line naming the file and column, exit 3."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import xlnet_cli
from pipeline.corpus import read_documents, read_identified_documents, resolve_format
from pipeline.preprocess_command import preprocess
from pipeline.preprocess_config import PreprocessConfig
from support.bundled_data import TINY_DATA, WIKI_SUMMARIES, read_corpus_documents


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Wikipedia summaries, each a document of several lines, one of them copied at the end."""
    summaries = ["\n".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 120)][:100]
    return summaries + [summaries[7]]


def write_parquet(path: Path, columns: dict, row_group_size: int = 16) -> str:
    pq.write_table(pa.table(columns), str(path), row_group_size=row_group_size)
    return str(path)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def test_parquet_rows_are_the_documents_of_the_same_json_lines(tmp_path, texts):
    ids = [f"doc-{i}" for i in range(len(texts))]
    parquet = write_parquet(tmp_path / "c.parquet", {"id": ids, "text": texts})
    jsonl = write_jsonl(tmp_path / "c.jsonl", [{"id": i, "text": t} for i, t in zip(ids, texts)])
    assert list(read_identified_documents(parquet)) == list(read_identified_documents(jsonl))
    assert len(list(read_documents(parquet))) == len(texts)


def test_a_parquet_corpus_gives_the_records_of_the_same_documents_in_json_lines(tmp_path, texts, spm_model):
    (tmp_path / "p").mkdir()
    (tmp_path / "j").mkdir()  # the same file name: the same document keys, hence splits and streams
    parquet = write_parquet(tmp_path / "p" / "corpus", {"text": texts, "other": list(range(len(texts)))})
    jsonl = write_jsonl(tmp_path / "j" / "corpus", [{"text": text} for text in texts])
    outputs = []
    for name, path, input_format in (("from-parquet", parquet, "parquet"), ("from-jsonl", jsonl, "jsonl")):
        config = PreprocessConfig(inputs=(path,), output=str(tmp_path / name), vocab=spm_model,
                                  input_format=input_format, **{**TINY_DATA, "num_streams": 4, "num_shards": 2,
                                                                "valid_shards": 1})
        manifest, counters = preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"])
        outputs.append({p.name: p.read_bytes() for p in sorted((tmp_path / name).glob("*.tfrecord"))})
        assert counters["documents"] == len(texts) and counters["lines"] == len(texts)
    assert outputs[0] == outputs[1] and len(outputs[0]) == 3


def test_a_null_text_or_one_with_a_nul_is_an_invalid_line_and_the_rest_are_read(tmp_path):
    path = write_parquet(tmp_path / "c.parquet", {"text": ["One.\nTwo.", None, "bad\x00text", "\n  \n", "Three."]})
    stats = Counter()
    assert list(read_documents(path, stats=stats)) == [["One.", "Two."], ["Three."]]
    assert stats["invalid_lines"] == 2 and stats["lines"] == 5


def test_a_text_over_max_line_bytes_is_skipped_and_counted(tmp_path):
    path = write_parquet(tmp_path / "c.parquet", {"text": ["short", "é" * 600, "after"]})
    stats = Counter()
    assert list(read_documents(path, max_line_bytes=1000, stats=stats)) == [["short"], ["after"]]
    assert stats["long_lines"] == 1


def test_without_an_id_column_a_document_is_named_by_its_file_and_row(tmp_path):
    path = write_parquet(tmp_path / "c.parquet", {"text": ["One.", None, "Three."], "id": [1.5, 2.5, 3.5]})
    assert [identity for identity, _ in read_identified_documents(path)] == [f"{path}:1", f"{path}:3"]


def test_auto_reads_parquet_by_its_extension():
    assert resolve_format("gs://bucket/train-00000-of-00010.parquet", "auto") == "parquet"
    assert resolve_format("corpus.parquet", "text") == "text"


def test_the_removed_documents_of_parquet_are_named_by_its_id_column(tmp_path, texts, spm_model):
    path = write_parquet(tmp_path / "c.parquet", {"id": [f"row-{i}" for i in range(len(texts))], "text": texts})
    config = PreprocessConfig(inputs=(path,), output=str(tmp_path / "out"), vocab=spm_model, dedup=("exact",),
                              removed=str(tmp_path / "removed"), **{**TINY_DATA, "num_streams": 4, "num_shards": 2,
                                                                    "valid_shards": 1})
    preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"])
    (line,) = [json.loads(line) for p in sorted((tmp_path / "removed").glob("*.jsonl"))
               for line in p.read_text(encoding="utf-8").splitlines()]
    assert {line["id"], line["kept"]} == {"row-7", f"row-{len(texts) - 1}"} and line["stage"] == "exact"


def preprocess_exit(tmp_path: Path, spm_model: str, capsys, path: str, *flags: str) -> tuple[int, str]:
    code = xlnet_cli.main(["preprocess", "--input", path, "--output", str(tmp_path / "out"), "--vocab", spm_model,
                           *flags])
    return code, capsys.readouterr().err.strip()


def test_a_file_that_is_not_parquet_is_one_line_naming_it_and_exit_3(tmp_path, spm_model, capsys):
    path = tmp_path / "c.parquet"
    path.write_text("id,text\n1,hello\n")
    code, err = preprocess_exit(tmp_path, spm_model, capsys, str(path))
    assert code == 3 and err.startswith(f"xlnet preprocess: error: {path}: not a readable Parquet file (")
    assert len(err.splitlines()) == 1 and not (tmp_path / "out" / "manifest.json").exists()


def test_a_parquet_file_without_the_text_field_is_one_line_naming_the_column_and_exit_3(tmp_path, spm_model, capsys):
    path = write_parquet(tmp_path / "c.parquet", {"id": ["a"], "content": ["Hello."]})
    code, err = preprocess_exit(tmp_path, spm_model, capsys, path, "--text-field", "body")
    assert code == 3 and err == (f"xlnet preprocess: error: {path}: no column 'body' (--text-field) in this Parquet "
                                 "file; its columns are 'id', 'content'")


def test_a_parquet_text_field_that_is_not_strings_is_one_line_naming_its_type_and_exit_3(tmp_path, spm_model, capsys):
    path = write_parquet(tmp_path / "c.parquet", {"text": [1, 2, 3]})
    code, err = preprocess_exit(tmp_path, spm_model, capsys, path, "--input-format", "parquet")
    assert code == 3 and err == (f"xlnet preprocess: error: {path}: column 'text' (--text-field) holds int64, "
                                 "not strings")


def test_xlnet_vocab_refuses_a_parquet_text_field_that_is_not_strings_the_same_way(tmp_path, capsys):
    path = write_parquet(tmp_path / "c.parquet", {"text": [1, 2, 3]})
    code = xlnet_cli.main(["vocab", "--input", path, "--output", str(tmp_path / "sp"), "--vocab-size", "100"])
    assert code == 3 and capsys.readouterr().err.strip() == (
        f"xlnet vocab: error: {path}: column 'text' (--text-field) holds int64, not strings")
