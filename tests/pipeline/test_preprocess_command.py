"""`xlnet preprocess` end to end on the bundled corpus with the real Beam FnApiRunner."""
from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pytest

import xlnet_cli
from pipeline.corpus import CorpusError
from pipeline.data_directory import OutputError
from pipeline.preprocess_command import pipeline_options, preprocess, summary
from pipeline.preprocess_config import PreprocessConfig
from tfrecords.manifest import load_manifest
from tfrecords.record_config import ConfigError

from support.bundled_data import TINY_DATA, read_corpus_documents


def read_file_records(path: str, compression: str = "") -> list[dict]:
    import tensorflow as tf

    from tfrecords.schema import parse_records

    dataset = tf.data.TFRecordDataset(path, compression_type=compression).batch(4096)
    rows = []
    for batch in dataset:
        parsed = {k: v.numpy() for k, v in parse_records(batch, TINY_DATA["seq_len"]).items()}
        rows += [{k: v[i] for k, v in parsed.items()} for i in range(len(parsed["label"]))]
    return rows


def write_documents(path: Path, documents: list[list[str]]) -> str:
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def wiki_documents(corpus_files) -> list[list[str]]:
    return read_corpus_documents(Path(corpus_files[-1]), 120)


def small_run(tmp_path: Path, inputs, spm_model: str, name: str = "out", **changes):
    """A small run inside this process (in_memory: no worker processes to start, which costs seconds)."""
    settings = {**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1, **changes}
    workers = settings.pop("workers", 1)
    overwrite = settings.pop("overwrite", False)
    config = PreprocessConfig(inputs=tuple(inputs), output=str(tmp_path / name), vocab=spm_model, **settings)
    return preprocess(config, workers=workers, overwrite=overwrite, runner_options=["--direct_running_mode=in_memory"])


