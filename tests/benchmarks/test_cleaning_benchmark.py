"""benchmarks/cleaning.py's smoke run: a line per Jaccard band, per timed part, per Jaccard band of the pairs run
through the pipeline, the pipeline's times, then the settings, consistent; and the comparison with the datatrove
peer's pure parts (agreement, differences, our rule without Beam, the degraded pages), which need no datatrove."""
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
    spec.loader.exec_module(module)
    return module


def test_the_cleaning_benchmark_prints_each_band_each_part_and_its_settings():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--documents", "20",
                             "--edits", "0.01", "0.4", "--repeats", "1", "--pipeline-documents", "30"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    bands, timed, piped, (pipeline,), (settings,) = rows[:7], rows[7:11], rows[11:18], rows[18:19], rows[19:]
    assert sum(row["pairs"] for row in bands) == 40 and all(row["part"] == "near_duplicates" for row in bands)
    assert bands[0]["caught"] == 1.0 and bands[-1]["caught"] in (0.0, None)
    assert [row["part"] for row in timed] == ["minhash_signature", "gopher", "c4", "fineweb"]
    assert all(row["documents_per_s"] > 0 and row["documents"] == 20 for row in timed)
    assert sum(row["pairs"] for row in piped) == 30 and all(row["part"] == "pipeline_near_duplicates" for row in piped)
    assert piped[0]["caught"] == 1.0 and piped[-1]["caught"] == 0.0
    assert pipeline["documents"] == 60 and pipeline["removed"] == 15 and pipeline["near_s"] > 0
    assert settings == {"part": "settings", "documents": 20, "edits": [0.01, 0.4], "shingle_words": 5, "bands": 14,
                        "rows": 8, "min_jaccard": 0.7, "repeats": 1, "pipeline_documents": 30, "peer": None}


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
    assert cleaning.pair_caught(4, clusters) == [True, False, False, False]


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


def test_a_missing_peer_python_is_one_line_and_exit_2():
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cleaning.py"), "--peer-python",
                             str(REPO / "no-such-venv" / "bin" / "python")], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and "--peer-python" in result.stderr.strip().splitlines()[-1]
