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
raw strings. tests/tfrecords/test_text_normalization_parity.py holds them equal on the bundled corpus.
``normalized_char_origins`` and ``normalized_char_origins_graph`` apply the same steps while
tracking, per normalised character, the span of original characters it came from (SQuAD answers
are spans of the original context). TensorFlow is imported only by the graph versions, so Beam
workers never load it.
"""
from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

if TYPE_CHECKING:  # imported inside the graph functions only: Beam workers never load TensorFlow
    import tensorflow as tf

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


# ----------------------------------------------------------------------------------------------
# Offset tracking: the same normalisation, each normalised character keeping the span of original
# characters it came from (extractive QA maps answers back to the original text). Python for the
# SQuAD features (trainer/inputs/squad.py), TensorFlow for the served ``answer`` signature
# (trainer/serving/answer_signature.py). The graph version works on a batch of texts as flat arrays
# with a row (text) id per element.
# ----------------------------------------------------------------------------------------------


def normalized_char_origins(text: str, uncased: bool) -> tuple[str, np.ndarray, np.ndarray]:
    """``normalize_text(text, uncased)`` and, per normalised character, the span of ``text`` it came from.

    Each step of the normalisation is followed character by character: an NFKD expansion (``ﬁ``
    -> ``fi``) maps every resulting character to its source, dropped accents map nowhere, a
    ``''`` pair becoming ``"`` maps to both quotes, a collapsed whitespace run to the whole run.
    Where the step-by-step result differs from ``normalize_text`` (canonical reordering across
    characters, a context-dependent lower case such as a final sigma), the differing characters
    take the origin of their nearest aligned neighbour.

    Returns:
      (normalised text, int32 [len(normalised)] first original character, int32 [len(normalised)]
      exclusive end in the original).
    """
    chars: list[tuple[str, int, int]] = []
    for i, char in enumerate(text):
        for piece in unicodedata.normalize("NFKD", char):
            if unicodedata.category(piece) != "Mn":
                chars.append((piece, i, i + 1))
    for pair in ("``", "''"):
        chars = _replace_pairs(chars, pair, '"')
    collapsed: list[tuple[str, int, int]] = []
    for char in chars:
        if char[0].isspace():  # str.split()'s whitespace, the set normalize_text collapses
            if collapsed and collapsed[-1][0] == " ":
                collapsed[-1] = (" ", collapsed[-1][1], char[2])
                continue
            char = (" ", char[1], char[2])
        collapsed.append(char)
    while collapsed and collapsed[0][0] == " ":
        collapsed.pop(0)
    while collapsed and collapsed[-1][0] == " ":
        collapsed.pop()
    if uncased:
        collapsed = [(lower, start, end) for char, start, end in collapsed for lower in char.lower()]
    normalized = normalize_text(text, uncased)
    built = "".join(char for char, _, _ in collapsed)
    starts = np.asarray([start for _, start, _ in collapsed], np.int32)
    ends = np.asarray([end for _, _, end in collapsed], np.int32)
    if built != normalized:
        starts, ends = _realign(built, normalized, starts, ends)
    return normalized, starts, ends


def _replace_pairs(chars: list[tuple[str, int, int]], pair: str, replacement: str) -> list[tuple[str, int, int]]:
    """str.replace(pair, replacement) on (char, start, end) triples: left to right, non-overlapping."""
    out, k = [], 0
    while k < len(chars):
        if k + 1 < len(chars) and chars[k][0] + chars[k + 1][0] == pair:
            out.append((replacement, chars[k][1], chars[k + 1][2]))
            k += 2
        else:
            out.append(chars[k])
            k += 1
    return out


def _realign(built: str, normalized: str, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Origins for ``normalized`` from those of the nearly equal ``built``: equal characters, and
    replaced runs of equal length, keep theirs one to one; a run replaced by one of another length
    spans the whole replaced run; an inserted character takes its left neighbour's."""
    new_starts = np.zeros(len(normalized), np.int32)
    new_ends = np.zeros(len(normalized), np.int32)
    matcher = difflib.SequenceMatcher(None, built, normalized, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            new_starts[j1:j2], new_ends[j1:j2] = starts[i1:i2], ends[i1:i2]
        elif tag == "replace":
            new_starts[j1:j2], new_ends[j1:j2] = starts[i1], ends[i2 - 1]
        elif tag == "insert":
            neighbour = max(i1 - 1, 0)
            new_starts[j1:j2] = starts[neighbour] if len(built) else 0
            new_ends[j1:j2] = ends[neighbour] if len(built) else 0
    return new_starts, new_ends


def _runs(flags: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Runs of consecutive True ``flags`` within a row, over flat [M] arrays sorted by row.

    Returns int32 [M] (offset of each element in its run, run length, index of the run's last
    element); an element whose flag is False is a run of its own.
    """
    import tensorflow as tf

    size = tf.shape(flags)[0]
    positions = tf.range(size)
    # [:size]: for no element at all the leading False alone would be one too many
    continues = tf.concat([[False], flags[1:] & flags[:-1] & tf.equal(rows[1:], rows[:-1])], axis=0)[:size]
    run_id = tf.cumsum(tf.cast(~continues, tf.int32)) - 1
    first = tf.gather(tf.math.segment_min(positions, run_id), run_id)
    last = tf.gather(tf.math.segment_max(positions, run_id), run_id)
    return positions - first, last - first + 1, last


def _merge_quote_pairs(chars: tf.Tensor, rows: tf.Tensor, starts: tf.Tensor, ends: tf.Tensor,
                       quote: str) -> list[tf.Tensor]:
    """str.replace(quote * 2, '"') on flat characters: runs of ``quote`` pair up from their left end
    (an odd run keeps its last); a pair becomes ``"`` spanning both originals."""
    import tensorflow as tf

    is_quote = tf.equal(chars, quote)
    offset, length, _ = _runs(is_quote, rows)
    opens = is_quote & (offset % 2 == 0) & (offset + 1 < length)
    closes = is_quote & (offset % 2 == 1)
    next_end = tf.concat([ends[1:], ends[-1:]], axis=0)
    chars = tf.where(opens, '"', chars)
    ends = tf.where(opens, next_end, ends)
    keep = ~closes
    return [tf.boolean_mask(tensor, keep) for tensor in (chars, rows, starts, ends)]


def _collapse_whitespace(chars: tf.Tensor, rows: tf.Tensor, starts: tf.Tensor, ends: tf.Tensor,
                         num_rows: tf.Tensor) -> list[tf.Tensor]:
    """Whitespace runs -> one " " spanning the whole run; a leading or trailing one is dropped."""
    import tensorflow as tf

    is_space = tf.strings.regex_full_match(chars, character_class(WHITESPACE_CODEPOINTS))
    offset, _, last = _runs(is_space, rows)
    ends = tf.where(is_space, tf.gather(ends, last), ends)
    chars = tf.where(is_space, " ", chars)
    keep = ~is_space | tf.equal(offset, 0)
    chars, rows, starts, ends = [tf.boolean_mask(tensor, keep) for tensor in (chars, rows, starts, ends)]
    # After collapsing, a row can only begin or end with a single space.
    row_splits = tf.RaggedTensor.from_value_rowids(rows, rows, nrows=num_rows).row_splits
    positions = tf.range(tf.shape(rows)[0], dtype=row_splits.dtype)
    is_first = tf.equal(positions, tf.gather(row_splits, rows))
    is_last = tf.equal(positions, tf.gather(row_splits, rows + 1) - 1)
    keep = ~(tf.equal(chars, " ") & (is_first | is_last))
    return [tf.boolean_mask(tensor, keep) for tensor in (chars, rows, starts, ends)]


def _expand(strings: tf.Tensor, rows: tf.Tensor, starts: tf.Tensor, ends: tf.Tensor) -> list[tf.Tensor]:
    """Splits each flat string into its characters, each inheriting its row and origin span."""
    import tensorflow as tf

    split = tf.strings.unicode_split(strings, "UTF-8")
    source = split.value_rowids()
    return [split.flat_values] + [tf.gather(tensor, source) for tensor in (rows, starts, ends)]


def normalized_char_origins_graph(texts: tf.Tensor, uncased: bool) -> dict[str, tf.Tensor]:
    """The normalised texts and, per normalised character, its span of original characters.

    Args:
      texts: tf.string [batch], valid UTF-8 (see :func:`answer`, which transcodes first).
      uncased: lower-case (per character, as tf.strings.lower does with no context).
    Returns:
      ``normalized`` tf.string [batch]; ``chars`` tf.string, ``origin_start`` and ``origin_end``
      int32 RaggedTensors [batch, (normalised characters)]: first original character (code point
      index) and exclusive end of each normalised character.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    num_rows = tf.shape(texts, out_type=tf.int64)[0]
    original = tf.strings.unicode_split(texts, "UTF-8")  # [batch, (characters)]
    index_in_text = tf.cast(tf.ragged.range(original.row_lengths()).flat_values, tf.int32)
    decomposed = tf_text.normalize_utf8(original.flat_values, "NFKD")
    decomposed = tf.strings.regex_replace(decomposed, nonspacing_mark_class(), "")
    chars, rows, starts, ends = _expand(decomposed, original.value_rowids(), index_in_text, index_in_text + 1)
    for quote in ("`", "'"):  # the order of normalize_text's replacements
        chars, rows, starts, ends = _merge_quote_pairs(chars, rows, starts, ends, quote)
    chars, rows, starts, ends = _collapse_whitespace(chars, rows, starts, ends, num_rows)
    chars, starts, ends = (tf.RaggedTensor.from_value_rowids(values, rows, nrows=num_rows)
                           for values in (chars, starts, ends))
    if uncased:
        chars, starts, ends = _lower_case(chars, starts, ends)
    return {"normalized": tf.strings.reduce_join(chars, axis=1), "chars": chars, "origin_start": starts,
            "origin_end": ends}


def _lower_case(chars: tf.RaggedTensor, starts: tf.RaggedTensor,
                ends: tf.RaggedTensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """Lower-cases [batch, (characters)] as normalize_text_graph does, keeping the origins.

    tf.strings.lower (ICU's full mapping) looks at context (a final capital sigma becomes "ς"),
    so each text is lower-cased whole, and its characters keep their origins one to one. That
    needs as many characters after as before, which holds after NFKD (the one unconditional
    expansion, "İ", has decomposed). A text where it does not hold falls back to lower-casing
    each character alone, every resulting character inheriting its source's span.
    """
    import tensorflow as tf

    whole = tf.strings.unicode_split(tf.strings.lower(tf.strings.reduce_join(chars, axis=1), encoding="utf-8"),
                                     "UTF-8")
    one_to_one = tf.equal(whole.row_lengths(), chars.row_lengths())  # [batch]
    per_char = tf.strings.unicode_split(tf.strings.lower(chars.flat_values, encoding="utf-8"), "UTF-8")
    source = per_char.value_rowids()  # flat character each lowered character came from
    fallback = [tf.RaggedTensor.from_value_rowids(values, tf.gather(chars.value_rowids(), source),
                                                  nrows=chars.nrows())
                for values in (per_char.flat_values, tf.gather(starts.flat_values, source),
                               tf.gather(ends.flat_values, source))]

    def choose(kept: tf.RaggedTensor, other: tf.RaggedTensor) -> tf.RaggedTensor:
        # Every row is either wholly ``kept`` (one to one) or wholly ``other``.
        keep = tf.ragged.boolean_mask(kept, kept.with_flat_values(tf.gather(one_to_one, kept.value_rowids())))
        drop = tf.ragged.boolean_mask(other, other.with_flat_values(~tf.gather(one_to_one, other.value_rowids())))
        return tf.concat([keep, drop], axis=1)

    return choose(whole, fallback[0]), choose(starts, fallback[1]), choose(ends, fallback[2])
