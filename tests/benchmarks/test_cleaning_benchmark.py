"""benchmarks/cleaning.py's smoke run: a line per Jaccard band, per timed part, per pipeline run, per Jaccard band of
the pairs run through the pipeline, the pipeline's times, then the settings, consistent; the crawl corpus's runs
(plain and cleaned alternately) with `xlnet preprocess` stood in for; and the comparison with the datatrove peer's pure
parts (agreement, differences, mixed clusters, our rule without Beam, the degraded pages, the crawl corpus), which
need no datatrove."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cleaning():
    """benchmarks/cleaning.py as a module."""
    spec = importlib.util.spec_from_file_location("cleaning_benchmark_under_test", REPO / "benchmarks" / "cleaning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # where its dataclasses look themselves up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_cleaning_benchmark_prints_each_band_each_part_and_its_settings():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--documents", "20",
                             "--edits", "0.01", "0.4", "--repeats", "1", "--pipeline-documents", "30",
                             "--pipeline-cleaning", "near", "full"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    bands, timed, runs, piped, pipelines, (settings,) = (rows[:7], rows[7:11], rows[11:14], rows[14:28], rows[28:30],
                                                         rows[30:])
    assert sum(row["pairs"] for row in bands) == 40 and all(row["part"] == "near_duplicates" for row in bands)
    assert bands[0]["caught"] == 1.0 and bands[-1]["caught"] in (0.0, None)
    assert [row["part"] for row in timed] == ["minhash_signature", "gopher", "c4", "fineweb"]
    assert all(row["documents_per_s"] > 0 and row["documents"] == 20 for row in timed)
    assert [(row["part"], row["round"], row["cleaning"]) for row in runs] == [
        ("pipeline_run", 0, "plain"), ("pipeline_run", 0, "near"), ("pipeline_run", 0, "full")]
    assert all(row["seconds"] > 0 and row["worker_peak_mib"] is None for row in runs)  # one worker: in this process
    assert [row["cleaning"] for row in piped] == ["near"] * 7 + ["full"] * 7
    assert sum(row["pairs"] for row in piped[:7]) == 30
    assert all(row["part"] == "pipeline_near_duplicates" for row in piped)
    assert piped[0]["caught"] == 1.0 and piped[6]["caught"] == 0.0
    near, full = pipelines
    assert near["part"] == "pipeline" and near["cleaning"] == "near" and near["corpus"] == "planted"
    assert near["documents"] == 60 and near["removed"] == 15 and near["removed_by_stage"] == {"near": 15}
    assert near["near_pairs_caught"] == 15 and near["deduplicated_outside_planted"] == 0 and near["cleaned_s"] > 0
    assert near["plain_s"] == full["plain_s"] == runs[0]["seconds"] and full["cleaned_s"] == runs[2]["seconds"]
    assert full["removed"] >= full["removed_by_stage"].get("near", 0) > 0
    assert settings == {"part": "settings", "documents": 20, "edits": [0.01, 0.4], "shingle_words": 5, "bands": 14,
                        "rows": 8, "min_jaccard": 0.7, "repeats": 1, "pipeline_documents": 30,
                        "pipeline_corpus": "planted", "pipeline_cleaning": ["near", "full"], "pipeline_rounds": 1,
                        "peer_corpus": "pairs", "near_share": 0.1, "exact_share": 0.01, "crawl_min_words": 50,
                        "peer": None}


def test_the_crawl_corpus_runs_plain_and_cleaned_alternately(cleaning, monkeypatch, capsys):
    """--pipeline-corpus crawl with --pipeline-rounds 2, each `xlnet preprocess` replaced by a stand-in that
    removes, under --removed, every copy (c, e) and one original no copy was planted beside."""
    calls, unplanted = [], []

    def run(inputs, vocab, output, workers, shards, **options):
        calls.append(("plain" if not options else "+".join(options["dedup"]), len(inputs), shards))
        ids = {json.loads(line)["id"] for path in inputs for line in path.read_text().splitlines()}
        if options:
            unplanted[:] = [min((d for d in ids if d[0] == "o" and not {f"c{d[1:]}", f"e{d[1:]}"} & ids),
                                key=lambda d: int(d[1:]))]
            lines = [{"id": d, "stage": "near", "reason": "near", "kept": "o" + d[1:]} for d in ids if d[0] in "ce"]
            lines.append({"id": unplanted[0], "stage": "near", "reason": "near", "kept": "x"})
            Path(options["removed"]).mkdir()
            Path(options["removed"], "removed.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        return {"plain": 1.0, "near": 1.4, "exact+near": 1.8}[calls[-1][0]] + len(calls) / 100

    monkeypatch.setattr(cleaning, "pipeline_run", run)
    assert cleaning.main(["--documents", "5", "--repeats", "1", "--pipeline-corpus", "crawl", "--pipeline-documents",
                          "40", "--near-share", "0.25", "--exact-share", "0.1", "--pipeline-rounds", "2",
                          "--pipeline-cleaning", "near", "full", "--vocab", "unused.model"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    files = cleaning.PIPELINE_FILES
    assert calls == [(kind, files, (files, 1)) for kind in ("plain", "near", "exact+near") * 2]
    runs = [row for row in rows if row["part"] == "pipeline_run"]
    assert [(row["round"], row["cleaning"]) for row in runs] == [
        (r, c) for r in (0, 1) for c in ("plain", "near", "full")]
    near, full = [row for row in rows if row["part"] == "pipeline"]
    assert near["documents"] == 54 and near["near_pairs"] == 10 and near["exact_pairs"] == 4
    plain, cleaned = (1.01 + 1.04) / 2, (1.42 + 1.45) / 2  # the medians of rounds 0 and 1 (calls 1, 4 and 2, 5)
    assert near["plain_s"] == round(plain, 2) and near["cleaned_s"] == round(cleaned, 2)
    assert abs(near["ratio"] - cleaned / plain) < 1e-3 and full["cleaned_s"] == round((1.83 + 1.86) / 2, 2)
    assert near["near_pairs_caught"] == 10 and near["exact_pairs_caught"] == 4 and near["removed"] == 15
    assert near["deduplicated_outside_planted"] == 1
    assert near["deduplicated_outside_planted_first"] == [[unplanted[0], "x"]]
    assert rows[-1]["part"] == "settings" and rows[-1]["documents"] == 5 and rows[-1]["pipeline_documents"] == 40
    (costs,) = [row for row in rows if row["part"] == "pipeline_part_costs"]
    assert set(costs["seconds_per_worker"]) == {"minhash_signature", "exact_key",
                                                "exact_key_and_signatures_batched", "line_hashes", "gopher_repetition", "gopher_quality", "c4", "fineweb"}


def test_a_crawl_corpus_gives_the_shares_their_copies(cleaning):
    texts = [f"line {i} of one\nand line {i} of two with words {' '.join(map(str, range(i, i + 30)))}"
             for i in range(40)]
    corpus = cleaning.crawl_corpus(texts, 0.25, 0.1, [0.1], np.random.default_rng(0))
    documents = dict(corpus.documents)
    assert len(corpus.documents) == len(documents) == 54 and len(corpus.near_pairs) == 10
    assert len(corpus.exact_pairs) == 4 and not {a for a, _ in corpus.near_pairs} & {a for a, _ in corpus.exact_pairs}
    assert all(documents[a] == documents[b] for a, b in corpus.exact_pairs)
    for a, b in corpus.near_pairs:
        assert documents[a] != documents[b] and documents[b].count("\n") == 1  # its lines kept
        assert sum(x != y for x, y in zip(documents[a].split(), documents[b].split())) == 4  # 10% of 41 words
    assert corpus.planted() == {d for pair in corpus.near_pairs + corpus.exact_pairs for d in pair}


def test_unique_texts_adds_documents_of_drawn_lines_when_the_bundled_ones_run_out(cleaning):
    bundled = len(cleaning.crawl_texts()) + 1189  # the summaries, then the Bible's chapters
    texts = cleaning.unique_texts(bundled + 50, seed=0)
    assert len(texts) == len(set(texts)) == bundled + 50 and cleaning.unique_texts(3, seed=0) == texts[:3]
    lines = {line for text in texts[:bundled] for line in text.split("\n")}
    assert all(set(text.split("\n")) <= lines for text in texts[bundled:])


def test_the_cleaning_benchmark_refuses_impossible_flags_in_one_line():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--edits", "1.5"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].endswith(
        "--documents and --repeats must be positive, --edits in [0, 1)")


def test_agreement_counts_documents_both_sides_decide_the_same_way(cleaning):
    ids = ["a", "b", "c", "d"]
    assert cleaning.agreement(ids, {"a", "b"}, {"a", "c"}) == 0.5
    assert cleaning.agreement(ids, set(), set()) == 1.0 and cleaning.agreement([], {"a"}, set()) == 1.0


def test_differences_group_the_documents_one_side_removes_by_both_rules(cleaning):
    ours = {"w1": None, "w2": "gopher_short_doc", "w10": None, "d3": "c4_curly_bracket", "d4": None}
    peer = {"w1": "too_few_sentences", "w2": "short", "w10": "too_few_sentences", "d3": None, "d4": None}
    assert cleaning.differences(ours, peer) == [
        {"ours": None, "datatrove": "too_few_sentences", "documents": 2, "ids": ["w1", "w10"]},
        {"ours": "c4_curly_bracket", "datatrove": None, "documents": 1, "ids": ["d3"]}]


def test_a_planted_pair_is_caught_when_both_are_in_one_cluster(cleaning):
    clusters = {"o0": 3, "c0": 3, "o1": 4, "c1": 5, "o2": -1, "c2": -1, "c3": None}
    assert cleaning.pair_caught([(f"o{i}", f"c{i}") for i in range(4)], clusters) == [True, False, False, False]


def test_the_peers_clusters_keep_the_copy_ours_keeps_under_our_rule(cleaning):
    from pipeline.near_duplicates import kept_and_removed

    clusters = {"o0": 3, "c0": 3, "e0": 3, "o1": 4, "c1": 5, "o2": -1, "c3": None}
    removed = cleaning.removed_by_our_rule(clusters, seed=0)
    assert removed == set(kept_and_removed([["o0", "c0", "e0"]], 0)) and len(removed) == 2  # one kept of three


def test_a_cluster_joining_two_planted_groups_is_mixed(cleaning):
    clusters = {"o0": 3, "c0": 3, "e0": 3, "o1": 4, "o2": 4, "c2": 4, "o3": -1, "o4": None, "o5": 7, "o15": 7}
    assert cleaning.mixed_clusters(clusters) == [["c2", "o1", "o2"], ["o5", "o15"]]


def test_our_rule_without_beam_removes_one_of_a_near_pair_and_nothing_else(cleaning):
    rng = np.random.default_rng(0)
    words = [f"w{value}" for value in rng.integers(10 ** 6, size=200)]
    copy = words[:100] + ["changed"] + words[101:]
    other = [f"x{value}" for value in rng.integers(10 ** 6, size=200)]
    documents = [("o0", " ".join(words)), ("c0", " ".join(copy)), ("o1", " ".join(other))]
    removed, cluster = cleaning.our_near_duplicates(documents, cleaning.MinHashSettings())
    assert len(removed) == 1 and set(removed.items()) <= {("o0", "c0"), ("c0", "o0")}
    assert set(cluster) == {"o0", "c0"} and cluster["o0"] == cluster["c0"]


def test_each_degradation_changes_the_page(cleaning):
    lines = ["The first line of the page is here.", "A second line follows it, with more words.",
             "And the third line ends it."]
    rng = np.random.default_rng(0)
    pages = {kind: cleaning.degraded(lines, kind, rng) for kind in cleaning.DEGRADATIONS}
    assert all(page != "\n".join(lines) for page in pages.values())
    assert "\n\n" in pages["paragraphs"] and "{" in pages["curly_bracket"] and pages["first_line"] == lines[0]


@pytest.mark.parametrize("flags, message", [
    (["--near-share", "0.95", "--exact-share", "0.1"], "--near-share and --exact-share must be in [0, 1]"),
    (["--exact-share", "-0.1"], "--near-share and --exact-share must be in [0, 1]"),
    (["--pipeline-rounds", "0"], "--pipeline-rounds must be at least 1"),
    (["--crawl-min-words", "-1"], "--crawl-min-words at least 0"),
    (["--pipeline-corpus", "crawl"], "--pipeline-corpus crawl: give --pipeline-documents N"),
    (["--peer-corpus", "crawl"], "--peer-corpus crawl compares with datatrove: give --peer-python"),
    (["--pipeline-corpus", "web"], "argument --pipeline-corpus: invalid choice: 'web'"),
    (["--pipeline-cleaning", "gopher"], "argument --pipeline-cleaning: invalid choice: 'gopher'"),
    (["--peer-corpus", "web"], "argument --peer-corpus: invalid choice: 'web'"),
])
def test_the_new_flags_bad_values_are_one_line_and_exit_2(cleaning, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        cleaning.main(flags)
    assert exit_.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]


def test_peak_memory_sees_a_child_process(cleaning):
    with cleaning.PeakMemory(every=0.05) as peak:
        subprocess.run(["sleep", "0.3"], check=True)
    assert peak.launcher_mib > 0 and peak.worker_mib > 0


def test_a_missing_peer_python_is_one_line_and_exit_2():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--peer-python",
                             str(REPO / "no-such-venv" / "bin" / "python")], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "--peer-python" in result.stderr.strip().splitlines()[-1]
