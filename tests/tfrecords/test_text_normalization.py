"""Text normalisation (tfrecords/text_normalization.py): each documented step, exactly, and the span of
original text each normalised character comes from (Python and in-graph versions alike)."""
from __future__ import annotations

import re

import pytest

from tfrecords.text_normalization import (
    WHITESPACE_CODEPOINTS,
    WHITESPACE_RE2,
    normalize_text,
    normalized_char_origins,
    normalized_char_origins_graph,
)

from support.bundled_data import corpus_lines


def test_accents_are_stripped_by_nfkd_and_dropping_nonspacing_marks():
    assert normalize_text("Café déjà vu, naïve Zoë, Ångström") == "Cafe deja vu, naive Zoe, Angstrom"


def test_compatibility_characters_are_decomposed():
    assert normalize_text("ﬁne ½ ℌ") == "fine 1⁄2 H"


def test_double_backticks_and_double_single_quotes_become_a_double_quote():
    assert normalize_text("``Quoted'' text") == '"Quoted" text'


def test_whitespace_runs_collapse_to_one_space_and_ends_are_stripped():
    assert normalize_text("  a\t\tb \u00a0\u3000 c\u2028d\x1c e  ") == "a b c d e"


def test_whitespace_set_is_exactly_what_python_split_uses():
    listed = {cp for first, last in WHITESPACE_CODEPOINTS for cp in range(first, last + 1)}
    python = {cp for cp in range(0x110000) if chr(cp).isspace()}
    assert listed == python


def test_re2_whitespace_class_lists_the_same_code_points():
    ranges = re.findall(r"\\x\{([0-9a-f]+)\}(?:-\\x\{([0-9a-f]+)\})?", WHITESPACE_RE2)
    listed = {cp for a, b in ranges for cp in range(int(a, 16), int(b or a, 16) + 1)}
    assert listed == {cp for first, last in WHITESPACE_CODEPOINTS for cp in range(first, last + 1)}


def test_case_is_kept_unless_uncased():
    assert normalize_text("The Élysée Palace") == "The Elysee Palace"
    assert normalize_text("The Élysée Palace", uncased=True) == "the elysee palace"


def test_control_symbols_in_text_survive():
    assert normalize_text("End of paragraph. <eop>") == "End of paragraph. <eop>"


# ------------------------------------------------------------------------- tracked origins
def test_origins_follow_accents_ligatures_quote_pairs_and_whitespace_runs():
    text = "  Zürich ''ﬁne''\t\tday "
    normalized, starts, ends = normalized_char_origins(text, uncased=False)
    assert normalized == normalize_text(text) == 'Zurich "fine" day'
    # Z ü r i c h at 2..7; space 8; '' at 9-10 -> one '"'; ﬁ (11) -> f and i; n e 12-13;
    # '' at 14-15; the tab run 16-17 -> one space; d a y 18..20
    assert starts.tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 11, 11, 12, 13, 14, 16, 18, 19, 20]
    assert ends.tolist() == [3, 4, 5, 6, 7, 8, 9, 11, 12, 12, 13, 14, 16, 18, 19, 20, 21]


def test_origins_survive_a_context_dependent_lower_case():
    # str.lower turns the last sigma into a final sigma; character by character it would not be
    normalized, starts, ends = normalized_char_origins("ΟΔΟΣ Α", uncased=True)
    assert normalized == "οδος α"
    assert starts.tolist() == [0, 1, 2, 3, 4, 5] and ends.tolist() == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("uncased", [False, True])
def test_graph_origins_equal_the_python_origins(uncased):
    import tensorflow as tf

    texts = corpus_lines(200) + ["  Zürich ''ﬁne''\t\tday ", "ΟΔΟΣ Α", "İstanbul ``x``", "", "   "]
    graph = normalized_char_origins_graph(tf.constant(texts), uncased)
    for k, text in enumerate(texts):
        normalized, starts, ends = normalized_char_origins(text, uncased)
        assert graph["normalized"][k].numpy().decode() == normalized, text
        assert graph["origin_start"][k].numpy().tolist() == starts.tolist(), text
        assert graph["origin_end"][k].numpy().tolist() == ends.tolist(), text
