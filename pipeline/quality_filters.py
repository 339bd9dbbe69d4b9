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
import functools
import re
from collections import Counter
from itertools import accumulate, compress, filterfalse, repeat
from operator import le, mul, sub
from typing import Iterator, Optional

WORD_PATTERN = re.compile(r"\w+|[^\w\s]")
PARAGRAPH_BREAK = re.compile(r"\n{2,}")
SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# WORD_PATTERN's tokens less the punctuation marks, found without them: "_" is a word character, so a lone
# "_" still comes out and is taken out after (``lone_underscores_removed``).
WORD_ONLY_PATTERN = re.compile(r"\w+|[^\w\s" + re.escape("".join(sorted(PUNCTUATION))) + "]")
# For ASCII text, str.translate then str.split give the same words 3x cheaper than the regex (both split at
# the same whitespace, str.isspace's): each punctuation mark becomes a space, each other mark that is no
# word character (the control characters) a word of its own between spaces.
ASCII_WORDS = str.maketrans({chr(code): " " if chr(code) in PUNCTUATION else f" {chr(code)} "
                             for code in range(128) if re.fullmatch(r"[^\w\s]", chr(code))})


def words_of(text: str) -> list[str]:
    """The words and punctuation marks of ``text`` (see the module's note on words)."""
    return WORD_PATTERN.findall(text)


def lone_underscores_removed(words: list[str], text: str) -> list[str]:
    """``words`` less each word that is "_" alone (a punctuation mark, though a word character)."""
    return list(filter("_".__ne__, words)) if "_" in text else words


def tokenised(text: str) -> tuple[str, list[str], list[str]]:
    """(``text``, its words as the Gopher rules count them: ``words_of`` less punctuation marks, those words
    lower-cased). For ASCII text both lists are the lower-cased one: lower-casing ASCII keeps each word's
    length and its letters letters, all that gopher_quality reads besides the lower-cased words."""
    if text.isascii():
        lowered = lone_underscores_removed(text.lower().translate(ASCII_WORDS).split(), text)
        return text, lowered, lowered
    words = lone_underscores_removed(WORD_ONLY_PATTERN.findall(text), text)
    return text, words, list(map(str.lower, words))


_last_page: tuple[Optional[str], list[str], list[str]] = (None, [], [])


def gopher_words(text: str) -> tuple[list[str], list[str]]:
    """``tokenised(text)``'s two lists, the last page's kept: the cleaning stage calls gopher_repetition and
    then gopher_quality on the same text object, which so is tokenised once. The entry is one tuple, swapped
    whole, and matched by identity: a thread never reads one page's words for another page."""
    global _last_page
    page = _last_page
    if page[0] is not text:
        page = _last_page = tokenised(text)
    return page[1], page[2]


