"""pipeline/near_duplicates.py's shingles and signatures pinned to their definition (issue 46): the module computes
them for speed (a word cache across documents, one table of mixing terms per document, repeated shingles kept);
here they are computed word by word, shingle by shingle, as the module docstring defines them, and must give the
same uint64 values, on real documents and on edge cases. The pipeline's outputs and audit files depend on them."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pipeline import near_duplicates
from pipeline.near_duplicates import (MinHashSettings, dedup_text, minhash_words, shingle_hashes, signature,
                                      signatures_of)
from support.bundled_data import CORPUS_DIR, WIKI_SUMMARIES, read_corpus_documents

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SETTINGS = (MinHashSettings(), MinHashSettings(shingle_words=3, bands=4, rows=3, seed=5))
EDGE_CASES = [
    "",                                               # no word
    "  \n\t ",                                        # spaces only
    "?!... -- ,;",                                    # punctuation only: no word once simplified
    "one",                                            # fewer words than a shingle: one shingle of them all
    "two words",
    "a b c d",
    "a b c d e",                                      # exactly one shingle
    "la " * 40,                                       # one word repeated: every shingle the same
    "the cat sat on the mat and the cat sat on the mat again",  # repeated shingles
    "Ｆｕｌｌ ｗｉｄｔｈ ＣＡＴ, Straße STRASSE ΣΊΣΥΦΟΣ café ﬁne ½ x²",  # NFKC and case folding
    "東京タワー は 日本 の 電波塔 です 😀 🙂 emoji",       # non-Latin words, symbols that are no word
    "non\u00a0breaking\u2003em space\x1cfile separator\u3000ideographic",  # Unicode spaces
    "don't snake_case e-mail 3.14 1,000 C++ a_b_c",   # apostrophes, underscores, numbers
]


def reference_words(text: str) -> list[str]:
    return dedup_text(text).split()


def reference_shingles(text: str, settings: MinHashSettings) -> set[int]:
    """Each word's keyed BLAKE2b (8 bytes, little-endian); each run of shingle_words words (all of them when
    fewer) mixed from 0 by mixed = mixed * GOLDEN + rotl(word hash, 7 * position mod 64), modulo 2^64."""
    key = settings.seed.to_bytes(8, "little", signed=True)
    hashes = [int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8, key=key).digest(), "little")
              for word in reference_words(text)]
    n = min(settings.shingle_words, len(hashes))
    shingles = set()
    for start in range(len(hashes) - n + 1) if hashes else ():
        mixed = 0
        for position in range(n):
            value, shift = hashes[start + position], position * 7 % 64
            mixed = (mixed * GOLDEN + (((value << shift) | (value >> (64 - shift))) & MASK)) & MASK
        shingles.add(mixed)
    return shingles


def reference_signature(text: str, settings: MinHashSettings) -> list[int]:
    """For each of bands x rows functions (a * x + b) mod 2^64, a odd, both drawn from the seed: the least over
    the shingles; 2^64 - 1 for a document without shingles."""
    rng = np.random.default_rng([settings.seed, 0x4D696E48])
    multipliers = [2 * int(value) + 1 for value in rng.integers(0, 2 ** 63, settings.hashes, dtype=np.uint64)]
    increments = [int(value) for value in rng.integers(0, 2 ** 63, settings.hashes, dtype=np.uint64)]
    shingles = reference_shingles(text, settings)
    return [min(((a * x + b) & MASK for x in shingles), default=MASK) for a, b in zip(multipliers, increments)]


def assert_as_defined(text: str, settings: MinHashSettings) -> None:
    values = signature(text, settings)
    assert values.dtype == np.uint64 and values.shape == (settings.hashes,)
    assert values.tolist() == reference_signature(text, settings), text[:80]
    shingles = shingle_hashes(text, settings)
    assert shingles.dtype == np.uint64 and shingles.tolist() == sorted(reference_shingles(text, settings))


@pytest.fixture(scope="module")
def real_documents() -> list[str]:
    """300 bundled Wikipedia summaries (short ones included) and 20 of the Bible's chapters, lines kept."""
    summaries = read_corpus_documents(WIKI_SUMMARIES, 300)
    chapters = read_corpus_documents(CORPUS_DIR / "kjv_bible.txt.gz", 20)
    return ["\n".join(lines) for lines in summaries + chapters]


@pytest.mark.parametrize("settings", SETTINGS, ids=["defaults", "3-word-4x3-seed5"])
def test_signatures_and_shingles_are_as_defined_on_real_documents(real_documents, settings):
    for text in real_documents:
        assert_as_defined(text, settings)


@pytest.mark.parametrize("text", EDGE_CASES)
@pytest.mark.parametrize("settings", SETTINGS, ids=["defaults", "3-word-4x3-seed5"])
def test_signatures_and_shingles_are_as_defined_on_edge_cases(text, settings):
    assert_as_defined(text, settings)


@pytest.mark.parametrize("settings", SETTINGS, ids=["defaults", "3-word-4x3-seed5"])
def test_signatures_of_a_batch_are_as_defined(real_documents, settings):
    """signatures_of, as the pipeline's readers sign documents: real ones and the edge cases in one batch."""
    texts = [text for pair in zip(real_documents, EDGE_CASES) for text in pair] + real_documents[len(EDGE_CASES):60]
    values = signatures_of([minhash_words(text) for text in texts], settings)
    assert values.dtype == np.uint64 and values.shape == (len(texts), settings.hashes)
    assert values.tolist() == [reference_signature(text, settings) for text in texts]


def test_the_words_are_dedup_texts_words(real_documents):
    for text in real_documents + EDGE_CASES:
        assert near_duplicates.minhash_words(text) == reference_words(text)


def test_a_document_longer_than_a_chunk_is_as_defined():
    rng = np.random.default_rng(7)
    text = " ".join(f"w{value}" for value in rng.integers(0, 3000, 2 * near_duplicates.SHINGLES_PER_CHUNK + 50))
    assert_as_defined(text, SETTINGS[0])
    values = signatures_of([["a", "b"], minhash_words(text), ["c"] * 9], SETTINGS[0])  # its chunks not aligned
    assert values.tolist() == [reference_signature(t, SETTINGS[0]) for t in ("a b", text, "c " * 9)]


def test_the_word_cache_changes_no_value_when_it_fills_or_the_seed_changes(real_documents, monkeypatch):
    """A tiny cache, replaced every few documents under one seed, then seeds alternating: the same values as
    the definition."""
    monkeypatch.setattr(near_duplicates, "WORD_CACHE_WORDS", 50)
    near_duplicates.signature("a cache of another seed", MinHashSettings(seed=99))  # the cache starts empty
    assert near_duplicates.word_cache_size() == 5
    sizes = []
    for index, text in enumerate(real_documents[:40]):
        assert_as_defined(text, SETTINGS[0] if index < 20 else SETTINGS[index % 2])
        sizes.append(near_duplicates.word_cache_size())
        assert sizes[-1] <= 50 + len(set(reference_words(text)))
    assert any(later < earlier for earlier, later in zip(sizes[:20], sizes[1:20]))  # replaced when full
