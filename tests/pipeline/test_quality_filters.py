"""pipeline/quality_filters.py: each rule of Gopher, C4 and FineWeb removes a document just past its threshold
and keeps one just within it, with the anchors' default thresholds; real prose passes all of them."""
from __future__ import annotations

import dataclasses
import random

import pytest

from pipeline.quality_filters import (
    C4Rules,
    FineWebRules,
    GopherQuality,
    GopherRepetition,
    PUNCTUATION,
    WordNGrams,
    c4_clean,
    duplicate_ngram_share,
    fineweb_quality,
    gopher_quality,
    gopher_repetition,
    top_ngram_share,
    words_of,
)
from support.bundled_data import WIKI_SUMMARIES, read_corpus_documents
from support.ngram_reference import reference_duplicate_share, reference_ngram_reason, reference_top_share

PROSE = ("The river rises in the hills to the north of the town and flows south through a wide valley. "
         "Farmers have grown wheat and barley on its banks since the Middle Ages, and the old mill that "
         "stands beside the bridge still grinds flour for the bakery on the market square. In spring the "
         "water is high with melted snow, and the meadows flood for a few weeks each year. Visitors come to "
         "walk along the towpath, to watch the herons, and to eat in the inns that line the quay.")


def words(count: int, word: str = "river") -> str:
    return " ".join([word] * count)


def test_words_are_word_runs_and_single_punctuation_marks():
    assert words_of("Don't stop... now!") == ["Don", "'", "t", "stop", ".", ".", ".", "now", "!"]


def test_real_prose_passes_every_rule():
    assert gopher_quality(PROSE) is None and gopher_repetition(PROSE) is None and fineweb_quality(PROSE) is None
    assert c4_clean(PROSE) == (None, PROSE)


def test_bundled_wikipedia_summaries_mostly_pass_gopher_quality():
    documents = ["\n".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 200)]
    long_enough = [d for d in documents if len(words_of(d)) >= 80]
    kept = [d for d in long_enough if gopher_quality(d) is None]
    assert len(long_enough) >= 50 and len(kept) / len(long_enough) >= 0.9


# ------------------------------------------------------------------------------------------- Gopher quality
@pytest.mark.parametrize("count, reason", [(49, "gopher_short_doc"), (50, None)])
def test_gopher_needs_fifty_words(count, reason):
    assert gopher_quality(words(count - 2) + " the and") == reason


def test_gopher_refuses_more_than_a_hundred_thousand_words():
    assert gopher_quality(words(100_001)) == "gopher_long_doc"


@pytest.mark.parametrize("word, reason", [("ab", "gopher_below_mean_word_length"), ("abc", None),
                                          ("abcdefghij", None), ("abcdefghijk", "gopher_above_mean_word_length")])
def test_gopher_mean_word_length_is_three_to_ten(word, reason):
    # 98 words of the given length and "the" twice: a mean of (98 x length + 6) / 100
    text = words(98, word) + " the the"
    mean = (98 * len(word) + 6) / 100
    assert gopher_quality(text, GopherQuality(min_stop_words=2)) == reason, mean


@pytest.mark.parametrize("hashes, reason", [(10, None), (11, "gopher_too_many_hashes")])
def test_gopher_allows_one_hash_per_ten_words(hashes, reason):
    assert gopher_quality(words(98) + " the and " + "#" * hashes) == reason


@pytest.mark.parametrize("lines, reason", [(3, None), (4, "gopher_too_many_end_ellipsis")])
def test_gopher_allows_thirty_percent_of_lines_ending_in_an_ellipsis(lines, reason):
    body = [words(10) + " the and." for _ in range(10 - lines)] + [words(10) + " the and\u2026" for _ in range(lines)]
    assert gopher_quality("\n".join(body), GopherQuality(max_symbol_word_ratio=1.0)) == reason


@pytest.mark.parametrize("bullets, reason", [(9, None), (10, "gopher_too_many_bullets")])
def test_gopher_allows_ninety_percent_of_lines_starting_with_a_bullet(bullets, reason):
    body = ["\u2022 " + words(10) + " the and" for _ in range(bullets)] + [words(10) for _ in range(10 - bullets)]
    assert gopher_quality("\n".join(body)) == reason


