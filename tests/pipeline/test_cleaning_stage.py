"""`xlnet preprocess --filters` (pipeline/cleaning.py): each document filtered as it is read, every removal counted
by stage in the manifest and the summary; without the flag, the manifest does not name it (the bytes written
stay what they were); a run whose every document is removed names the filters and writes nothing."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import xlnet_cli
from pipeline.cleaning import FilterRules, clean_document, parse_filter_rules, parse_minhash, parse_names
from pipeline.preprocess_command import NoTrainingRecordsError, preprocess, summary
from pipeline.preprocess_config import PreprocessConfig
from support.bundled_data import TINY_DATA, WIKI_SUMMARIES, read_corpus_documents
from tfrecords.errors import UsageError
from tfrecords.record_config import ConfigError

JUNK = [["Home", "About", "Contact", "Login"],
        ["buy now " * 40],
        ["# # # # # # # #"]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, int]:
    """Long Wikipedia summaries, each a paragraph, with the junk documents between them; and how many
    summaries there are."""
    summaries = [[" ".join(lines)] for lines in read_corpus_documents(WIKI_SUMMARIES, 600)
                 if len(" ".join(lines).split()) >= 80][:60]
    documents = [document for pair in zip(summaries, JUNK * 20) for document in pair]
    path = tmp_path_factory.mktemp("cleaning") / "corpus.txt"
    path.write_text("\n\n".join("\n".join(document) for document in documents) + "\n", encoding="utf-8")
    return str(path), len(summaries)


def run(tmp_path: Path, corpus_path: str, spm_model: str, name: str, **changes):
    return dedup_run(tmp_path, [corpus_path], spm_model, name, **changes)


def test_the_filters_run_in_their_order_whatever_the_order_given():
    assert parse_names("--filters", "fineweb, gopher") == ("gopher", "fineweb")


@pytest.mark.parametrize("text", ["bogus", "gopher,bogus", " , "])
def test_an_unknown_or_empty_filter_list_is_a_usage_error_naming_the_filters(text):
    with pytest.raises(ConfigError, match=r"--filters .*; the filters are gopher, c4, fineweb"):
        parse_names("--filters", text)


def test_the_first_stage_that_removes_a_document_is_its_reason():
    prose = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 50)
             if len(" ".join(lines).split()) >= 80][0]
    assert clean_document([prose.rstrip(".") + " and"], ("c4", "gopher")) == (("c4", "c4_too_few_sentences"), [])
    assert clean_document(["Home", "About"], ("c4", "gopher")) == (("gopher", "gopher_top_2_gram"), [])


def test_c4_keeps_only_its_lines_of_a_document_it_keeps():
    lines = ["This first line has enough words in it.", "menu", "The second line also has enough words.",
             "And a third line ends the page well."]
    assert clean_document(lines, ("c4",)) == (None, [lines[0], lines[2], lines[3]])


def test_a_stage_counts_a_kept_document_as_it_leaves_the_stage():
    lines = ["This first line has enough words in it.", "menu", "The second line also has enough words.",
             "And a third line ends the page well."]
    tally = Counter()
    clean_document(lines, ("c4",), tally)
    assert tally == {"in_documents_c4": 1, "in_bytes_c4": len("\n".join(lines)), "kept_documents_c4": 1,
                     "kept_bytes_c4": len("\n".join(lines)) - len("menu\n")}


def test_without_filters_the_manifest_does_not_name_them(tmp_path, corpus, spm_model):
    manifest, _ = run(tmp_path, corpus[0], spm_model, "plain")
    written = json.loads((tmp_path / "plain" / "manifest.json").read_text())
    assert "filters" not in written["config"] and not [k for k in written["counters"] if k.startswith("removed_")]


def test_filters_remove_the_junk_and_count_it_by_stage_in_the_manifest_and_the_summary(tmp_path, corpus, spm_model):
    path, summaries = corpus
    manifest, counters = run(tmp_path, path, spm_model, "clean", filters=("gopher", "fineweb"))
    written = json.loads((tmp_path / "clean" / "manifest.json").read_text())
    assert written["config"]["filters"] == ["gopher", "fineweb"]
    removed = {k: v for k, v in written["counters"].items() if k.startswith("removed_")}
    assert removed["removed_documents_gopher"] >= len(JUNK) * 20 - 1
    assert removed["removed_documents_gopher"] + removed["removed_documents_fineweb"] <= len(JUNK) * 20 + summaries // 10
    assert removed["removed_bytes_gopher"] > 0
    assert written["counters"]["documents_read"] == summaries + len(JUNK) * 20
    assert "  cleaning: removed_bytes_fineweb=" in summary(manifest, counters, 1.0)


def test_filtered_runs_write_the_same_bytes_every_time(tmp_path, corpus, spm_model):
    run(tmp_path, corpus[0], spm_model, "a", filters=("gopher",))
    run(tmp_path, corpus[0], spm_model, "b", filters=("gopher",))
    for shard in sorted((tmp_path / "a").glob("*.tfrecord")):
        assert shard.read_bytes() == (tmp_path / "b" / shard.name).read_bytes()


def test_a_run_whose_every_document_is_removed_names_the_filters_and_writes_nothing(tmp_path, spm_model):
    junk = tmp_path / "junk.txt"
    junk.write_text("\n\n".join("\n".join(document) for document in JUNK * 5) + "\n", encoding="utf-8")
    with pytest.raises(NoTrainingRecordsError, match=r"--filters removed every document \(gopher 15 of 15 read"):
        run(tmp_path, str(junk), spm_model, "none", filters=("gopher",))
    assert not (tmp_path / "none" / "manifest.json").exists()


def test_the_filters_flag_is_refused_in_one_line_before_any_work(tmp_path, corpus, spm_model, capsys):
    code = xlnet_cli.main(["preprocess", "--input", corpus[0], "--output", str(tmp_path / "x"), "--vocab", spm_model,
                           "--filters", "gopher,bogus"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("xlnet preprocess: error: --filters 'gopher,bogus': unknown filter 'bogus'; "
                                         "the filters are gopher, c4, fineweb")


# ------------------------------------------------------------------------------------------------------ --clean
def parsed_config(*flags: str):
    import argparse

    from pipeline.preprocess_command import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(["--input", "x", "--output", "o", "--vocab", "v", *flags]))


def test_the_recommended_set_is_every_filter_and_both_dedups():
    config = parsed_config("--clean", "recommended")
    assert (config.filters, config.dedup) == (("gopher", "c4", "fineweb"), ("exact", "near"))


def test_filters_or_dedup_beside_a_set_replace_that_part_of_it():
    config = parsed_config("--clean", "recommended", "--filters", "c4", "--minhash", "bands=20,rows=5")
    assert (config.filters, config.dedup, config.minhash_bands) == (("c4",), ("exact", "near"), 20)
    assert parsed_config("--clean", "recommended", "--dedup", "exact").dedup == ("exact",)


def test_an_unknown_set_is_refused_in_one_line_before_any_work(tmp_path, corpus, spm_model, capsys):
    code = xlnet_cli.main(["preprocess", "--input", corpus[0], "--output", str(tmp_path / "x"), "--vocab", spm_model,
                           "--clean", "strict"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == "xlnet preprocess: error: --clean 'strict': unknown set; the sets are recommended"
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------------------------- --filter-rules
def test_a_threshold_changed_by_filter_rules_changes_what_is_removed():
    text = ("The committee met on a quiet morning to discuss the harbour, the budget and the new school. Members of "
            "the town agreed that the old bridge needed repair before winter, and they asked the mayor to write to "
            "the county about money for it.")  # 44 words of prose
    assert clean_document([text], ("gopher",))[0] == ("gopher", "gopher_short_doc")  # fewer than 50
    rules = FilterRules.of(parse_filter_rules("gopher.min_words=40,gopher.max_duplicate_line_chars=1", ("gopher",)))
    assert rules.gopher_quality.min_words == 40 and rules.gopher_repetition.max_duplicate_line_chars == 1.0
    assert clean_document([text], ("gopher",), rules_of=rules) == (None, [text])
    assert FilterRules.of(()) == FilterRules()  # no change: the anchors' defaults


def test_filter_rules_are_sorted_pairs_of_each_thresholds_type():
    assert parse_filter_rules("c4.min_sentences=2, gopher.max_duplicate_lines=0.5", ("gopher", "c4")) == (
        ("c4.min_sentences", 2), ("gopher.max_duplicate_lines", 0.5))


@pytest.mark.parametrize("text, message", [
    ("gopher.min_words=abc", "gopher.min_words must be a whole number, got 'abc'"),
    ("gopher.min_words=2.5", "gopher.min_words must be a whole number, got '2.5'"),
    ("fineweb.max_short_lines_ratio=x", "fineweb.max_short_lines_ratio must be a number, got 'x'"),
    ("gopher.max_duplicate_lines=1.5", "max_duplicate_lines is a share: at most 1, got 1.5"),
    ("c4.min_sentences=-1", "min_sentences must be a finite number of at least 0, got -1"),
    ("fineweb.max_newlines_per_word=nan", "max_newlines_per_word must be a finite number of at least 0, got nan"),
    ("gopher.min_words=200000", "min_words (200000) is above max_words (100000)"),
    ("bogus.min_words=1", "'bogus.min_words' names no filter; a key is FILTER.THRESHOLD, the filters gopher, c4, "
                          "fineweb"),
    ("gopher.stop_words=1", "gopher has no threshold 'stop_words'; its thresholds are min_words, max_words,"),
    (" , ", "no FILTER.THRESHOLD=VALUE given"),
])
def test_a_bad_filter_rule_is_a_usage_error_naming_the_flag_and_the_threshold(text, message):
    with pytest.raises(ConfigError) as raised:
        parse_filter_rules(text, ("gopher", "c4", "fineweb"))
    assert str(raised.value).startswith(f"--filter-rules {text!r}: ") and message in str(raised.value)


def test_a_threshold_of_a_filter_not_run_is_refused_naming_the_filter_to_add():
    with pytest.raises(ConfigError, match=r"fineweb.short_line_length is a threshold of the fineweb filter, not run: "
                                          r"add --filters fineweb$"):
        parse_filter_rules("fineweb.short_line_length=10", ("gopher", "c4"))


def test_a_config_with_a_threshold_of_a_filter_not_run_is_refused_naming_the_flag():
    config = PreprocessConfig(inputs=("x",), output="o", vocab="v", filters=("gopher",),
                              filter_rules=(("c4.min_sentences", 2),))
    with pytest.raises(ConfigError, match=r"^--filter-rules: c4.min_sentences is a threshold of the c4 filter, not "
                                          r"run: add --filters c4$"):
        config.validate()


def test_filter_rules_are_refused_in_one_line_before_any_work(tmp_path, corpus, spm_model, capsys):
    code = xlnet_cli.main(["preprocess", "--input", corpus[0], "--output", str(tmp_path / "x"), "--vocab", spm_model,
                           "--filters", "gopher", "--filter-rules", "gopher.min_words=lots"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("xlnet preprocess: error: --filter-rules 'gopher.min_words=lots': "
                                         "gopher.min_words must be a whole number, got 'lots'")
    assert not (tmp_path / "x").exists()


def test_the_manifest_records_the_changed_thresholds_and_their_removals(tmp_path, corpus, spm_model):
    path, _ = corpus
    run(tmp_path, path, spm_model, "default", filters=("gopher",))
    changed = (("gopher.min_words", 120),)  # the summaries are of 80 words and more
    run(tmp_path, path, spm_model, "changed", filters=("gopher",), filter_rules=changed)
    default, strict = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("default", "changed"))
    assert "filter_rules" not in default["config"] and strict["config"]["filter_rules"] == {"gopher.min_words": 120}
    assert strict["counters"]["removed_documents_gopher"] > default["counters"]["removed_documents_gopher"]


def written_with_workers(tmp_path: Path, inputs: list[str], spm_model: str, workers: int, **cleaning) -> dict:
    """The shard files, the manifest's counters and the --removed files of a run with ``workers`` worker
    processes."""
    settings = {**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1}
    output, removed = tmp_path / f"workers{workers}", tmp_path / f"removed{workers}"
    config = PreprocessConfig(inputs=tuple(inputs), output=str(output), vocab=spm_model, removed=str(removed),
                              **cleaning, **settings)
    _, counters = preprocess(config, workers=workers)
    manifest = json.loads((output / "manifest.json").read_text())
    readers[workers] = len(counters.report.reads)
    return {**{p.name: p.read_bytes() for p in sorted([*output.glob("*.tfrecord"), *removed.glob("*.jsonl")])},
            "counters": json.dumps(manifest["counters"], sort_keys=True).encode()}


# How many worker processes read files in the last run written_with_workers made with that many workers.
readers: dict[int, int] = {}


@pytest.mark.slow  # two runs with worker processes (about 40 s)
def test_filtered_runs_write_the_same_bytes_with_one_or_two_worker_processes(tmp_path, corpus, spm_model):
    outputs = [written_with_workers(tmp_path, [corpus[0]], spm_model, workers, filters=("gopher", "c4"),
                                    languages=("en",)) for workers in (1, 2)]
    assert outputs[0] == outputs[1] and len(outputs[0]) == 7
    assert b'"in_documents_language": 120' in outputs[0]["counters"]

# ------------------------------------------------------------------------------------------ --dedup exact
@pytest.fixture(scope="module")
def copied_corpus(tmp_path_factory) -> tuple[list[str], int]:
    """Two files of long summaries; 12 of them copied into the other file as well (case and spacing changed
    for half of them); a third file of NEAR_COPIES near-identical versions of the longest summary (one word of
    each replaced): the corpus's files, and how many exact copies there are."""
    summaries = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 400)
                 if len(" ".join(lines).split()) >= 40][:60]
    directory = tmp_path_factory.mktemp("copies")
    first, second = summaries[:30], summaries[30:]
    copies = [text.upper() if i % 2 else "  ".join(text.split()) for i, text in enumerate(first[:12])]
    longest = max(summaries, key=lambda text: len(text.split()))
    paths = []
    for name, texts in (("a.txt", first), ("b.txt", second + copies), ("c.txt", near_copies(longest, NEAR_COPIES))):
        (directory / name).write_text("\n\n".join(texts) + "\n", encoding="utf-8")
        paths.append(str(directory / name))
    return paths, len(copies)


