"""The quality and repetition rules of web-corpus cleaning (issue 46): Gopher, C4 and FineWeb, as pure functions.

Each rule set is a frozen dataclass of thresholds whose defaults are the anchors' (named on each), and a
function of one document's text that returns the reason it is removed (the first rule it fails, in the
order below) or None when it is kept. No Beam and no TensorFlow here: the pipeline's cleaning stage
calls them per document, and tests pin each rule on exact values.

Sources: Gopher, Rae et al. 2021 (arXiv:2112.11446), appendix A.1.1 and table A1, with datatrove's
``GopherQualityFilter`` and ``GopherRepetitionFilter`` defaults; C4, Raffel et al. 2020, with the
constants of TensorFlow Datasets' ``c4_utils.py`` (5 words per line, 3 sentences per page, words of at
most 1000 characters); FineWeb, datatrove's ``FineWebQualityFilter``.

Where we differ from datatrove, and why:
- **Words** are ``\\w+`` runs and single punctuation marks (``WORD_PATTERN``), not NLTK's Punkt/Treebank
  tokenizer: no model to download on every worker, and the same words on every machine. NLTK splits
  contractions ("do", "n't"); we do not, so a few word counts and mean lengths differ.
- **Sentences** (C4) end at ``.``, ``!`` or ``?`` followed by a space or the line's end, not Punkt's
  model (abbreviations such as "e.g. this" count as a sentence end here).
- **Stop words** are counted whatever their case ("The" at a sentence's start is one); datatrove
  compares case-sensitively. **Alphabetic words** are counted among the words, punctuation marks
  left out, as the ratio's denominator is; datatrove counts them among all tokens.
- **Bullet lines** (Gopher) start with "\u2022"; datatrove also counts a line starting with "-". Its
  stop-word rule counts distinct stop words, ours every occurrence.
- **Duplicate lines** (Gopher) are the page's non-blank lines (datatrove splits on runs of newlines,
  so it skips empty lines too, but keeps lines of spaces).
- **FineWeb**'s ratios count every line, blank ones included, and compare with ``<=`` / ``>=`` as
  written here; datatrove leaves blank lines out and compares strictly, with its own set of
  end-of-line punctuation.
- **Duplicate n-grams** (Gopher): the characters of the words covered by an n-gram that occurs more
  than once, each word counted once, over the characters of all words, as the Gopher paper defines it.
  datatrove's ``find_all_duplicate`` is called on the list of n-grams (joining n-grams of n-grams) and
  counts characters of the joined strings over the document's length, spaces included.
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Iterator, Optional

WORD_PATTERN = re.compile(r"\w+|[^\w\s]")
PARAGRAPH_BREAK = re.compile(r"\n{2,}")
SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def words_of(text: str) -> list[str]:
    """The words and punctuation marks of ``text`` (see the module's note on words)."""
    return WORD_PATTERN.findall(text)


# ------------------------------------------------------------------------------------------- Gopher quality
@dataclasses.dataclass(frozen=True)
class GopherQuality:
    """Gopher's quality rules (datatrove's GopherQualityFilter defaults)."""

    min_words: int = 50
    max_words: int = 100_000
    min_mean_word_length: float = 3.0
    max_mean_word_length: float = 10.0
    max_symbol_word_ratio: float = 0.1  # "#", and "..." or "…", each per word
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alphabetic_words_ratio: float = 0.8
    min_stop_words: int = 2
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")


def gopher_quality(text: str, rules: GopherQuality = GopherQuality()) -> Optional[str]:
    """Why Gopher's quality rules remove ``text``, or None."""
    tokens = words_of(text)
    words = [token for token in tokens if token not in PUNCTUATION]
    if len(words) < rules.min_words:
        return "gopher_short_doc"
    if len(words) > rules.max_words:
        return "gopher_long_doc"
    mean_length = sum(map(len, words)) / len(words)
    if mean_length < rules.min_mean_word_length:
        return "gopher_below_mean_word_length"
    if mean_length > rules.max_mean_word_length:
        return "gopher_above_mean_word_length"
    if text.count("#") / len(words) > rules.max_symbol_word_ratio:
        return "gopher_too_many_hashes"
    if (text.count("...") + text.count("\u2026")) / len(words) > rules.max_symbol_word_ratio:
        return "gopher_too_many_ellipsis"
    lines = text.splitlines() or [""]
    if sum(line.lstrip().startswith("\u2022") for line in lines) / len(lines) > rules.max_bullet_lines_ratio:
        return "gopher_too_many_bullets"
    ending = sum(line.rstrip().endswith(("...", "\u2026")) for line in lines) / len(lines)
    if ending > rules.max_ellipsis_lines_ratio:
        return "gopher_too_many_end_ellipsis"
    if sum(any(c.isalpha() for c in word) for word in words) / len(words) < rules.min_alphabetic_words_ratio:
        return "gopher_below_alphabetic_ratio"
    stop_words = set(rules.stop_words)
    if sum(word.lower() in stop_words for word in words) < rules.min_stop_words:
        return "gopher_too_few_stop_words"
    return None


# ---------------------------------------------------------------------------------------- Gopher repetition
@dataclasses.dataclass(frozen=True)
class GopherRepetition:
    """Gopher's repetition rules (table A1 of the paper; datatrove's GopherRepetitionFilter defaults)."""

    max_duplicate_paragraphs: float = 0.3
    max_duplicate_paragraph_chars: float = 0.2
    max_duplicate_lines: float = 0.3
    max_duplicate_line_chars: float = 0.2
    top_ngram_chars: tuple[tuple[int, float], ...] = ((2, 0.20), (3, 0.18), (4, 0.16))
    duplicate_ngram_chars: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11),
                                                             (10, 0.10))


