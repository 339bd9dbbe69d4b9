"""pipeline/quality_filters.py decides as each rule is defined: every rule of Gopher, C4 and FineWeb re-stated
here the plain way (the words by the regex, every share counted from word tuples, every line looked at, no
bound, no cache), and the filters' answers compared with it on thousands of varied pages: bundled summaries
and Bible chapters, their lines recombined, degraded as crawled pages are, and edge cases (empty, only
punctuation, bullets, ellipses, non-ASCII, control characters, underscores, very long repeated lines)."""
from __future__ import annotations

import gzip
import random
import re
from typing import Optional

import pytest

from pipeline import quality_filters as filters
from pipeline.quality_filters import C4Rules, FineWebRules, GopherQuality, GopherRepetition
from support.bundled_data import CORPUS_DIR, WIKI_SUMMARIES, read_corpus_documents
from support.ngram_reference import reference_duplicate_share, reference_ngram_reason, reference_top_share

PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


# ------------------------------------------------------------------------------------------ the rules, plainly
def reference_tokens(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text)


def reference_words(text: str) -> list[str]:
    return [token for token in reference_tokens(text) if token not in PUNCTUATION]


def reference_gopher_quality(text: str, rules: GopherQuality = GopherQuality()) -> Optional[str]:
    words = reference_words(text)
    if len(words) < rules.min_words:
        return "gopher_short_doc"
    if len(words) > rules.max_words:
        return "gopher_long_doc"
    mean_length = sum(len(word) for word in words) / len(words)
    if mean_length < rules.min_mean_word_length:
        return "gopher_below_mean_word_length"
    if mean_length > rules.max_mean_word_length:
        return "gopher_above_mean_word_length"
    if text.count("#") / len(words) > rules.max_symbol_word_ratio:
        return "gopher_too_many_hashes"
    if (text.count("...") + text.count("\u2026")) / len(words) > rules.max_symbol_word_ratio:
        return "gopher_too_many_ellipsis"
    lines = text.splitlines() or [""]
    if len([line for line in lines if line.lstrip().startswith("\u2022")]) / len(lines) > rules.max_bullet_lines_ratio:
        return "gopher_too_many_bullets"
    ending = [line for line in lines if line.rstrip().endswith("...") or line.rstrip().endswith("\u2026")]
    if len(ending) / len(lines) > rules.max_ellipsis_lines_ratio:
        return "gopher_too_many_end_ellipsis"
    alphabetic = [word for word in words if any(character.isalpha() for character in word)]
    if len(alphabetic) / len(words) < rules.min_alphabetic_words_ratio:
        return "gopher_below_alphabetic_ratio"
    if len([word for word in words if word.lower() in rules.stop_words]) < rules.min_stop_words:
        return "gopher_too_few_stop_words"
    return None


def reference_duplicates(parts: list[str]) -> tuple[int, int]:
    seen: set[str] = set()
    count = chars = 0
    for part in parts:
        if part in seen:
            count, chars = count + 1, chars + len(part)
        seen.add(part)
    return count, chars


def reference_gopher_repetition(text: str, rules: GopherRepetition = GopherRepetition()) -> Optional[str]:
    if not text.strip():
        return "gopher_empty"
    paragraphs = re.split(r"\n{2,}", text.strip())
    count, chars = reference_duplicates(paragraphs)
    if count / len(paragraphs) > rules.max_duplicate_paragraphs:
        return "gopher_duplicate_paragraphs"
    if chars / len(text) > rules.max_duplicate_paragraph_chars:
        return "gopher_duplicate_paragraph_chars"
    lines = [line for line in text.splitlines() if line.strip()]
    count, chars = reference_duplicates(lines)
    if count / len(lines) > rules.max_duplicate_lines:
        return "gopher_duplicate_lines"
    if chars / len(text) > rules.max_duplicate_line_chars:
        return "gopher_duplicate_line_chars"
    return reference_ngram_reason([word.lower() for word in reference_words(text)], rules)


