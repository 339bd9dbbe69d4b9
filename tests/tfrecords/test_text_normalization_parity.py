"""The in-graph normalisation (serving) equals the Python one (preprocessing) on real text."""
from __future__ import annotations

import gzip

import pytest
import tensorflow as tf

from tfrecords.text_normalization import normalize_text as pipeline_normalize
from tfrecords.text_normalization import normalize_text_graph as graph_normalize

from support.bundled_data import CORPUS_DIR

EDGE_CASES = [
    "",
    "   ",
    "  Leading and trailing whitespace\t\n",
    "Caf\u00e9 na\u00efve d\u00e9j\u00e0 vu r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "He said ``hello'' and ''bye``; triple ``` and ''' quotes",
    "runs\t\tof  \u00a0 exotic\u2003spaces\u3000and\u2028line\u2029separators\x1cand\x85NEL",
    "\ufb01ne ligature \u2460 circled \u00bd half \u2122 full\uff37idth",
    "\u039f\u0394\u039f\u03a3 \u03a3\u039f\u03a6\u038a\u0391 \u1f08\u03b8\u1fc6\u03bd\u03b1\u03b9",
    "\u0130stanbul \u0131\u015f\u0131k \u01c5 Stra\u00dfe \u1e9e",
    "\u0301combining mark first, e\u0301 decomposed",
    "\u0939\u093f\u0928\u094d\u0926\u0940 and \ud55c\uad6d\uc5b4 and \u4e2d\u6587",
    "emoji \U0001f44d\U0001f3fd and flags \U0001f1eb\U0001f1f7",
    "Hergé's Tintin (1907–1983) costs £5 or €6.",
]


def corpus_sample() -> list[str]:
    """The first lines of both bundled corpus files plus every line with non-ASCII text among the first 20k."""
    lines = []
    for path in sorted(CORPUS_DIR.glob("*.txt.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            head = [next(f).rstrip("\n") for _ in range(20000)]
        lines += head[:500] + [line for line in head[500:] if not line.isascii()]
    return lines


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return corpus_sample() + EDGE_CASES


def in_graph(texts: list[str], uncased: bool) -> list[str]:
    return [t.decode("utf-8") for t in graph_normalize(tf.constant(texts), uncased).numpy().tolist()]


def test_sample_covers_accents_quotes_and_non_latin_scripts(texts):
    joined = "".join(texts)
    assert "\u00e9" in joined and "''" in joined and "\u03b1" in joined and len(texts) > 1000


@pytest.mark.parametrize("uncased", [False, True], ids=["cased", "uncased"])
def test_graph_normalization_equals_pipeline_normalization(texts, uncased):
    expected = [pipeline_normalize(text, uncased=uncased) for text in texts]
    got = in_graph(texts, uncased)
    mismatches = [(t, e, g) for t, e, g in zip(texts, expected, got) if e != g]
    assert not mismatches, mismatches[:5]


def test_graph_normalization_strips_accents_and_collapses_whitespace():
    assert in_graph(["  Caf\u00e9\u00a0\u00a0d\u00e9j\u00e0\t vu  "], uncased=False) == ["Cafe deja vu"]


def test_graph_normalization_turns_double_backticks_and_single_quotes_into_double_quotes():
    assert in_graph(["``Hello''"], uncased=False) == ['"Hello"']


def test_graph_normalization_lower_cases_only_when_uncased():
    assert in_graph(["The \u00c9COLE"], uncased=True) == ["the ecole"]
    assert in_graph(["The \u00c9COLE"], uncased=False) == ["The ECOLE"]