def duplicates(parts: list[str]) -> tuple[int, int]:
    """(how many of ``parts`` repeat an earlier one, their characters)."""
    seen: set[str] = set()
    count = chars = 0
    for part in parts:
        if part in seen:
            count, chars = count + 1, chars + len(part)
        else:
            seen.add(part)
    return count, chars


class WordNGrams:
    """A page's words as the n-gram rules count them: each word an integer id, numbered in the words' sorted
    order so that comparing ids compares the words (the top n-gram's tie-break), and n-grams tuples of ids
    built by ``zip``. Counting small tuples made in C, not slices of the word list made in Python, is what
    makes the nine n-gram rules cheap."""

    def __init__(self, words: list[str]):
        vocabulary = sorted(set(words))
        number = {word: index for index, word in enumerate(vocabulary)}
        self.ids = [number[word] for word in words]
        self.lengths = list(map(len, words))
        self.id_lengths = list(map(len, vocabulary))
        self.total = sum(self.lengths)

    def grams(self, n: int) -> Iterator[tuple[int, ...]]:
        """The n-grams in order of their first word (none when there are fewer than n words)."""
        return zip(*(self.ids[k:] for k in range(n)))

    def top_share(self, n: int) -> float:
        """The characters of the most frequent n-gram (of the most frequent, the greatest), times its count,
        over all words' characters."""
        grams = Counter(self.grams(n))
        if not grams or not self.total:
            return 0.0
        count = max(grams.values())
        # Each n-gram once (a 3- or 4-gram, most pages): the greatest of all, compared in C.
        gram = max(grams) if count == 1 else max(gram for gram, seen in grams.items() if seen == count)
        return sum(self.id_lengths[word] for word in gram) * count / self.total

    def duplicate_share(self, n: int) -> float:
        """The characters of the words inside any n-gram that occurs more than once, each word counted once,
        over all words' characters."""
        grams = Counter(self.grams(n))
        if not self.total or len(grams) == max(0, len(self.ids) - n + 1):  # each n-gram once: none covered
            return 0.0
        covered = bytearray(len(self.ids))
        for start, gram in enumerate(self.grams(n)):
            if grams[gram] > 1:
                covered[start:start + n] = b"\x01" * n
        return sum(length for length, inside in zip(self.lengths, covered) if inside) / self.total


def top_ngram_share(words: list[str], n: int) -> float:
    """The characters of the most frequent word n-gram, times its count, over all words' characters."""
    return WordNGrams(words).top_share(n)


def duplicate_ngram_share(words: list[str], n: int) -> float:
    """The characters of the words inside any n-gram that occurs more than once, each word counted once,
    over all words' characters."""
    return WordNGrams(words).duplicate_share(n)


def duplicate_ngram_failure(ngrams: WordNGrams, limits: tuple[tuple[int, float], ...]) -> Optional[int]:
    """The first n of ``limits`` whose duplicate n-gram share is over its limit, or None.

    A share is never computed when an earlier one already bounds it: the words an n-gram repeated covers
    are also covered by the two (n - 1)-grams it starts and ends with, repeated as well, so the share of a
    longer n never exceeds that of a shorter one. With the defaults (5 to 10 words, limits 0.15 down to
    0.10) a page whose 5-gram share is at most 0.10, nearly every page, is counted once, not six times."""
    shares: dict[int, float] = {}
    for n, limit in limits:
        if any(shorter <= n and share <= limit for shorter, share in shares.items()):
            continue
        shares[n] = ngrams.duplicate_share(n)
        if shares[n] > limit:
            return n
    return None