def reference_c4_clean(text: str, rules: C4Rules = C4Rules()) -> tuple[Optional[str], str]:
    kept, sentences = [], 0
    for line in text.splitlines():
        line = re.sub(r"\[\d*\]|\[edit\]|\[citation needed\]", "", line.strip())
        words = line.split()
        if any(len(word) > rules.max_word_length for word in words):
            continue
        if not line.endswith(rules.end_marks) or line.endswith("..."):
            continue
        if len(words) < rules.min_words_per_line:
            continue
        if "lorem ipsum" in line.lower():
            return "c4_lorem_ipsum", ""
        if "javascript" in line.lower():
            continue
        if "{" in line:
            return "c4_curly_bracket", ""
        if any(phrase in line.lower() for phrase in rules.policy_phrases):
            continue
        sentences += max(1, len(re.findall(r"[.!?]+(?=\s|$)", line)))
        kept.append(line)
    if sentences < rules.min_sentences:
        return "c4_too_few_sentences", ""
    return None, "\n".join(kept)


def reference_fineweb_quality(text: str, rules: FineWebRules = FineWebRules()) -> Optional[str]:
    lines = text.split("\n")
    ending = [line for line in lines if line.endswith(rules.stop_chars)]
    if len(ending) / len(lines) <= rules.min_line_punctuation_ratio:
        return "fineweb_line_punctuation"
    short = [line for line in lines if len(line) <= rules.short_line_length]
    if len(short) / len(lines) >= rules.max_short_lines_ratio:
        return "fineweb_short_lines"
    characters = len(text.replace("\n", ""))
    _, repeated = reference_duplicates([line for line in lines if line.strip()])
    if characters and repeated / characters >= rules.max_duplicate_line_chars:
        return "fineweb_duplicate_line_chars"
    tokens = reference_tokens(text)
    if not tokens or text.count("\n") / len(tokens) > rules.max_newlines_per_word:
        return "fineweb_list_like"
    return None


# ----------------------------------------------------------------------------------------------- the pages
ODD_PIECES = ["", " ", "\n", "\n\n", "\r\n", "\t", "\u00a0", "\u2028", "\x1c", "\x00", "\x7f", "_", "__", "a_b", " _ ",
              "...", "\u2026", "\u2022", "\u2022 ", "- ", "#", "##", "#tag", "!!!", "?!", ".", '"', "'", "{", "}",
              "[1]", "[edit]", "[citation needed]", "[]", "lorem ipsum", "Lorem Ipsum", "javascript", "JavaScript",
              "privacy policy", "uses cookies", "The", "THE", "And", "of", "to", "be", "with", "have", "that",
              "ΣΑΣ", "ΟΔΟΣ'Α", "İstanbul", "straße", "Straße", "ǅ", "ﬁ", "日本語", "一二三", "²", "½", "Ⅻ", "①", "٣",
              "café", "naïve", "e\u0301", "\U0001F600", "—", "–", "€", "«", "»", "“", "”", "1999", "3.14", "x" * 1001,
              "abcdefghijklmnop", "a", "I", "é", "Ω", "ß"]


def bundled_pages() -> list[str]:
    summaries = ["\n".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 600)]
    with gzip.open(CORPUS_DIR / "kjv_bible.txt.gz", "rt", encoding="utf-8") as handle:
        chapters = [chapter.strip("\n") for chapter in handle.read().split("\n\n") if chapter.strip()][:150]
    return summaries + chapters