def test_manifest_counts_match_the_records_in_every_shard(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    for split in manifest.splits.values():
        for shard in split.shards:
            rows = read_file_records(manifest.shard_path(shard))
            assert len(rows) == shard.records
            assert sum(int(r["is_masked"].sum()) for r in rows) == shard.masked_tokens
            for stream in shard.streams:
                block = rows[stream.first_record_index_in_file:stream.first_record_index_in_file + stream.records]
                assert [int(r["stream_id"]) for r in block] == [stream.stream_id] * stream.records
                assert [int(r["stream_pos"]) for r in block] == list(range(stream.records))


def test_each_stream_lives_in_one_shard_with_its_reversed_copy(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    num_streams = TINY_DATA["num_streams"]
    for split in manifest.splits.values():
        location = {s.stream_id: shard.file for shard in split.shards for s in shard.streams}
        assert sorted(location) == list(range(2 * num_streams))
        for stream in range(num_streams):
            assert location[stream] == location[stream + num_streams]
        assert split.num_shards == len(split.shards)


def test_manifest_records_config_vocab_checksum_and_special_ids(tiny_data_dir, spm_model):
    import hashlib

    manifest = load_manifest(tiny_data_dir)
    for key, value in TINY_DATA.items():
        assert manifest.config[key] == value
    assert manifest.config["compression"] == "none" and manifest.config["uncased"] is False
    assert manifest.vocab["sha256"] == hashlib.sha256(Path(spm_model).read_bytes()).hexdigest()
    assert manifest.vocab["vocab_size"] == 8000
    assert manifest.special_ids == {"unk": 0, "bos": 1, "eos": 2, "cls": 3, "sep": 4, "pad": 5, "mask": 6,
                                    "eod": 7, "eop": 8}
    names = sorted(p.name for p in Path(tiny_data_dir).iterdir())
    assert names == ["manifest.json", "train-00000-of-00004.tfrecord", "train-00001-of-00004.tfrecord",
                     "train-00002-of-00004.tfrecord", "train-00003-of-00004.tfrecord",
                     "valid-00000-of-00002.tfrecord", "valid-00001-of-00002.tfrecord"]


def test_written_records_have_num_predict_targets_and_no_masked_specials(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    rows = read_file_records(manifest.shard_path(manifest.split("train").shards[0]))
    for row in rows:
        assert row["is_masked"].sum() == TINY_DATA["num_predict"]
        assert not row["is_masked"][np.isin(row["input_ids"], [3, 4])].any()
        assert row["input_ids"][-1] == 3 and row["segment_ids"][-1] == 2


@pytest.mark.parametrize("workers, mode", [(2, "multi_processing"), (1, "in_memory")])
def test_two_workers_or_in_process_write_byte_identical_shards(tiny_data_dir, corpus_sample, spm_model, tmp_path,
                                                               workers, mode):
    config = PreprocessConfig(inputs=(corpus_sample,), output=str(tmp_path / "two"), vocab=spm_model, **TINY_DATA)
    preprocess(config, workers=workers, runner_options=[f"--direct_running_mode={mode}"])
    one, two = Path(tiny_data_dir), tmp_path / "two"  # one: 1 worker process (the fixture)
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir())
    for shard in one.glob("*.tfrecord"):
        assert shard.read_bytes() == (two / shard.name).read_bytes(), shard.name
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (one, two)]
    for manifest in manifests:
        manifest["config"].pop("output")
    assert manifests[0] == manifests[1]


def test_gzip_option_writes_the_same_records_compressed(tiny_data_dir, corpus_sample, spm_model, tmp_path):
    config = PreprocessConfig(inputs=(corpus_sample,), output=str(tmp_path / "gz"), vocab=spm_model,
                              compression="gzip", **TINY_DATA)
    manifest, _ = preprocess(config, workers=1)
    assert manifest.compression_type == "GZIP"
    for shard in Path(tiny_data_dir).glob("*.tfrecord"):
        compressed = tmp_path / "gz" / (shard.name + ".gz")
        assert gzip.decompress(compressed.read_bytes()) == shard.read_bytes()
    first = manifest.split("valid").shards[0]
    assert first.file.endswith(".tfrecord.gz")
    assert len(read_file_records(manifest.shard_path(first), "GZIP")) == first.records


def test_bad_input_is_counted_and_skipped_never_fatal(tmp_path, wiki_documents, spm_model):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_documents(corpus / "good.txt", wiki_documents[:40])
    good_lines = sum(len(doc) for doc in wiki_documents[:40])
    (corpus / "bad_utf8.txt").write_bytes(b"A valid first sentence.\n\xff\xfe broken \xc3\x28 bytes\nValid again.\n")
    (corpus / "empty.txt").write_bytes(b"")
    junk_lines = [b"\x00" + bytes(np.random.default_rng(i).integers(0, 256, 99, dtype=np.uint8)).replace(b"\n", b" ")
                  for i in range(64)]
    (corpus / "junk.txt").write_bytes(b"\n".join(junk_lines))
    (corpus / "long.txt").write_bytes(b"x" * (3 << 20) + b"\nA short line after a huge one.\n")
    (corpus / "truncated.txt.gz").write_bytes(gzip.compress(b"Lost sentence.\n" * 1000)[:40])
    manifest, counters = small_run(tmp_path, [str(corpus / "*")], spm_model)
    assert counters["files"] == 6 and counters["empty_files"] == 1 and counters["unreadable_files"] == 1
    assert counters["invalid_lines"] == 1 + 64
    assert counters["long_lines"] == 1
    assert counters["lines"] == good_lines + 39 + 2 + 1  # valid lines read, blank separators included
    assert counters["documents"] == 40 + 1 + 1
    totals = [split.totals for split in manifest.splits.values()]
    assert sum(t["documents"] for t in totals) == 42
    assert sum(t["records"] for t in totals) == counters["records"] > 0


def test_corrupt_or_truncated_gzip_file_is_reported_by_name(tmp_path, wiki_documents, spm_model):
    from collections import Counter

    from pipeline.corpus import read_documents

    good = gzip.compress(("\n".join(wiki_documents[0]) + "\n").encode())
    path = tmp_path / "broken.txt.gz"
    for damaged in (good[: len(good) // 2] + b"garbage" * 50, good[:-6]):
        path.write_bytes(damaged)
        with pytest.raises(CorpusError, match="broken.txt.gz"):
            list(read_documents(str(path), stats=Counter()))


def test_glob_matching_nothing_is_an_error_naming_it(tmp_path, spm_model):
    with pytest.raises(CorpusError, match="nothing-here"):
        small_run(tmp_path, [str(tmp_path / "nothing-here*.txt")], spm_model)


def test_non_empty_output_is_refused_unless_overwrite(tmp_path, wiki_documents, spm_model):
    source = write_documents(tmp_path / "docs.txt", wiki_documents[:60])
    small_run(tmp_path, [source], spm_model, num_shards=4)
    with pytest.raises(OutputError, match="--overwrite"):
        small_run(tmp_path, [source], spm_model)
    manifest, _ = small_run(tmp_path, [source], spm_model, num_shards=2, overwrite=True)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["manifest.json", "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord",
                     "valid-00000-of-00001.tfrecord"]
    assert manifest.split("train").num_shards == 2


def run_preprocess_cli(tmp_path: Path, source: str, spm_model: str, *flags: str) -> int:
    """`xlnet preprocess` as a user runs it, in this process (in_memory: no worker processes)."""
    return xlnet_cli.main(["preprocess", "--input", source, "--output", str(tmp_path / "out"), "--vocab", spm_model,
                           "--workers", "1", "--direct_running_mode", "in_memory", *flags])


def assert_nothing_left_as_data(output: Path) -> None:
    """A failed run leaves neither manifest.json nor shard files (the directory may remain, empty)."""
    assert not output.exists() or sorted(p.name for p in output.iterdir()) == []


def test_corpus_too_short_for_one_record_fails_clearly(tmp_path, wiki_documents, spm_model, capsys):
    source = write_documents(tmp_path / "tiny.txt", wiki_documents[:1])
    code = run_preprocess_cli(tmp_path, source, spm_model, "--seq-len", "512", "--reuse-len", "256",
                              "--num-predict", "85", "--num-streams", "2", "--num-shards", "1")
    captured = capsys.readouterr()
    assert code == 3
    assert "no training records" in captured.err and "--num-streams" in captured.err
    assert "1 documents" in captured.err and "no manifest.json" in captured.err
    assert "short_streams=2" in captured.out  # the stream and its reversed copy
    assert "Traceback" not in captured.err
    assert_nothing_left_as_data(tmp_path / "out")


def test_empty_input_fails_with_its_own_message_and_writes_nothing(tmp_path, spm_model, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    code = run_preprocess_cli(tmp_path, str(tmp_path / "empty.txt"), spm_model)
    captured = capsys.readouterr()
    assert code == 3
    assert "the input is empty: read 1 file(s) from --input: 0 lines, 0 documents" in captured.err
    assert "skipped 0 invalid lines" in captured.err and "1 empty files" in captured.err
    assert "too short" not in captured.err and "--num-streams" not in captured.err
    assert "Traceback" not in captured.err
    assert_nothing_left_as_data(tmp_path / "out")


def test_input_of_only_invalid_utf8_fails_naming_the_skipped_lines_and_writes_nothing(tmp_path, spm_model, capsys):
    (tmp_path / "binary.txt").write_bytes(b"\n".join(b"\xff\xfe broken \xc3\x28 bytes %d" % i for i in range(399)))
    code = run_preprocess_cli(tmp_path, str(tmp_path / "binary.txt"), spm_model)
    captured = capsys.readouterr()
    assert code == 3
    assert "the input holds no valid line: read 1 file(s) from --input: 0 lines, 0 documents" in captured.err
    assert "skipped 399 invalid lines (not UTF-8" in captured.err
    assert "too short" not in captured.err and "--num-streams" not in captured.err
    assert "invalid_lines=399" in captured.out
    assert "Traceback" not in captured.err
    assert_nothing_left_as_data(tmp_path / "out")


def test_a_failed_run_leaves_the_output_usable_without_overwrite(tmp_path, wiki_documents, spm_model):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert run_preprocess_cli(tmp_path, str(tmp_path / "empty.txt"), spm_model) == 3
    source = write_documents(tmp_path / "docs.txt", wiki_documents[:60])
    manifest, _ = small_run(tmp_path, [source], spm_model)
    assert manifest.split("train").totals["records"] > 0


def test_manifest_records_each_shard_files_size(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    for split in manifest.splits.values():
        for shard in split.shards:
            assert shard.bytes == Path(manifest.shard_path(shard)).stat().st_size
    assert all(shard.bytes > 0 for shard in manifest.split("train").shards)


def test_shards_without_documents_still_get_an_empty_file_and_manifest_entry(tmp_path, wiki_documents, spm_model):
    source = write_documents(tmp_path / "two.txt", wiki_documents[:2])  # two documents: at most 2 busy streams
    manifest, _ = small_run(tmp_path, [source], spm_model, num_streams=8, num_shards=8, valid_shards=2,
                            valid_fraction=0.0)
    train = manifest.split("train")
    assert [shard.file for shard in train.shards] == [f"train-{i:05d}-of-00008.tfrecord" for i in range(8)]
    empty = [shard for shard in train.shards if shard.documents == 0]
    assert len(empty) >= 6
    for shard in empty + list(manifest.split("valid").shards):
        assert shard.records == 0 and Path(manifest.shard_path(shard)).stat().st_size == 0 == shard.bytes
        assert [s.records for s in shard.streams] == [0] * len(shard.streams)


def test_jsonl_input_gives_the_same_documents_and_tokens_as_text(tmp_path, wiki_documents, spm_model):
    documents = wiki_documents[:50]
    text = write_documents(tmp_path / "docs.txt", documents)
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "text": "\n".join(doc)}) + "\n" for i, doc in enumerate(documents))
                     + "not json\n" + json.dumps({"other": 1}) + "\n", encoding="utf-8")
    _, text_counters = small_run(tmp_path, [text], spm_model, name="t")
    _, json_counters = small_run(tmp_path, [str(jsonl)], spm_model, name="j")
    assert json_counters["documents"] == text_counters["documents"] == 50
    assert json_counters["tokens"] == text_counters["tokens"]
    assert json_counters["invalid_lines"] == 2


def test_uncased_option_lowercases_before_tokenising(tmp_path, wiki_documents, spm_model, vocab):
    source = write_documents(tmp_path / "docs.txt", wiki_documents[:60])
    manifest, _ = small_run(tmp_path, [source], spm_model, uncased=True)
    assert manifest.config["uncased"] is True
    processor = vocab.processor()
    rows = read_file_records(manifest.shard_path(manifest.split("train").shards[0]))
    text = processor.decode([int(t) for t in rows[0]["input_ids"]])
    assert text == text.lower() and any(c.isalpha() for c in text)


def test_metrics_summary_and_progress_log_report_the_run(tmp_path, wiki_documents, spm_model, caplog):
    source = write_documents(tmp_path / "docs.txt", wiki_documents[:60])
    with caplog.at_level(logging.INFO, logger="xlnet"):
        manifest, counters = small_run(tmp_path, [source], spm_model)
    totals = {key: sum(split.totals[key] for split in manifest.splits.values())
              for key in ("records", "tokens", "documents", "masked_tokens")}
    assert {key: counters[key] for key in totals} == totals
    report = summary(manifest, counters, 1.0)
    assert f"records={totals['records']}" in report and "train:" in report and "valid:" in report
    assert any("wrote" in message and "train-00000-of-00002" in message for message in caplog.messages)


@pytest.mark.parametrize("changes, flag", [
    (dict(num_shards=5, num_streams=4), "--num-shards"),
    (dict(valid_fraction=1.0), "--valid-fraction"),
    (dict(perm_size=48), "--perm-size"),
    (dict(num_predict=200), "--num-predict"),
])
def test_impossible_preprocess_configs_fail_before_any_work(tmp_path, spm_model, changes, flag):
    with pytest.raises(ConfigError, match=flag):
        small_run(tmp_path, [str(tmp_path / "does-not-matter.txt")], spm_model, **changes)
    assert not (tmp_path / "out").exists()


def test_unknown_flags_are_rejected_not_dropped(tmp_path, spm_model, capsys):
    code = xlnet_cli.main(["preprocess", "--input", "x", "--output", str(tmp_path / "o"), "--vocab", spm_model,
                           "--no-such-flag", "3"])
    assert code == 2 and "--no-such-flag" in capsys.readouterr().err


def test_dataflow_needs_a_worker_image_or_setup_file():
    with pytest.raises(ConfigError, match="--sdk_container_image"):
        pipeline_options("DataflowRunner", 1, ["--project", "p", "--region", "europe-west4",
                                               "--temp_location", "gs://bucket/tmp"])


def test_flink_and_spark_options_pass_through_to_beam():
    flink = pipeline_options("FlinkRunner", 1, ["--flink_master", "flink.example:8081", "--parallelism", "8"])
    assert flink.get_all_options()["flink_master"] == "flink.example:8081"
    assert flink.get_all_options()["parallelism"] == 8
    spark = pipeline_options("SparkRunner", 1, ["--spark_master_url", "spark://spark.example:7077"])
    assert spark.get_all_options()["spark_master_url"] == "spark://spark.example:7077"
    local = pipeline_options("FnApiRunner", 2, [])
    assert local.get_all_options()["direct_num_workers"] == 2
    assert local.get_all_options()["direct_running_mode"] == "multi_processing"


def test_local_default_is_multi_processing_with_one_worker_per_core(tmp_path):
    import argparse
    import os

    from pipeline.preprocess_command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--input", "x", "--output", str(tmp_path), "--vocab", "v"])
    assert args.workers == os.cpu_count()
    for workers in (1, args.workers):
        options = pipeline_options(args.runner, workers, []).get_all_options()
        assert (options["direct_running_mode"], options["direct_num_workers"]) == ("multi_processing", workers)
    in_memory = pipeline_options("FnApiRunner", 1, ["--direct_running_mode", "in_memory"]).get_all_options()
    assert in_memory["direct_running_mode"] == "in_memory"


def test_reader_sends_each_document_to_the_shard_of_its_stream(corpus_sample, spm_model):
    from pipeline.beam_pipeline import ReadDocuments, ReadTask
    from pipeline.corpus import expand_inputs, read_documents
    from pipeline.streams import place_document, shard_of_stream

    config = PreprocessConfig(inputs=(corpus_sample,), output="unused", vocab=spm_model, **TINY_DATA)
    (input_file,) = expand_inputs(config.inputs)
    received, reports = {}, []
    for (split, shard), batch in ReadDocuments(config).process(ReadTask(input_file)):
        if isinstance(batch, dict):  # the file's read report, bound for the last stage
            reports.append(((split, shard), batch))
            continue
        for key, stream, order, lines in batch.documents():
            place = place_document(key, config.seed, config.valid_fraction, config.num_streams)
            assert (split, shard, stream, order) == (place.split, shard_of_stream(place.stream, config.num_shards_of(
                split)), place.stream, place.order)
            received[key] = lines
    expected = {f"{input_file.key}:{i}": lines for i, lines in enumerate(read_documents(input_file.path))}
    assert received == expected
    ((carrier, report),) = reports
    assert carrier == ("train", 0) and report["file"] == input_file.path
    assert (report["files"], report["documents_read"]) == (1, len(expected))


def test_every_element_the_readers_get_is_a_file_and_every_shard_is_seeded_once(spm_model):
    """Runners deal a Create's elements to their workers by position (FnApiRunner in turn, Dask in consecutive
    runs): one file per element gives every worker reading, whatever the number of workers."""
    from pipeline.beam_pipeline import EveryShard, ReadDocuments, ReadTask, every_shard, read_tasks
    from pipeline.corpus import InputFile

    config = PreprocessConfig(inputs=("unused",), output="unused", vocab=spm_model, **TINY_DATA)
    markers = every_shard(config)
    for count in (1, 2, 3, len(markers) + 2):
        files = [InputFile(f"/corpus/{i}.txt", f"{i}.txt", 1) for i in range(count)]
        tasks = read_tasks(files, markers)
        assert [task.file for task in tasks] == files
        assert sorted(marker for task in tasks for marker in task.markers) == sorted(markers)
    (task,) = read_tasks([], markers)
    assert task == ReadTask(None, tuple(markers))
    seeded = list(ReadDocuments(config).process(ReadTask(None, (EveryShard("valid", 0), EveryShard("train", 1)))))
    assert seeded == [(("valid", 0), None), (("train", 1), None)]


def test_dataflow_refuses_local_paths_its_workers_cannot_read(tmp_path, corpus_sample, spm_model):
    from pipeline.corpus import expand_inputs
    from pipeline.preprocess_command import check_paths

    local = PreprocessConfig(inputs=(corpus_sample,), output="gs://bucket/data", vocab="gs://bucket/spiece.model")
    with pytest.raises(ConfigError, match="--input"):
        check_paths(local, "DataflowRunner", expand_inputs(local.inputs))
    for changes, flag in ((dict(output=str(tmp_path / "out")), "--output"), (dict(vocab=spm_model), "--vocab")):
        config = PreprocessConfig(**{**dict(inputs=("gs://bucket/corpus/*.txt",), output="gs://bucket/data",
                                            vocab="gs://bucket/spiece.model"), **changes})
        with pytest.raises(ConfigError, match=flag):
            check_paths(config, "DataflowRunner", [])


def test_the_runs_counters_are_in_the_manifest_and_its_report_file_is_gone(tiny_data_dir, corpus_sample):
    manifest = load_manifest(tiny_data_dir)
    assert manifest.counters["files"] == 1 and manifest.counters["dropped_bytes"] == 0
    assert manifest.counters["records"] == sum(split.totals["records"] for split in manifest.splits.values())
    assert not [p.name for p in Path(tiny_data_dir).iterdir() if p.name.startswith(".preprocess-report-")]


def test_results_a_runner_delivers_twice_or_never_are_problems_that_publish_nothing(spm_model):
    from pipeline.beam_pipeline import READ_STATS, SHARD_STATS, RunReport, every_shard

    config = PreprocessConfig(inputs=("a.txt",), output="unused", vocab=spm_model, **TINY_DATA)
    read = {"kind": "read", "file": "a.txt", "worker": "h:1", **{key: 0 for key in READ_STATS}}
    shards = [{"kind": "shard", "split": s.split, "shard": s.shard, "file": config.shard_name(s.split, s.shard),
               "worker": "h:2", "records": 1, "tokens": 1, "masked_tokens": 1, "documents": 1, "streams": [],
               **{key: 0 for key in SHARD_STATS}} for s in every_shard(config)]
    assert RunReport.gather([read, *shards], ["a.txt"], config).problems == []
    twice = RunReport.gather([read, read, *shards], ["a.txt"], config)
    assert twice.problems == ["the runner delivered the results of input file a.txt 2 times"]
    never = RunReport.gather([read, *shards[1:]], ["a.txt"], config)
    assert never.problems == [f"the runner delivered no results for 1 shard(s), e.g. {shards[0]['file']}"]


def test_a_relative_vocab_is_stored_so_that_another_working_directory_finds_it(tmp_path, wiki_documents,
                                                                                 spm_model, monkeypatch):
    import shutil

    from pipeline.vocab import load_vocab
    from tfrecords.manifest import vocabulary_path

    (tmp_path / "vocab").mkdir()
    shutil.copy(spm_model, tmp_path / "vocab" / "spiece.model")
    source = write_documents(tmp_path / "docs.txt", wiki_documents[:60])
    monkeypatch.chdir(tmp_path)
    manifest, _ = small_run(tmp_path, [source], "vocab/spiece.model")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    stored = load_manifest(str(tmp_path / "out"))
    assert stored.vocab["path"] == stored.config["vocab"] == str(tmp_path / "vocab" / "spiece.model")
    assert load_vocab(vocabulary_path(stored)).sha256 == stored.vocab["sha256"]


def test_in_memory_runs_one_worker_whatever_workers_says(tmp_path):
    options = pipeline_options("FnApiRunner", 2, ["--direct_running_mode", "in_memory"]).get_all_options()
    assert (options["direct_running_mode"], options["direct_num_workers"]) == ("in_memory", 1)


@pytest.mark.parametrize("argv", [
    ["preprocess", "--input", "x", "--output", "o", "--vocab", "v", "--seq-len", "-1"],
    ["preprocess", "--input", "x", "--output", "o", "--vocab", "v", "--workers", "0"],
    ["preprocess", "--input", "x", "--output", "o"],
    ["preprocess", "--input", "x", "--output", "o", "--vocab", "v", "--runner", "dask", "--dask-scheduler", "not a url"],
    ["vocab", "--input", "x", "--output", "o", "--vocab-size", "3"],
])
def test_usage_errors_return_before_apache_beam_or_tensorflow_is_imported(argv):
    import subprocess
    import sys

    from support.bundled_data import REPO

    check = ("import sys, xlnet_cli\n"
             f"code = xlnet_cli.main({argv!r})\n"
             "print(code, sorted({'apache_beam', 'tensorflow'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.stdout.split("\n")[0] == "2 []", result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