NEAR_COPIES = 40


def near_copies(text: str, count: int) -> list[str]:
    """``count`` versions of ``text``, the i-th with its word 7 * i (cyclically) replaced by a made-up one."""
    words = text.split()
    return [" ".join(f"zq{i}" if j == 7 * i % len(words) else word for j, word in enumerate(words))
            for i in range(count)]


def dedup_run(tmp_path: Path, inputs: list[str], spm_model: str, name: str, overwrite: bool = False, **changes):
    settings = {**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1, **changes}
    config = PreprocessConfig(inputs=tuple(inputs), output=str(tmp_path / name), vocab=spm_model, **settings)
    return preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"], overwrite=overwrite)


def test_exact_duplicates_are_removed_but_one_copy_and_counted(tmp_path, copied_corpus, spm_model):
    paths, copies = copied_corpus
    plain, _ = dedup_run(tmp_path, paths, spm_model, "plain")
    deduped, counters = dedup_run(tmp_path, paths, spm_model, "dedup", dedup=("exact",))
    written = json.loads((tmp_path / "dedup" / "manifest.json").read_text())
    assert written["config"]["dedup"] == ["exact"] and written["counters"]["removed_documents_exact"] == copies
    assert written["counters"]["removed_bytes_exact"] > 0
    documents = lambda manifest: sum(split.totals["documents"] for split in manifest.splits.values())
    assert documents(plain) - documents(deduped) == copies
    assert "removed_documents_exact=12" in summary(deduped, counters, 1.0)