def check_thresholds(rule_set: object, shares: tuple[str, ...] = (),
                     ordered: tuple[tuple[str, str], ...] = ()) -> None:
    """ValueError naming the field for a threshold of ``rule_set`` out of range: every number finite and at least
    0 (a count a whole number), each of ``shares`` at most 1, each (low, high) of ``ordered`` in that order."""
    for field in dataclasses.fields(rule_set):
        value = getattr(rule_set, field.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not value >= 0 or value == float("inf"):
            raise ValueError(f"{field.name} must be a finite number of at least 0, got {value}")
        if field.name in shares and value > 1:
            raise ValueError(f"{field.name} is a share: at most 1, got {value}")
    for low, high in ordered:
        if getattr(rule_set, low) > getattr(rule_set, high):
            raise ValueError(f"{low} ({getattr(rule_set, low)}) is above {high} ({getattr(rule_set, high)})")


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

    def __post_init__(self) -> None:
        check_thresholds(self, ("max_bullet_lines_ratio", "max_ellipsis_lines_ratio", "min_alphabetic_words_ratio"),
                         (("min_words", "max_words"), ("min_mean_word_length", "max_mean_word_length")))


def gopher_quality(text: str, rules: GopherQuality = GopherQuality()) -> Optional[str]:
    """Why Gopher's quality rules remove ``text``, or None."""
    words, lowered = gopher_words(text)
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
    ellipses = text.count("...") + text.count("\u2026")
    if ellipses / len(words) > rules.max_symbol_word_ratio:
        return "gopher_too_many_ellipsis"
    reason = line_rules_failed(text, rules, ellipses > 0)
    if reason:
        return reason
    if alphabetic_words(words) / len(words) < rules.min_alphabetic_words_ratio:
        return "gopher_below_alphabetic_ratio"
    if sum(map(frozenset(rules.stop_words).__contains__, lowered)) < rules.min_stop_words:
        return "gopher_too_few_stop_words"
    return None


def line_rules_failed(text: str, rules: GopherQuality, ellipses: bool) -> Optional[str]:
    """The bullet and end-ellipsis line rules' reason, or None. A page without a bullet (or without an
    ellipsis) has no line starting (ending) with one: its ratio is 0, the lines are not looked at."""
    lines = text.splitlines() or [""]
    bullets = sum(map(str.startswith, map(str.lstrip, lines), repeat("\u2022"))) if "\u2022" in text else 0
    if bullets / len(lines) > rules.max_bullet_lines_ratio:
        return "gopher_too_many_bullets"
    ending = sum(map(str.endswith, map(str.rstrip, lines), repeat(("...", "\u2026")))) if ellipses else 0
    if ending / len(lines) > rules.max_ellipsis_lines_ratio:
        return "gopher_too_many_end_ellipsis"
    return None


def alphabetic_words(words: list[str]) -> int:
    """How many of ``words`` hold a letter: those all letters counted in C, only the others (numbers, mixed
    words, symbols; a few in prose) looked at letter by letter."""
    mixed = filterfalse(str.isalpha, words)
    return sum(map(str.isalpha, words)) + sum(any(c.isalpha() for c in word) for word in mixed)


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

    def __post_init__(self) -> None:
        check_thresholds(self, ("max_duplicate_paragraphs", "max_duplicate_paragraph_chars", "max_duplicate_lines",
                                "max_duplicate_line_chars"))


def duplicates(parts: list[str]) -> tuple[int, int]:
    """(how many of ``parts`` repeat an earlier one, their characters): all parts less the distinct ones."""
    distinct = set(parts)
    count = len(parts) - len(distinct)
    return count, sum(map(len, parts)) - sum(map(len, distinct)) if count else 0


class WordNGrams:
    """A page's words as the n-gram rules count them, n-grams tuples of words built by ``zip``. Each word of
    an n-gram that occurs twice occurs twice, so only n-grams of such words (in prose a few short stretches,
    mostly around "of the") are counted, picked out in C by ``windows``; any other n-gram occurs once."""

    def __init__(self, words: list[str]):
        self.words = words
        self.total = sum(map(len, words))
        self.counts = Counter(words)
        # byte i is 1 where words[i] occurs more than once, as one integer: windows are a few shifts and ands
        repeated = bytes(map((1).__lt__, map(self.counts.__getitem__, words)))
        self.repeated = int.from_bytes(repeated, "little")
        # The most characters one word takes, all its occurrences together; the longest word's.
        self.most = max(map(mul, map(len, self.counts), self.counts.values()), default=0)
        self.longest = max(map(len, self.counts), default=0)

    def grams(self, n: int) -> Iterator[tuple[str, ...]]:
        """The n-grams in order of their first word (none when there are fewer than n words)."""
        return zip(*(self.words[k:] for k in range(n)))

    def windows(self, n: int) -> bytes:
        """Byte i is 1 where the n words from the i-th on all occur more than once (empty when none do)."""
        inside = self.repeated
        for k in range(1, n):
            inside &= self.repeated >> (8 * k)
        return inside.to_bytes(len(self.words), "little") if inside else b""

    def run_grams(self, n: int) -> dict[tuple[str, ...], int]:
        """The n-grams of words that each occur more than once, with their counts: every n-gram that occurs
        more than once, and its count."""
        windows = self.windows(n)
        return Counter(compress(self.grams(n), windows)) if windows else {}

    def top_share(self, n: int) -> float:
        """The characters of the most frequent n-gram (of the most frequent, the greatest), times its count,
        over all words' characters."""
        return self.top_share_of(n, self.run_grams(n)) if self.total else 0.0

    def top_share_of(self, n: int, counts: dict[tuple[str, ...], int]) -> float:
        """``top_share(n)`` from ``run_grams(n)``."""
        count = max(counts.values(), default=1)
        if count > 1:
            gram = max(gram for gram, seen in counts.items() if seen == count)
        else:  # each n-gram once: the greatest of all, compared in C
            gram = max(self.grams(n), default=())
        return sum(map(len, gram)) * count / self.total

    def top_share_over(self, n: int, limit: float) -> bool:
        """``top_share(n) > limit``, the share computed only when no bound settles it. Each bound is an
        integer at least the share's numerator, over the same total: its float is no smaller."""
        if not self.total or n <= 0:
            return self.top_share(n) > limit
        # The top n-gram's characters times its count are at most the sum of its words' characters times
        # their counts (its count is at most each of theirs): on long pages far under the limit.
        if n * self.most / self.total <= limit:
            return False
        counts = self.run_grams(n)
        if not counts or max(counts.values()) == 1:
            # Each n-gram once: the share is the greatest's characters, at most n times the longest word's,
            # at most the widest n words'.
            if n * self.longest / self.total <= limit or self.widest_window(n) / self.total <= limit:
                return False
        return self.top_share_of(n, counts) > limit

    def widest_window(self, n: int) -> int:
        """The most characters n consecutive words hold (all words' when there are fewer)."""
        ends = list(accumulate(map(len, self.words), initial=0))
        return max(map(sub, ends[n:], ends), default=ends[-1])

    def duplicate_share(self, n: int) -> float:
        """The characters of the words inside any n-gram that occurs more than once, each word counted once,
        over all words' characters."""
        counts = self.run_grams(n)
        if max(counts.values(), default=1) == 1:  # each n-gram once: none covered
            return 0.0
        covered = bytearray(len(self.words))
        for first, gram in compress(enumerate(self.grams(n)), self.windows(n)):
            if counts[gram] > 1:
                covered[first:first + n] = b"\x01" * n
        return sum(compress(map(len, self.words), covered)) / self.total


def top_ngram_share(words: list[str], n: int) -> float:
    """The characters of the most frequent word n-gram, times its count, over all words' characters."""
    return WordNGrams(words).top_share(n)


def duplicate_ngram_share(words: list[str], n: int) -> float:
    """The characters of the words inside any n-gram that occurs more than once, each word counted once,
    over all words' characters."""
    return WordNGrams(words).duplicate_share(n)


def top_ngram_failure(ngrams: WordNGrams, limits: tuple[tuple[int, float], ...]) -> Optional[int]:
    """The first n of ``limits`` whose top n-gram share is over its limit, or None."""
    for n, limit in limits:
        if ngrams.top_share_over(n, limit):
            return n
    return None


def duplicate_ngram_failure(ngrams: WordNGrams, limits: tuple[tuple[int, float], ...]) -> Optional[int]:
    """The first n of ``limits`` whose duplicate n-gram share is over its limit, or None.

    A share is never computed when an earlier one already bounds it: the words an n-gram repeated covers
    are also covered by the two (n - 1)-grams it starts and ends with, repeated as well, so the share of a
    longer n never exceeds that of a shorter one. With the defaults (5 to 10 words, limits 0.15 down to
    0.10) a page whose 5-gram share is at most 0.10, nearly every page, is counted once, not six times."""
    shares: dict[int, float] = {}
    none_from = None  # the shortest n with no n-gram repeated: nor any longer one, each share 0.0
    for n, limit in limits:
        if none_from is not None and none_from <= n:
            if 0.0 > limit:
                return n
            continue
        if any(shorter <= n and share <= limit for shorter, share in shares.items()):
            continue
        shares[n] = ngrams.duplicate_share(n)
        if shares[n] > limit:
            return n
        if not shares[n]:
            none_from = n if none_from is None else min(none_from, n)
    return None


def gopher_repetition(text: str, rules: GopherRepetition = GopherRepetition()) -> Optional[str]:
    """Why Gopher's repetition rules remove ``text``, or None."""
    stripped = text.strip()
    if not stripped:
        return "gopher_empty"
    # A page without a blank line is one paragraph: nothing to split.
    paragraphs = PARAGRAPH_BREAK.split(stripped) if "\n\n" in stripped else [stripped]
    count, chars = duplicates(paragraphs)
    if count / len(paragraphs) > rules.max_duplicate_paragraphs:
        return "gopher_duplicate_paragraphs"
    if chars / len(text) > rules.max_duplicate_paragraph_chars:
        return "gopher_duplicate_paragraph_chars"
    # The blank lines between paragraphs are no lines of the page: counted, every one after the
    # first would repeat it, and a page of five paragraphs would fail the rule.
    lines = list(filter(str.strip, text.splitlines()))
    count, chars = duplicates(lines)
    if count / len(lines) > rules.max_duplicate_lines:
        return "gopher_duplicate_lines"
    if chars / len(text) > rules.max_duplicate_line_chars:
        return "gopher_duplicate_line_chars"
    ngrams = WordNGrams(gopher_words(text)[1])
    failed = top_ngram_failure(ngrams, rules.top_ngram_chars)
    if failed is not None:
        return f"gopher_top_{failed}_gram"
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

    def __post_init__(self) -> None:
        check_thresholds(self)


CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")


@functools.lru_cache(maxsize=8)
def phrases_pattern(phrases: tuple[str, ...]) -> re.Pattern:
    """A pattern found where any of ``phrases`` is: one search, not one per phrase."""
    return re.compile("|".join(map(re.escape, phrases))) if phrases else re.compile(r"(?!)")


def c4_clean(text: str, rules: C4Rules = C4Rules()) -> tuple[Optional[str], str]:
    """(why C4 removes the page, or None; the lines it keeps, joined by newlines). Lines without terminal
    punctuation (or ending in an ellipsis), with fewer words than ``min_words_per_line``, with a word longer
    than ``max_word_length``, naming javascript or a policy phrase are dropped; a page with "lorem
    ipsum" or a curly bracket, or fewer than ``min_sentences`` sentences left, is removed."""
    kept, sentences = [], 0
    for line in text.splitlines():
        line = line.strip()
        if "[" in line:  # each citation form starts with one
            line = CITATION.sub("", line)
        # The three reasons to drop a line, cheapest first (any drops it); a word longer than the longest
        # allowed needs a line as long.
        if not line.endswith(rules.end_marks) or line.endswith("..."):
            continue
        # split stops after as many words as the least allowed (the rest one more piece): fewer pieces only
        # when fewer words.
        if len(line.split(None, rules.min_words_per_line)) < rules.min_words_per_line:
            continue
        if len(line) > rules.max_word_length and any(len(word) > rules.max_word_length for word in line.split()):
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            return "c4_lorem_ipsum", ""
        if "javascript" in lower:
            continue
        if "{" in line:
            return "c4_curly_bracket", ""
        if phrases_pattern(rules.policy_phrases).search(lower):
            continue
        sentences += line_sentences(line)
        kept.append(line)
    if sentences < rules.min_sentences:
        return "c4_too_few_sentences", ""
    return None, "\n".join(kept)


def line_sentences(line: str) -> int:
    """C4's sentences of a (non-blank) line: its sentence ends, and at least one."""
    return max(1, len(SENTENCE_END.findall(line)))


def too_few_sentences(lines: list[str], rules: C4Rules = C4Rules()) -> bool:
    """Whether a page of ``lines`` holds fewer than C4's ``min_sentences`` (``--dedup lines`` re-checks a page
    that lost lines by it, as C4 does after its line dedup); blank lines hold none."""
    return sum(line_sentences(line) for line in lines if line.strip()) < rules.min_sentences


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

    def __post_init__(self) -> None:
        check_thresholds(self, ("min_line_punctuation_ratio", "max_short_lines_ratio", "max_duplicate_line_chars"))


def fineweb_quality(text: str, rules: FineWebRules = FineWebRules()) -> Optional[str]:
    """Why FineWeb's rules remove ``text``, or None."""
    lines = text.split("\n")
    if sum(map(str.endswith, lines, repeat(rules.stop_chars))) / len(lines) <= rules.min_line_punctuation_ratio:
        return "fineweb_line_punctuation"
    if sum(map(le, map(len, lines), repeat(rules.short_line_length))) / len(lines) >= rules.max_short_lines_ratio:
        return "fineweb_short_lines"
    characters = len(text) - text.count("\n")
    _, repeated = duplicates(list(filter(str.strip, lines)))
    if characters and repeated / characters >= rules.max_duplicate_line_chars:
        return "fineweb_duplicate_line_chars"
    return "fineweb_list_like" if list_like(text, len(lines) - 1, rules.max_newlines_per_word) else None


def list_like(text: str, newlines: int, limit: float) -> bool:
    """Whether ``text`` has no word, or more than ``limit`` newlines per word (punctuation marks count). Each
    piece between whitespace holds a word or more, so a few pieces (str.split stopped early, in C) show most
    pages to be under the limit without the words being found: fewer words would make the ratio no smaller."""
    pieces = len(text.split(None, 4 * newlines + 3))
    if not pieces:
        return True
    if newlines / pieces <= limit:
        return False
    words = words_of(text)
    return not words or newlines / len(words) > limit