def degraded(lines: list[str], kind: int, rng: random.Random) -> str:
    """What a crawl's pages add to running text (as benchmarks/cleaning.py degrades its filter corpus)."""
    if kind == 0:
        lines = lines + lines[:max(1, len(lines) // 2)]
    elif kind == 1:
        lines = [f"\u2022 {line}" for line in lines]
    elif kind == 2:
        lines = [" ".join(line.split()[:max(1, len(line.split()) // 2)]) + rng.choice(["...", "\u2026"])
                 for line in lines]
    elif kind == 3:
        lines = [item for line in lines for item in (rng.choice(["Home", "About us", "Contact", "Read more"]), line)]
    elif kind == 4:
        lines = lines + [" ".join(f"#{word.strip('.,;:()').lower()}" for word in " ".join(lines).split()[:30])]
    elif kind == 5:
        lines = lines + ['var settings = {"theme": "dark", "items": 12};']
    elif kind == 6:
        lines = lines + ["Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."]
    elif kind == 7:
        lines = ["This website uses cookies to give you the best experience."] + lines
    elif kind == 8:
        lines = [line.rstrip(".!?\"'") for line in lines]
    elif kind == 9:
        return "\n\n".join(lines + lines[:1])
    elif kind == 10:
        lines = lines + [" ".join(str(rng.randrange(10 ** 4)) for _ in range(6)) for _ in range(8)]
    elif kind == 11:
        lines = lines[:1]
    elif kind == 12:
        lines = [line * rng.randrange(2, 40) for line in lines[:2]] * rng.randrange(1, 6)
    elif kind == 13:
        words = " ".join(lines).split()
        phrase = words[:rng.randrange(2, 12)]
        lines = [" ".join(words + phrase * rng.randrange(1, 8))]
    return "\n".join(lines)


def odd_page(rng: random.Random, words: list[str]) -> str:
    """Words of prose and odd pieces, joined by spaces, newlines or nothing."""
    pieces = [rng.choice(ODD_PIECES) if rng.random() < 0.3 else rng.choice(words) for _ in range(rng.randrange(0, 160))]
    return "".join(piece + rng.choice([" ", " ", " ", "\n", "", ". ", "\n\n", ", "]) for piece in pieces)


def pages() -> list[str]:
    rng = random.Random(46)
    bundled = bundled_pages()
    words = " ".join(bundled[:200]).split()
    lines = [line for page in bundled for line in page.split("\n") if line.strip()]
    recombined = ["\n".join(rng.choice(lines) for _ in range(rng.randrange(1, 12))) for _ in range(600)]
    degraded_pages = [degraded(page.split("\n"), i % 14, rng) for i, page in enumerate(bundled)]
    odd = [odd_page(rng, words) for _ in range(1500)]
    edges = ["", " ", "\n", "\n\n\n", ".", "...", "\u2026", "!?.,;:", "_", "_ _ _", "\u2022", "\u2022\n\u2022",
             "# # #", "\x00\x01\x02", "\x1c\x1d", "\u2028\u2029", "ΣΑΣ ΣΑΣ ΣΑΣ", "İİİ", "² ½ Ⅻ ①",
             "the " * 60, "the and " * 30, ("the same line again and again.\n" * 300), "x" * 5000,
             ("word " * 2000).strip(), " ".join(f"w{i}" for i in range(100_001)),
             "\n".join(f"Averyveryverylongwordwithoutanyspaces{i}." for i in range(10))]
    return bundled + recombined + degraded_pages + odd + edges


PAGES = pages()
# Rules off their defaults: limits that make the exact n-gram counts run on most pages (not the bounds), some
# not falling as n grows, zero and negative n-gram limits (the n-gram tables are not range-checked), n of 1,
# and the numeric thresholds at the ends of their ranges (0, and 1 for a share).
OTHER_REPETITION = (GopherRepetition(top_ngram_chars=((1, 0.05), (2, 0.04), (3, 0.02), (5, 0.0)),
                                     duplicate_ngram_chars=((3, 0.02), (2, 0.3), (6, 0.0), (7, 0.25))),
                    GopherRepetition(max_duplicate_paragraphs=1.0, max_duplicate_paragraph_chars=1.0,
                                     max_duplicate_lines=1.0, max_duplicate_line_chars=1.0,
                                     top_ngram_chars=((4, -0.1), (2, 0.2)), duplicate_ngram_chars=((5, -1.0),)))
OTHER_QUALITY = (GopherQuality(min_words=1, max_words=200, min_mean_word_length=0.0, max_mean_word_length=100.0,
                               max_symbol_word_ratio=10.0, max_bullet_lines_ratio=0.2, max_ellipsis_lines_ratio=0.05,
                               min_alphabetic_words_ratio=0.97, min_stop_words=5, stop_words=("the", "The", "ΣΑΣ")),)
OTHER_C4 = (C4Rules(min_words_per_line=0, min_sentences=1, max_word_length=8), C4Rules(max_word_length=0))
OTHER_FINEWEB = (FineWebRules(max_newlines_per_word=0.05, min_line_punctuation_ratio=0.0, max_short_lines_ratio=1.0,
                              max_duplicate_line_chars=1.0),
                 FineWebRules(max_newlines_per_word=0.0, min_line_punctuation_ratio=0.0, max_short_lines_ratio=1.0,
                              short_line_length=3, max_duplicate_line_chars=1.0))


def test_the_pages_are_many_and_varied():
    assert len(PAGES) >= 3000
    assert sum(not page.isascii() for page in PAGES) >= 500 and sum(page.isascii() for page in PAGES) >= 1000


@pytest.mark.parametrize("rules", (GopherRepetition(),) + OTHER_REPETITION)
def test_gopher_repetition_decides_as_its_rules_are_defined(rules):
    decided = [filters.gopher_repetition(page, rules) for page in PAGES]
    assert decided == [reference_gopher_repetition(page, rules) for page in PAGES]
    assert len(set(decided)) >= (10 if rules == GopherRepetition() else 2)


@pytest.mark.parametrize("rules", (GopherQuality(),) + OTHER_QUALITY)
def test_gopher_quality_decides_as_its_rules_are_defined(rules):
    decided = [filters.gopher_quality(page, rules) for page in PAGES]
    assert decided == [reference_gopher_quality(page, rules) for page in PAGES]
    assert len(set(decided)) >= (8 if rules == GopherQuality() else 2)


def test_gopher_as_the_cleaning_stage_calls_it_one_tokenisation_for_both_rule_sets():
    """Repetition, then quality on the same text object (the second reads the first's words), and on a copy
    of it, and quality first: always the reference's reason (every third page: the rules' own tests see all)."""
    for page in PAGES[::3]:
        expected = reference_gopher_repetition(page) or reference_gopher_quality(page)
        assert (filters.gopher_repetition(page) or filters.gopher_quality(page)) == expected
        copy = "".join(list(page))
        assert (filters.gopher_repetition(page) or filters.gopher_quality(copy)) == expected
        assert filters.gopher_quality(page) == reference_gopher_quality(page)


@pytest.mark.parametrize("rules", (C4Rules(),) + OTHER_C4)
def test_c4_cleans_as_its_rules_are_defined(rules):
    decided = [filters.c4_clean(page, rules) for page in PAGES]
    assert decided == [reference_c4_clean(page, rules) for page in PAGES]
    assert len({reason for reason, _ in decided}) >= (4 if rules == C4Rules() else 1)


@pytest.mark.parametrize("rules", (FineWebRules(),) + OTHER_FINEWEB)
def test_fineweb_decides_as_its_rules_are_defined(rules):
    decided = [filters.fineweb_quality(page, rules) for page in PAGES]
    assert decided == [reference_fineweb_quality(page, rules) for page in PAGES]
    assert len(set(decided)) >= (5 if rules == FineWebRules() else 2)


def test_the_gopher_words_are_the_regex_words_less_punctuation_and_their_lower_case():
    """Every ASCII character alone and between letters, and the pages: the translated split (ASCII) and the
    regex without punctuation (the rest) give the regex's words less punctuation marks."""
    singles = [chr(code) for code in range(128)]
    texts = singles + [f"a{c}b {c}{c} x{c}" for c in singles] + PAGES
    for text in texts:
        words, lowered = filters.gopher_words(text)
        expected = reference_words(text)
        assert lowered == [word.lower() for word in expected]
        assert words == (lowered if text.isascii() else expected)


def test_the_ngram_shares_are_exact_on_the_pages():
    for page in PAGES[::7]:
        words = [word.lower() for word in reference_words(page)]
        ngrams = filters.WordNGrams(words)
        for n in range(1, 8):
            assert ngrams.top_share(n) == reference_top_share(words, n)
            assert ngrams.duplicate_share(n) == reference_duplicate_share(words, n)
            for limit in (0.0, 0.05, 0.16, 0.5):
                assert ngrams.top_share_over(n, limit) == (reference_top_share(words, n) > limit)