def test_the_copy_kept_does_not_depend_on_the_order_of_the_inputs(tmp_path, copied_corpus, spm_model):
    paths, _ = copied_corpus
    dedup_run(tmp_path, paths, spm_model, "ab", dedup=("exact",))
    dedup_run(tmp_path, list(reversed(paths)), spm_model, "ba", dedup=("exact",))
    for shard in sorted((tmp_path / "ab").glob("*.tfrecord")):
        assert shard.read_bytes() == (tmp_path / "ba" / shard.name).read_bytes()


def test_an_unknown_dedup_kind_is_refused_in_one_line(tmp_path, copied_corpus, spm_model, capsys):
    code = xlnet_cli.main(["preprocess", "--input", copied_corpus[0][0], "--output", str(tmp_path / "x"), "--vocab",
                           spm_model, "--dedup", "fuzzy"])
    assert code == 2 and capsys.readouterr().err.strip() == (
        "xlnet preprocess: error: --dedup 'fuzzy': unknown kind 'fuzzy'; the kinds are exact, near, lines")


# ------------------------------------------------------------------------------------------ --dedup near
def test_many_near_identical_documents_are_one_cluster_of_which_one_is_kept(tmp_path, copied_corpus, spm_model):
    paths, _ = copied_corpus
    _, counters = dedup_run(tmp_path, paths[2:], spm_model, "near", dedup=("near",), num_streams=1, num_shards=1,
                            valid_fraction=0.0)
    assert counters["removed_documents_near"] == NEAR_COPIES - 1 and counters["documents"] == 1
    written = json.loads((tmp_path / "near" / "manifest.json").read_text())
    assert written["config"]["dedup"] == ["near"] and written["config"]["min_jaccard"] == 0.7


