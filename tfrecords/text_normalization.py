"""Text normalisation applied to every line before SentencePiece: the Python rules and their
in-graph mirror, side by side, so preprocessing and serving see exactly the same text.

The steps, in order:

1. Unicode NFKD (compatibility decomposition). This also turns most exotic spaces
   (no-break space, en space, ideographic space, ...) into a plain space.
2. Drop every character of general category ``Mn`` (non-spacing marks), which strips
   accents: "café" -> "cafe". (The original dropped characters with a non-zero canonical
   combining class; for Latin, Greek and Cyrillic accents the two rules agree, and ``Mn`` is
   expressible as a character class.)
3. Replace two backticks ````` `` ````` and two single quotes ``''`` with one double quote ``"``.
4. Collapse every run of whitespace (exactly the characters listed in
   ``WHITESPACE_CODEPOINTS``: Python's ``str.split()`` set) into one space and strip the ends.
5. Only when ``uncased``: lower-case with the Unicode simple lower-case mapping.

``normalize_text`` is the reference (used by `xlnet vocab` and `xlnet preprocess` on decoded
text); ``normalize_text_graph`` does the same with TensorFlow ops for a SavedModel that takes
raw strings. tests/test_text_normalization_parity.py holds them equal on the bundled corpus.
TensorFlow is imported only by the graph version, so Beam workers never load it.
"""
from __future__ import annotations

import functools
import re
import unicodedata
from typing import Callable, Iterable

# (first, last) code point ranges, inclusive: the characters Python's str.split() treats as
# whitespace.
WHITESPACE_CODEPOINTS: tuple[tuple[int, int], ...] = (
    (0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)


def _re2_escape(codepoint: int) -> str:
    return f"\\x{{{codepoint:x}}}"


def _python_escape(codepoint: int) -> str:
    return f"\\U{codepoint:08x}"


def character_class(ranges: Iterable[tuple[int, int]], escape: Callable[[int], str] = _re2_escape) -> str:
    """A regex character class of inclusive code point ``ranges`` (RE2 syntax by default)."""
    parts = [escape(a) if a == b else f"{escape(a)}-{escape(b)}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


def codepoint_ranges(codepoints: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted code points as inclusive (first, last) runs."""
    ranges: list[tuple[int, int]] = []
    for point in sorted(codepoints):
        if ranges and point == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], point)
        else:
            ranges.append((point, point))
    return ranges


WHITESPACE_RE2 = character_class(WHITESPACE_CODEPOINTS) + "+"
_WHITESPACE = re.compile(character_class(WHITESPACE_CODEPOINTS, _python_escape) + "+")


def normalize_text(text: str, uncased: bool = False) -> str:
    """Normalises one line of text (steps listed in the module docstring)."""
    text = unicodedata.normalize("NFKD", text)
    if not text.isascii():
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    text = text.replace("``", '"').replace("''", '"')
    text = _WHITESPACE.sub(" ", text).strip(" ")
    return text.lower() if uncased else text


@functools.lru_cache(maxsize=None)
def nonspacing_mark_class() -> str:
    """Characters of general category Mn in the running Python's Unicode tables, as an RE2 class.

    Built from ``unicodedata`` rather than RE2's own ``\\p{Mn}`` so the graph drops exactly the
    characters ``normalize_text`` drops, even where RE2's Unicode version differs from Python's.
    """
    marks = (c for c in range(0x110000) if unicodedata.category(chr(c)) == "Mn")
    return character_class(codepoint_ranges(marks))


def normalize_text_graph(texts, uncased: bool):
    """``normalize_text`` with TensorFlow ops (same steps, same order), for serving graphs.

    Invalid UTF-8 bytes (which preprocessing never sees: it reads decoded text) become U+FFFD
    first instead of failing the request.

    Args:
      texts: tf.string tensor of any shape.
      uncased: lower-case the text (the vocabulary was trained on lower-cased text).
    Returns:
      tf.string tensor of the same shape.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace")
    texts = tf_text.normalize_utf8(texts, "NFKD")
    texts = tf.strings.regex_replace(texts, nonspacing_mark_class(), "")
    texts = tf.strings.regex_replace(texts, "``|''", '"')
    texts = tf.strings.regex_replace(texts, WHITESPACE_RE2, " ")
    texts = tf.strings.regex_replace(texts, "^ | $", "")
    if uncased:
        texts = tf.strings.lower(texts, encoding="utf-8")
    return texts
