"""Gopher's n-gram repetition rules stated plainly, as the rules define them (every share computed from word
tuples sliced out of the list), for the tests of pipeline/quality_filters.py's faster forms to compare with."""
from __future__ import annotations

from collections import Counter

from pipeline.quality_filters import GopherRepetition


def reference_top_share(words: list[str], n: int) -> float:
    """The characters of the most frequent n-gram (of those, the greatest), times its count, over all words'."""
    grams = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    total = sum(len(word) for word in words)
    if not grams or not total:
        return 0.0
    gram, count = max(grams.items(), key=lambda item: (item[1], item[0]))
    return sum(len(word) for word in gram) * count / total


def reference_duplicate_share(words: list[str], n: int) -> float:
    """The characters of the words inside any n-gram occurring more than once, each word once, over all words'."""
    starts = range(len(words) - n + 1)
    grams = Counter(tuple(words[i:i + n]) for i in starts)
    covered = [False] * len(words)
    for i in starts:
        if grams[tuple(words[i:i + n])] > 1:
            covered[i:i + n] = [True] * n
    total = sum(len(word) for word in words)
    return sum(len(word) for word, inside in zip(words, covered) if inside) / total if total else 0.0


def reference_ngram_reason(words: list[str], rules: GopherRepetition = GopherRepetition()) -> str | None:
    """What the n-gram rules decide of a page's (lower-cased) words, every share computed, in the rules' order."""
    for n, limit in rules.top_ngram_chars:
        if reference_top_share(words, n) > limit:
            return f"gopher_top_{n}_gram"
    for n, limit in rules.duplicate_ngram_chars:
        if reference_duplicate_share(words, n) > limit:
            return f"gopher_duplicate_{n}_grams"
    return None