def test_exact_dedup_runs_first_and_near_dedup_takes_only_the_copies_it_kept(tmp_path, copied_corpus, spm_model):
    paths, copies = copied_corpus
    _, counters = dedup_run(tmp_path, paths, spm_model, "both", dedup=("near", "exact"))
    assert counters["removed_documents_exact"] == copies
    # the near copies and the summary they were made from (the exact copies are not near ones again)
    assert counters["removed_documents_near"] == NEAR_COPIES
    assert counters["documents"] == 60 - counters["empty_documents"]


def test_documents_unlike_each_other_are_not_near_duplicates(tmp_path, copied_corpus, spm_model):
    _, counters = dedup_run(tmp_path, copied_corpus[0][:1], spm_model, "distinct", dedup=("near",))
    assert counters["removed_documents_near"] == 0


def test_without_near_dedup_the_manifest_does_not_name_the_minhash_settings(tmp_path, copied_corpus, spm_model):
    dedup_run(tmp_path, copied_corpus[0][:1], spm_model, "exact", dedup=("exact",))
    written = json.loads((tmp_path / "exact" / "manifest.json").read_text())
    assert not {"min_jaccard", "minhash_bands", "minhash_rows", "shingle_words"} & set(written["config"])


@pytest.mark.slow  # three runs with worker processes (about 60 s)
def test_deduplicated_runs_write_the_same_bytes_with_one_two_or_three_worker_processes(tmp_path, copied_corpus,
                                                                                       spm_model):
    outputs = [written_with_workers(tmp_path, copied_corpus[0], spm_model, workers, filters=("c4",),
                                    dedup=("exact", "near")) for workers in (1, 2, 3)]
    assert outputs[0] == outputs[1] == outputs[2] and b'"removed_documents_near": 40' in outputs[0]["counters"]
    assert readers[2] == 2  # the three files are read on both workers, not one after another on one


