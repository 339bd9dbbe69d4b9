"""Text normalisation (tfrecords/text_normalization.py): each documented step, exactly."""
from __future__ import annotations

import re

from tfrecords.text_normalization import WHITESPACE_CODEPOINTS, WHITESPACE_RE2, normalize_text


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