def gopher_repetition(text: str, rules: GopherRepetition = GopherRepetition()) -> Optional[str]:
    """Why Gopher's repetition rules remove ``text``, or None."""
    if not text.strip():
        return "gopher_empty"
    paragraphs = PARAGRAPH_BREAK.split(text.strip())
    count, chars = duplicates(paragraphs)
    if count / len(paragraphs) > rules.max_duplicate_paragraphs:
        return "gopher_duplicate_paragraphs"
    if chars / len(text) > rules.max_duplicate_paragraph_chars:
        return "gopher_duplicate_paragraph_chars"
    # The blank lines between paragraphs are no lines of the page: counted, every one after the
    # first would repeat it, and a page of five paragraphs would fail the rule.
    lines = [line for line in text.splitlines() if line.strip()]
    count, chars = duplicates(lines)
    if count / len(lines) > rules.max_duplicate_lines:
        return "gopher_duplicate_lines"
    if chars / len(text) > rules.max_duplicate_line_chars:
        return "gopher_duplicate_line_chars"
    ngrams = WordNGrams([word.lower() for word in words_of(text) if word not in PUNCTUATION])
    for n, limit in rules.top_ngram_chars:
        if ngrams.top_share(n) > limit:
            return f"gopher_top_{n}_gram"
    failed = duplicate_ngram_failure(ngrams, rules.duplicate_ngram_chars)
    return None if failed is None else f"gopher_duplicate_{failed}_grams"


# ------------------------------------------------------------------------------------------------------- C4
@dataclasses.dataclass(frozen=True)
class C4Rules:
    """C4's page and line rules (TensorFlow Datasets' c4_utils.py constants)."""

    min_words_per_line: int = 5
    min_sentences: int = 3
    max_word_length: int = 1000
    end_marks: tuple[str, ...] = (".", "?", "!", '"')
    policy_phrases: tuple[str, ...] = ("terms of use", "privacy policy", "cookie policy", "uses cookies",
                                       "use of cookies", "use cookies")


CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")


def c4_clean(text: str, rules: C4Rules = C4Rules()) -> tuple[Optional[str], str]:
    """(why C4 removes the page, or None; the lines it keeps, joined by newlines). Lines without terminal
    punctuation (or ending in an ellipsis), with fewer words than ``min_words_per_line``, with a word longer
    than ``max_word_length``, naming javascript or a policy phrase are dropped; a page with "lorem
    ipsum" or a curly bracket, or fewer than ``min_sentences`` sentences left, is removed."""
    kept, sentences = [], 0
    for line in text.splitlines():
        line = CITATION.sub("", line.strip())
        words = line.split()
        if any(len(word) > rules.max_word_length for word in words):
            continue
        if not line.endswith(rules.end_marks) or line.endswith("..."):
            continue
        if len(words) < rules.min_words_per_line:
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            return "c4_lorem_ipsum", ""
        if "javascript" in lower:
            continue
        if "{" in line:
            return "c4_curly_bracket", ""
        if any(phrase in lower for phrase in rules.policy_phrases):
            continue
        sentences += max(1, len(SENTENCE_END.findall(line)))
        kept.append(line)
    if sentences < rules.min_sentences:
        return "c4_too_few_sentences", ""
    return None, "\n".join(kept)


# -------------------------------------------------------------------------------------------------- FineWeb
@dataclasses.dataclass(frozen=True)
class FineWebRules:
    """FineWeb's quality rules (datatrove's FineWebQualityFilter defaults)."""

    min_line_punctuation_ratio: float = 0.12
    max_short_lines_ratio: float = 0.67
    short_line_length: int = 30
    max_duplicate_line_chars: float = 0.01
    max_newlines_per_word: float = 0.3
    stop_chars: tuple[str, ...] = (".", "'", '"', "!", "?")


def fineweb_quality(text: str, rules: FineWebRules = FineWebRules()) -> Optional[str]:
    """Why FineWeb's rules remove ``text``, or None."""
    lines = text.split("\n")
    if sum(line.endswith(rules.stop_chars) for line in lines) / len(lines) <= rules.min_line_punctuation_ratio:
        return "fineweb_line_punctuation"
    if sum(len(line) <= rules.short_line_length for line in lines) / len(lines) >= rules.max_short_lines_ratio:
        return "fineweb_short_lines"
    characters = len(text.replace("\n", ""))
    _, repeated = duplicates([line for line in lines if line.strip()])
    if characters and repeated / characters >= rules.max_duplicate_line_chars:
        return "fineweb_duplicate_line_chars"
    words = words_of(text)
    if not words or text.count("\n") / len(words) > rules.max_newlines_per_word:
        return "fineweb_list_like"
    return None