@pytest.mark.parametrize("numbers, reason", [(20, None), (21, "gopher_below_alphabetic_ratio")])
def test_gopher_needs_eighty_percent_of_words_with_a_letter(numbers, reason):
    assert gopher_quality(words(100 - numbers - 2) + " the and " + words(numbers, "1234")) == reason


@pytest.mark.parametrize("text_end, reason", [(" The and", None), (" the", "gopher_too_few_stop_words")])
def test_gopher_needs_two_stop_words_whatever_their_case(text_end, reason):
    assert gopher_quality(words(60) + text_end) == reason


# ---------------------------------------------------------------------------------------- Gopher repetition
def test_the_top_two_gram_share_is_its_characters_times_its_count_over_all_words():
    # "a b" 3 times in 7 words of one letter: (1 + 1) * 3 / 7
    assert top_ngram_share(["a", "b", "a", "b", "a", "b", "c"], 2) == pytest.approx(6 / 7)


def test_the_duplicate_ngram_share_counts_each_covered_word_once():
    # the 2-gram "x y" occurs twice; the 4 words it covers hold 4 of the 6 words' 6 characters
    assert duplicate_ngram_share(["x", "y", "x", "y", "p", "q"], 2) == pytest.approx(4 / 6)


def lowered_words(text: str) -> list[str]:
    """A page's words as the n-gram rules count them: no punctuation marks, lower case."""
    return [word.lower() for word in words_of(text) if word not in PUNCTUATION]


def pages_with_repeats(count: int) -> list[str]:
    """Pages of words drawn from small vocabularies, some with a phrase repeated: every n-gram rule's share from
    none to all, ties for the top n-gram among words of different lengths."""
    rng = random.Random(46)
    pages = []
    for _ in range(count):
        vocabulary = [rng.choice(["a", "an", "the", "river", "Rivers", "x", "über", "zq"]) + str(rng.randrange(9))
                      for _ in range(rng.randrange(2, 60))]
        words = [rng.choice(vocabulary) for _ in range(rng.randrange(0, 120))]
        if words and rng.random() < 0.5:
            start = rng.randrange(len(words))
            phrase = words[start:start + rng.randrange(5, 12)]
            words[rng.randrange(len(words)):0] = phrase
        pages.append(" ".join(words))
    return pages


def test_the_ngram_rules_give_the_exact_shares_and_reasons_of_word_tuples():
    """The integer n-grams (and the duplicate shares skipped when a shorter n bounds them) decide exactly as
    tuples of words, each share computed, on real summaries and on pages full of repeats; also with limits
    that do not fall as n grows."""
    texts = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 100)] + pages_with_repeats(300)
    other = GopherRepetition(top_ngram_chars=((1, 0.6), (3, 0.3)),
                             duplicate_ngram_chars=((5, 0.3), (6, 0.2), (7, 0.25), (8, 0.05), (10, 0.01)))
    reasons = {}
    for rules in (GopherRepetition(), other):
        ngram_rules_only = dataclasses.replace(rules, max_duplicate_paragraphs=1.0, max_duplicate_paragraph_chars=1.0,
                                               max_duplicate_lines=1.0, max_duplicate_line_chars=1.0)
        decided = [gopher_repetition(text, ngram_rules_only) for text in texts if text.strip()]
        assert decided == [reference_ngram_reason(lowered_words(text), ngram_rules_only) for text in texts
                           if text.strip()]
        reasons[rules] = set(decided)
    assert {None, "gopher_top_2_gram", "gopher_duplicate_5_grams", "gopher_duplicate_7_grams"} <= reasons[
        GopherRepetition()]  # a duplicate rule met after shares skipped
    assert {"gopher_duplicate_6_grams", "gopher_duplicate_8_grams"} <= reasons[other]
    for text in texts[:150]:
        words = lowered_words(text)
        ngrams = WordNGrams(words)
        for n in range(1, 12):
            assert ngrams.top_share(n) == reference_top_share(words, n)
            assert ngrams.duplicate_share(n) == reference_duplicate_share(words, n)


@pytest.mark.parametrize("copies, reason", [(3, None), (4, "gopher_duplicate_lines")])
def test_gopher_allows_thirty_percent_of_lines_repeating_an_earlier_one(copies, reason):
    distinct = [f"line {i} about something else entirely" for i in range(10 - copies)]
    lines = distinct + ["line 0 about something else entirely"] * copies
    rules = GopherRepetition(max_duplicate_line_chars=1.0, max_duplicate_paragraph_chars=1.0, top_ngram_chars=(),
                             duplicate_ngram_chars=())
    assert gopher_repetition("\n".join(lines), rules) == reason