def test_the_dedup_buckets_change_nothing_written(tmp_path, copied_corpus, spm_model, monkeypatch):
    # One bucket per 1 kB of input (some 60 buckets here, where the default gives one): every copy of a text,
    # every band group, still in one bucket; the same shards, counters and audit, near copies in one cluster.
    import pipeline.beam_pipeline as beam_pipeline

    def written(name: str) -> dict:
        _, counters = dedup_run(tmp_path, copied_corpus[0], spm_model, name, filters=("c4",), dedup=("exact", "near"),
                                removed=str(tmp_path / f"{name}-removed"))
        files = [*(tmp_path / name).glob("*.tfrecord"), *(tmp_path / f"{name}-removed").glob("*.jsonl")]
        return {**{p.name: p.read_bytes() for p in sorted(files)}, "counters": counters.report.counters}

    one = written("one")
    monkeypatch.setattr(beam_pipeline, "BUCKET_INPUT_BYTES", 1024)
    assert beam_pipeline.dedup_buckets(sum(Path(p).stat().st_size for p in copied_corpus[0])) > 40
    many = written("many")
    assert many == one and one["counters"]["removed_documents_near"] == NEAR_COPIES
    assert one["counters"]["removed_documents_exact"] > 0

@pytest.mark.slow  # a Dask cluster of two workers, and the same run on FnApiRunner (about 40 s)
def test_cleaned_runs_on_a_dask_cluster_write_fnapirunners_bytes_and_counters(tmp_path, copied_corpus, spm_model):
    from support.dask_cluster import DaskTestCluster

    settings = {**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1}
    outputs = []
    for name in ("fnapi", "dask"):
        config = PreprocessConfig(inputs=tuple(copied_corpus[0]), output=str(tmp_path / name), vocab=spm_model,
                                  filters=("c4",), dedup=("exact", "near"), removed=str(tmp_path / f"{name}-removed"),
                                  **settings)
        if name == "dask":
            with DaskTestCluster(2) as cluster:
                preprocess(config, runner="dask", workers=2, dask_scheduler=cluster.address)
        else:
            preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"])
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        written = [*(tmp_path / name).glob("*.tfrecord"), *(tmp_path / f"{name}-removed").glob("*.jsonl")]
        outputs.append(({p.name: p.read_bytes() for p in sorted(written)}, manifest["counters"]))
    assert outputs[0] == outputs[1] and outputs[0][1]["removed_documents_exact"] > 0
    assert outputs[0][1]["removed_documents_near"] == NEAR_COPIES


