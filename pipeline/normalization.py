"""Text normalisation applied to every corpus line before SentencePiece, in one function.

The export team mirrors these steps with TensorFlow ops so that serving sees exactly the
text the model was trained on. The steps, in order:

1. Unicode NFKD (compatibility decomposition). This also turns most exotic spaces
   (no-break space, en space, ideographic space, ...) into a plain space.
2. Drop every character of general category ``Mn`` (non-spacing marks), which strips
   accents: "café" -> "cafe". TF: ``regex_replace(s, r"\\p{Mn}", "")``. (The original
   dropped characters with a non-zero canonical combining class; for Latin, Greek and
   Cyrillic accents the two rules agree, and ``Mn`` is expressible in RE2.)
3. Replace two backticks ````` `` ````` and two single quotes ``''`` with one double quote ``"``.
4. Collapse every run of whitespace (exactly the characters listed in
   ``WHITESPACE_CODEPOINTS``: Python's ``str.split()`` set) into one space and strip the
   ends. ``WHITESPACE_RE2`` is the same class in RE2 syntax for ``tf.strings.regex_replace``.
5. Only when ``uncased``: lower-case with the Unicode simple lower-case mapping
   (``str.lower()``; TF: ``tf.strings.lower(s, encoding="utf-8")``).
"""
from __future__ import annotations

import re
import unicodedata

# (first, last) code point ranges, inclusive: the characters Python's str.split() treats as
# whitespace.
WHITESPACE_CODEPOINTS: tuple[tuple[int, int], ...] = (
    (0x09, 0x0D), (0x1C, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)


def _character_class(escape) -> str:
    parts = [escape(a) if a == b else f"{escape(a)}-{escape(b)}" for a, b in WHITESPACE_CODEPOINTS]
    return "[" + "".join(parts) + "]+"


WHITESPACE_RE2 = _character_class(lambda cp: f"\\x{{{cp:x}}}")
_WHITESPACE = re.compile(_character_class(lambda cp: f"\\U{cp:08x}"))


def normalize_text(text: str, uncased: bool = False) -> str:
    """Normalises one line of corpus text (steps listed in the module docstring)."""
    text = unicodedata.normalize("NFKD", text)
    if not text.isascii():
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    text = text.replace("``", '"').replace("''", '"')
    text = _WHITESPACE.sub(" ", text).strip(" ")
    return text.lower() if uncased else text