def test_the_blank_lines_between_paragraphs_are_not_duplicate_lines():
    """Five distinct paragraphs: four blank separator lines, which counted would be 3 repeats of 9 lines."""
    rules = GopherRepetition(top_ngram_chars=(), duplicate_ngram_chars=())
    paragraphs = [f"Paragraph {i} says something of its own, at some length." for i in range(5)]
    assert gopher_repetition("\n\n".join(paragraphs), rules) is None


def test_gopher_removes_a_page_whose_paragraphs_repeat():
    paragraph = "Buy cheap watches online today."
    assert gopher_repetition("\n\n".join([paragraph] * 4 + ["Something else."])) == "gopher_duplicate_paragraphs"


def test_gopher_removes_a_page_whose_one_phrase_dominates():
    text = " ".join(["cheap watches"] * 30 + [f"word{i}" for i in range(40)])
    assert gopher_repetition(text) == "gopher_top_2_gram"


def test_prose_repeating_a_long_phrase_fails_the_duplicate_ngram_rule():
    phrase = "the quick brown fox jumps over the lazy dog near the river bank"
    text = PROSE + " " + phrase + " and then " + phrase + "."
    assert gopher_repetition(text) == "gopher_duplicate_5_grams"


# ------------------------------------------------------------------------------------------------------- C4
def test_c4_keeps_only_lines_that_end_a_sentence_with_five_words_or_more():
    text = "\n".join(["Home | About | Contact", "This line has five words.", "Too short.",
                      "Another line that ends well.", "A third good line is here!", "No terminal mark here at all"])
    assert c4_clean(text) == (None, "This line has five words.\nAnother line that ends well.\n"
                                    "A third good line is here!")


def test_c4_needs_three_sentences():
    assert c4_clean("One good line of text here.\nTwo good lines of text here.") == ("c4_too_few_sentences", "")


@pytest.mark.parametrize("line, reason", [("Lorem ipsum dolor sit amet consectetur.", "c4_lorem_ipsum"),
                                          ("function that returns { a value here.", "c4_curly_bracket")])
def test_c4_removes_a_page_with_lorem_ipsum_or_a_curly_bracket(line, reason):
    assert c4_clean(PROSE + "\n" + line)[0] == reason


def test_c4_drops_lines_naming_javascript_or_a_cookie_policy_and_wikipedia_citations():
    text = "\n".join([PROSE, "Please enable JavaScript to view this page.", "This site uses cookies for analytics.",
                      "The town was founded in 1203.[1] It grew quickly.[citation needed]"])
    reason, kept = c4_clean(text)
    assert reason is None and kept == PROSE + "\nThe town was founded in 1203. It grew quickly."


def test_c4_rules_are_settable():
    assert c4_clean("Short one.\nShort two.\nShort three.", C4Rules(min_words_per_line=2))[0] is None


# -------------------------------------------------------------------------------------------------- FineWeb
def test_fineweb_removes_pages_whose_lines_rarely_end_in_punctuation():
    # one line of nine ends in punctuation: 0.111, at most 0.12
    menu = [f"Products and services of department {i} in the store" for i in range(8)] + [words(8) + "."]
    assert fineweb_quality("\n".join(menu)) == "fineweb_line_punctuation"


def test_fineweb_removes_pages_of_short_lines():
    # three lines of four have at most 30 characters: 0.75, at least 0.67
    assert fineweb_quality("\n".join(["Yes.", "No.", "Maybe.", words(10) + "."])) == "fineweb_short_lines"


def test_fineweb_removes_pages_repeating_a_line():
    line = "This exact sentence appears twice on the page and nowhere else."
    assert fineweb_quality("\n".join([PROSE, line, line])) == "fineweb_duplicate_line_chars"


def test_fineweb_removes_list_like_pages():
    lines = [f"Item number {i} in a long list of items." for i in range(20)]
    assert fineweb_quality("\n".join(lines), FineWebRules(max_newlines_per_word=0.05)) == "fineweb_list_like"