# ------------------------------------------------------------------------------------------ --removed DIR
def audit(directory: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(directory.glob("removed-*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_removed_document_is_listed_with_its_stage_reason_and_kept_copy(tmp_path, copied_corpus, spm_model):
    paths, copies = copied_corpus
    _, counters = dedup_run(tmp_path, paths, spm_model, "out", filters=("gopher",), dedup=("exact", "near"),
                            removed=str(tmp_path / "removed"))
    lines = audit(tmp_path / "removed")
    by_stage = Counter(line["stage"] for line in lines)
    assert by_stage == {stage: counters[f"removed_documents_{stage}"] for stage in ("gopher", "exact", "near")
                        if counters[f"removed_documents_{stage}"]}
    assert by_stage["gopher"] > 0 and by_stage["exact"] > copies // 2 and by_stage["near"] == NEAR_COPIES
    for line in lines:
        file, _, number = line["id"].rpartition(":")
        assert file in paths and int(number) >= 1
        assert (line["reason"] == line["stage"]) == ("kept" in line)
    texts = {f"{path}:{i + 1}": text for path in paths  # one line per document, a blank line between them
             for i, text in enumerate(Path(path).read_text(encoding="utf-8").split("\n")) if text}
    exact = [line for line in lines if line["stage"] == "exact"]
    assert all(" ".join(texts[line["id"]].split()).lower() == " ".join(texts[line["kept"]].split()).lower()
               for line in exact)


def test_the_removed_documents_of_json_lines_are_named_by_their_id_field(tmp_path, copied_corpus, spm_model):
    texts = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 80)][:40]
    corpus = tmp_path / "corpus.jsonl"
    rows = [{"id": f"doc-{i}", "text": text} for i, text in enumerate(texts)] + [{"id": "copy", "text": texts[3]}]
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    dedup_run(tmp_path, [str(corpus)], spm_model, "out", dedup=("exact",), removed=str(tmp_path / "removed"))
    (line,) = audit(tmp_path / "removed")
    assert {line["id"], line["kept"]} == {"copy", "doc-3"} and line["stage"] == line["reason"] == "exact"


def test_a_run_that_publishes_nothing_writes_nothing_into_the_removed_directory(tmp_path, spm_model):
    junk = tmp_path / "junk.txt"
    junk.write_text("\n\n".join("\n".join(document) for document in JUNK * 5) + "\n", encoding="utf-8")
    with pytest.raises(NoTrainingRecordsError):
        run(tmp_path, str(junk), spm_model, "none", filters=("gopher",), removed=str(tmp_path / "removed"))
    assert audit(tmp_path / "removed") == [] and not list((tmp_path / "removed").iterdir())


def test_removed_without_any_cleaning_is_refused_in_one_line(tmp_path, copied_corpus, spm_model, capsys):
    code = xlnet_cli.main(["preprocess", "--input", copied_corpus[0][0], "--output", str(tmp_path / "x"), "--vocab",
                           spm_model, "--removed", str(tmp_path / "r")])
    assert code == 2 and capsys.readouterr().err.strip() == (
        f"xlnet preprocess: error: --removed {tmp_path / 'r'}: nothing is removed without --languages, --filters or "
        "--dedup")


def test_an_earlier_runs_removed_documents_are_replaced_only_with_overwrite(tmp_path, copied_corpus, spm_model):
    earlier = tmp_path / "removed"
    earlier.mkdir()
    (earlier / "removed-train-00000-of-00009.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="--removed .* holds an earlier run's removed documents"):
        dedup_run(tmp_path, copied_corpus[0][:2], spm_model, "out", dedup=("exact",), removed=str(earlier))
    assert not (tmp_path / "out" / "manifest.json").exists()
    dedup_run(tmp_path, copied_corpus[0][:2], spm_model, "again", dedup=("exact",), removed=str(earlier),
              overwrite=True)
    assert sorted(path.name for path in earlier.iterdir()) == ["removed-train-00000-of-00002.jsonl",
                                                                "removed-train-00001-of-00002.jsonl",
                                                                "removed-valid-00000-of-00001.jsonl"]


# ------------------------------------------------------------------------------------------ the manifest's table
def test_the_manifest_counts_each_stages_documents_and_bytes_in_removed_and_kept(tmp_path, copied_corpus, spm_model):
    stages = ("gopher", "c4", "exact", "near")
    dedup_run(tmp_path, copied_corpus[0], spm_model, "out", filters=stages[:2], dedup=stages[2:])
    counters = json.loads((tmp_path / "out" / "manifest.json").read_text())["counters"]
    assert counters["in_documents_gopher"] == counters["documents_read"] == 60 + 12 + NEAR_COPIES
    for stage, following in zip(stages, stages[1:] + (None,)):
        assert counters[f"in_documents_{stage}"] == counters[f"removed_documents_{stage}"] + \
            counters[f"kept_documents_{stage}"]
        if following is not None:
            assert counters[f"kept_documents_{stage}"] == counters[f"in_documents_{following}"]
            assert counters[f"kept_bytes_{stage}"] == counters[f"in_bytes_{following}"]
    assert counters["in_bytes_gopher"] == counters["removed_bytes_gopher"] + counters["kept_bytes_gopher"]
    assert counters["in_bytes_c4"] >= counters["removed_bytes_c4"] + counters["kept_bytes_c4"]  # lines dropped
    assert counters["kept_documents_near"] == counters["documents"] + counters["empty_documents"]


# ------------------------------------------------------------------------------------------ --minhash
def test_minhash_keys_set_the_near_duplicate_settings():
    assert parse_minhash("bands=20, rows=5, hashes=100, min_jaccard=0.8, shingle_words=3") == {
        "minhash_bands": 20, "minhash_rows": 5, "min_jaccard": 0.8, "shingle_words": 3}


@pytest.mark.parametrize("flags, message", [
    (["--dedup", "near", "--minhash", "min_jaccard=1.5"], "--minhash min_jaccard must be in [0, 1], got 1.5"),
    (["--dedup", "near", "--minhash", "bands=20,rows=5,hashes=112"],
     "--minhash 'bands=20,rows=5,hashes=112': bands x rows = 20 x 5 = 100 hash functions, not hashes=112"),
    (["--dedup", "near", "--minhash", "hashes=100"],
     "--minhash 'hashes=100': bands x rows = 14 x 8 = 112 hash functions, not hashes=100"),
    (["--dedup", "near", "--minhash", "rows=0"], "--minhash rows must be at least 1, got 0"),
    (["--dedup", "near", "--minhash", "sides=3"],
     "--minhash 'sides=3': unknown key 'sides'; the keys are shingle_words, bands, rows, min_jaccard, hashes"),
    (["--dedup", "near", "--minhash", "bands=many"], "--minhash 'bands=many': bands must be a number, got 'many'"),
    (["--dedup", "exact", "--minhash", "bands=10"],
     "--minhash bands=10: only --dedup near uses it; add --dedup near (or exact,near)"),
])
def test_impossible_minhash_settings_are_refused_in_one_line_before_any_work(tmp_path, copied_corpus, spm_model,
                                                                              capsys, flags, message):
    code = xlnet_cli.main(["preprocess", "--input", copied_corpus[0][0], "--output", str(tmp_path / "x"), "--vocab",
                           spm_model, *flags])
    assert code == 2 and capsys.readouterr().err.strip() == f"xlnet preprocess: error: {message}"
    assert not (tmp_path / "x").exists()
