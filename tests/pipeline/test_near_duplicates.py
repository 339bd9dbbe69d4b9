"""pipeline/near_duplicates.py: exact keys, MinHash signatures and LSH bands, clusters and the copy kept, on planted
duplicates of real text: near duplicates at Jaccard >= 0.85 caught, pairs below 0.5 never taken for duplicates,
the kept copy decided by a seeded hash."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from pipeline import beam_pipeline, near_duplicates
from pipeline.near_duplicates import (
    WORD,
    Clusters,
    MinHashSettings,
    band_keys,
    band_pairs,
    dedup_text,
    estimated_jaccard,
    exact_key,
    kept_and_removed,
    minhash_words,
    pairs_in_band,
    shingle_hashes,
    signature,
    signatures_of,
    true_jaccard,
)
from support.bundled_data import WIKI_SUMMARIES, read_corpus_documents
from tfrecords.record_config import ConfigError

SETTINGS = MinHashSettings()


@pytest.fixture(scope="module")
def documents() -> list[str]:
    """Bundled Wikipedia summaries of at least 120 words."""
    texts = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 1200)]
    return [text for text in texts if len(text.split()) >= 120][:120]


def edited(text: str, fraction: float, rng: np.random.Generator) -> str:
    """``text`` with about ``fraction`` of its words replaced by made-up ones."""
    words = text.split()
    for index in rng.choice(len(words), int(round(fraction * len(words))), replace=False):
        words[index] = f"zq{rng.integers(10 ** 9)}"
    return " ".join(words)


def candidates(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(set(band_keys(a, SETTINGS)) & set(band_keys(b, SETTINGS)))


def duplicates(a: str, b: str) -> bool:
    """What the stage decides of a pair: a shared band, then the estimate at least min_jaccard."""
    x, y = signature(a, SETTINGS), signature(b, SETTINGS)
    return candidates(x, y) and estimated_jaccard(x, y) >= SETTINGS.min_jaccard


def test_dedup_text_folds_case_width_punctuation_and_spaces():
    assert dedup_text("  The  ＣＡＴ,  sat!\n\nOn the mat...  ") == "the cat sat on the mat"


def test_exact_keys_are_equal_for_texts_equal_once_simplified_and_differ_by_seed():
    assert exact_key("The cat sat.") == exact_key("the CAT   sat") != exact_key("the dog sat")
    assert exact_key("The cat sat.", seed=1) != exact_key("The cat sat.")


def test_every_ascii_character_splits_words_as_the_word_pattern_does():
    texts = [f"Ab{chr(code)}Cd" for code in range(128)]
    assert [minhash_words(text) for text in texts] == [WORD.findall(text.lower()) for text in texts]


@pytest.mark.parametrize("text", ["The Cat_sat, on-the MAT... 3.14!", "tab\tand\x1cfile\x1fseparators", "",
                                  "a'b \"c\" [d] {e} (f) <g> |h| ~i` @j #k $l %m ^n &o *p +q =r /s \\t ?u :v ;w"])
def test_ascii_words_are_the_word_character_runs_of_the_lower_cased_text(text):
    assert text.isascii() and minhash_words(text) == WORD.findall(text.lower()) == dedup_text(text).split()


@pytest.mark.parametrize("text", ["The cat sat.", "", " \t ", "Ünïcödé　ＦＵＬＬ width — dash", "a\x1cb\u2028c", "x__y 3.14 ﬁn"])
def test_an_exact_key_is_the_seeded_blake2b_of_the_simplified_text(text):
    expected = hashlib.blake2b(dedup_text(text).encode("utf-8"), digest_size=16, key=(5).to_bytes(8, "little"))
    assert exact_key(text, seed=5) == expected.digest()


def test_a_signature_is_a_function_of_the_text_and_the_seed(documents):
    first = signature(documents[0], SETTINGS)
    assert first.dtype == np.uint64 and first.shape == (112,)
    assert np.array_equal(first, signature(documents[0], MinHashSettings()))
    assert not np.array_equal(first, signature(documents[0], MinHashSettings(seed=1)))


def test_shingles_are_five_word_runs_in_order():
    assert shingle_hashes("a b c d e f", SETTINGS).size == 2
    assert shingle_hashes("a b c d e f", SETTINGS).tolist() != shingle_hashes("f e d c b a", SETTINGS).tolist()
    assert shingle_hashes("a b", SETTINGS).size == 1 and shingle_hashes("", SETTINGS).size == 0


def test_the_estimate_is_within_a_few_points_of_the_true_jaccard(documents):
    rng = np.random.default_rng(0)
    errors = []
    for text in documents[:40]:
        other = edited(text, 0.05, rng)
        errors.append(estimated_jaccard(signature(text, SETTINGS), signature(other, SETTINGS))
                      - true_jaccard(text, other, SETTINGS))
    assert abs(np.mean(errors)) < 0.03 and np.max(np.abs(errors)) < 0.15


def test_near_duplicates_at_jaccard_0_85_or_more_are_caught_95_percent_of_the_time(documents):
    rng = np.random.default_rng(1)
    pairs = [(text, edited(text, 0.01, rng)) for text in documents]
    similar = [(a, b) for a, b in pairs if true_jaccard(a, b, SETTINGS) >= 0.85]
    assert len(similar) >= 100
    assert sum(duplicates(a, b) for a, b in similar) / len(similar) >= 0.95


def test_pairs_below_jaccard_0_5_are_never_taken_for_duplicates(documents):
    rng = np.random.default_rng(2)
    pairs = [(text, edited(text, 0.25, rng)) for text in documents] + list(zip(documents, documents[1:]))
    dissimilar = [(a, b) for a, b in pairs if true_jaccard(a, b, SETTINGS) < 0.5]
    assert len(dissimilar) >= 200
    assert not any(duplicates(a, b) for a, b in dissimilar)


def test_bands_of_different_index_never_collide():
    values = np.zeros(112, np.uint64)  # every band equal in value
    keys = band_keys(values, SETTINGS)
    assert len(set(keys)) == 14 and all(len(key) == 2 + 8 * 8 for key in keys)


def test_clusters_are_the_connected_components_of_the_pairs():
    clusters = Clusters()
    for a, b in [("d", "e"), ("a", "b"), ("b", "c"), ("x", "y"), ("c", "a")]:
        clusters.add_pair(a, b)
    assert sorted(clusters.groups().values()) == [["a", "b", "c"], ["d", "e"], ["x", "y"]]


def test_a_band_group_of_n_gives_n_minus_1_pairs_each_with_its_least_ranked_member(documents):
    values = signature(documents[0], SETTINGS)
    members = [(f"doc-{i}", values) for i in range(200)]
    pairs = pairs_in_band(members, SETTINGS.min_jaccard)
    assert len(pairs) == 199 and len({first for first, _ in pairs}) == 1
    assert pairs == pairs_in_band(list(reversed(members)), SETTINGS.min_jaccard)


def test_a_band_groups_candidate_pairs_need_only_its_members_keys_whatever_their_order():
    # The pipeline groups document keys per band and brings the signatures to these pairs only afterwards.
    members = [f"doc-{i}" for i in range(50)]
    pairs = band_pairs(members)
    assert len(pairs) == 49 and len({first for first, _ in pairs}) == 1
    assert pairs == band_pairs(list(reversed(members))) == band_pairs(members + members[:5])
    assert band_pairs(["alone"]) == band_pairs([]) == []
    assert band_pairs(members, seed=1) != pairs


def test_a_band_group_pairs_only_members_whose_signatures_agree_enough(documents):
    a, b = signature(documents[0], SETTINGS), signature(documents[1], SETTINGS)
    assert pairs_in_band([("x", a), ("y", b)], SETTINGS.min_jaccard) == []


def test_the_kept_copy_is_chosen_by_a_seeded_hash_not_by_order():
    group = ["doc-1", "doc-2", "doc-3", "doc-4"]
    removed = kept_and_removed([group])
    assert removed == kept_and_removed([list(reversed(group))])
    (kept,) = set(removed.values())
    assert set(removed) == set(group) - {kept}
    assert {next(iter(kept_and_removed([group], seed=s).values())) for s in range(20)} != {kept}


@pytest.mark.parametrize("field, value", [("bands", 0), ("rows", 0), ("shingle_words", 0), ("min_jaccard", 1.5)])
def test_impossible_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=f"--minhash {field} must be"):
        MinHashSettings(**{field: value})


def test_a_long_document_is_signed_in_bounded_chunks():
    rng = np.random.default_rng(3)
    text = " ".join(f"w{value}" for value in rng.integers(0, 50_000, 20_000))
    whole = signature(text, SETTINGS)
    assert whole.shape == (112,) and np.all(whole < np.uint64(2 ** 64 - 1))


def varied_texts(documents: list[str]) -> list[str]:
    """Real documents among edge cases: no word, one, fewer than a shingle, exactly one shingle, Unicode, and two
    documents longer than a chunk of shingles."""
    rng = np.random.default_rng(4)
    long = " ".join(f"w{value}" for value in rng.integers(0, 50_000, near_duplicates.SHINGLES_PER_CHUNK + 700))
    edge = ["", "one", "?!...", "two words", "a b c d", "a b c d e", "  \n\t ", "Ｆｕｌｌ ＣＡＴ Straße ΣΊΣΥΦΟΣ ﬁne ½",
            "東京タワー は 日本 の 電波塔 です 😀 emoji", long, "la " * 40, long[:30_000]]
    return [text for pair in zip(documents[:len(edge)], edge) for text in pair] + documents[len(edge):40]


@pytest.mark.parametrize("chunk", [7, 64, near_duplicates.SHINGLES_PER_CHUNK])
@pytest.mark.parametrize("settings", [SETTINGS, MinHashSettings(shingle_words=3, bands=4, rows=3, seed=5)],
                         ids=["defaults", "3-word-4x3-seed5"])
def test_a_batch_of_signatures_is_each_documents_signature(documents, settings, chunk, monkeypatch):
    """Whatever the batches and wherever a chunk of shingles ends (within a document or between two)."""
    texts = varied_texts(documents)
    expected = np.stack([signature(text, settings) for text in texts])
    monkeypatch.setattr(near_duplicates, "SHINGLES_PER_CHUNK", chunk)
    words = [minhash_words(text) for text in texts]
    for batch in (1, 5, len(texts)):
        values = np.concatenate([signatures_of(words[start:start + batch], settings)
                                 for start in range(0, len(texts), batch)])
        assert values.dtype == np.uint64 and np.array_equal(values, expected)
    assert signatures_of([], settings).shape == (0, settings.hashes)
    assert signatures_of([[], []], settings).tolist() == [[2 ** 64 - 1] * settings.hashes] * 2


def test_a_readers_candidates_pack_the_signatures_of_one_document_at_a_time_whatever_the_batches(documents,
                                                                                                 monkeypatch):
    """The reader's buffer signs its documents in batches (of SIGNATURE_BATCH documents or SIGNATURE_BATCH_WORDS
    words, and before a pack or a document added with its signature): the same bytes as signing them one by one."""
    texts = varied_texts(documents)

    def pack(signed_in_batches: bool) -> tuple:
        buffer = beam_pipeline.CandidateBuffer(SETTINGS)
        packs = []
        for index, text in enumerate(texts):
            place = (index, "train", index % 3, len(text), f"f:{index}", exact_key(text))
            if signed_in_batches and index % 11 != 10:  # now and then a document added with its signature
                buffer.add_words(*place, minhash_words(text), f"id{index}")
            else:
                buffer.add(*place, signature(text, SETTINGS).tobytes(), f"id{index}")
            if index % 13 == 12:
                packs.append(buffer.pack("f", identified=True))
        return tuple(packs + [buffer.pack("f", identified=True)])

    expected = pack(False)
    for batch, words in [(3, 1 << 16), (256, 300), (256, 1 << 16)]:
        monkeypatch.setattr(beam_pipeline, "SIGNATURE_BATCH", batch)
        monkeypatch.setattr(beam_pipeline, "SIGNATURE_BATCH_WORDS", words)
        assert pack(True) == expected
