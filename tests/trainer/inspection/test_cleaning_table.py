"""`xlnet inspect DATA_DIR --cleaning` (trainer/inspection/cleaning_table.py): the manifest's cleaning table, per stage in
running order the documents and bytes in, removed and kept and the stage's settings, as text, JSON or a plot; a
directory preprocessed without cleaning says so in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import xlnet_cli
from pipeline.preprocess_command import preprocess
from pipeline.preprocess_config import PreprocessConfig
from support.processes import cli_loads_tensorflow
from support.bundled_data import TINY_DATA, WIKI_SUMMARIES, read_corpus_documents

GERMAN = ("Die Donau ist nach der Wolga der zweitlängste Fluss Europas. Sie entspringt im Schwarzwald, fließt durch "
          "zehn Länder und mündet in einem großen Delta in das Schwarze Meer.")
STAGES = ("language", "gopher", "exact", "near", "lines")


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory, spm_model) -> Path:
    """A data directory of Wikipedia summaries, five of them copied, a page of two of them, a German text and junk,
    preprocessed with --languages en --filters gopher --filter-rules gopher.min_words=40 --dedup exact,near,lines
    --removed."""
    directory = tmp_path_factory.mktemp("cleaned")
    summaries = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 300)
                 if len(" ".join(lines).split()) >= 40][:40]
    texts = summaries + summaries[:5] + [f"{summaries[10]}\n{summaries[11]}", GERMAN, "Home\nAbout\nContact\nLogin", "buy now " * 40]
    (directory / "corpus.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    config = PreprocessConfig(inputs=(str(directory / "corpus.txt"),), output=str(directory / "data"),
                              vocab=spm_model, languages=("en",), filters=("gopher",), dedup=("exact", "near", "lines"),
                              filter_rules=(("gopher.min_words", 40),), removed=str(directory / "removed"),
                              **{**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1})
    preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"])
    return directory / "data"


def inspect(capsys, *args: str) -> tuple[int, str]:
    code = xlnet_cli.main(["inspect", *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out


def test_the_table_lists_each_stage_in_running_order_with_its_counts_and_settings(cleaned, capsys):
    counters = json.loads((cleaned / "manifest.json").read_text())["counters"]
    code, out = inspect(capsys, str(cleaned), "--cleaning")
    lines = out.rstrip("\n").splitlines()
    assert code == 0 and lines[0] == f"cleaning of {cleaned}: {counters['documents_read']} documents read"
    assert lines[1].split() == ["stage", "documents", "in", "documents", "removed", "documents", "kept", "bytes",
                                "in", "bytes", "removed", "bytes", "kept", "settings"]
    assert [line.split()[0] for line in lines[2:7]] == list(STAGES)
    for line, stage in zip(lines[2:7], STAGES):
        numbers = [int(cell.replace(",", "")) for cell in line.split()[1:7]]
        assert numbers == [counters[f"{what}_{kind}_{stage}"] for kind in ("documents", "bytes")
                           for what in ("in", "removed", "kept")]
    assert lines[2].endswith("languages en, threshold 0.65")
    assert lines[3].endswith("defaults but min_words=40")  # --filter-rules gopher.min_words=40
    assert lines[5].endswith("shingle_words=5, bands=14, rows=8, min_jaccard=0.7")
    assert lines[6].endswith(f"seed 0, {counters['duplicate_lines_removed']} lines dropped from pages kept")
    assert counters["duplicate_lines_removed"] + counters["removed_documents_lines"] >= 1
    assert lines[7] == f"removed documents listed in {cleaned.parent / 'removed'}"


def test_the_json_table_holds_the_manifests_counters_per_stage(cleaned, capsys):
    counters = json.loads((cleaned / "manifest.json").read_text())["counters"]
    code, out = inspect(capsys, str(cleaned), "--cleaning", "--format", "json")
    table = json.loads(out)
    assert code == 0 and [row["stage"] for row in table["stages"]] == list(STAGES)
    assert table["stages"][0]["removed_documents"] == counters["removed_documents_language"] >= 1
    assert table["stages"][2]["removed_documents"] == counters["removed_documents_exact"] >= 1


def test_a_directory_preprocessed_without_cleaning_says_so_in_one_line(tiny_data_dir, capsys):
    code, out = inspect(capsys, tiny_data_dir, "--cleaning")
    assert code == 0 and out.splitlines() == [
        f"{tiny_data_dir} was preprocessed without cleaning (no --languages, --filters or --dedup): every document "
        "read was kept"]


def test_plot_draws_the_cleaning_table_into_a_png(cleaned, tmp_path, capsys):
    plot = tmp_path / "cleaning.png"
    code, out = inspect(capsys, str(cleaned), "--cleaning", "--plot", str(plot))
    assert code == 0 and out.rstrip().endswith(f"plot written to {plot}")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000


def test_the_cleaning_table_of_a_local_directory_is_read_without_tensorflow(cleaned):
    """manifest.json alone: the command answers without TensorFlow's start-up."""
    assert not cli_loads_tensorflow(["inspect", str(cleaned), "--cleaning"])
