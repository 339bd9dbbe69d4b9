"""The dedup stages' packed shuffles (pipeline/beam_pipeline.py, pipeline/near_duplicates.py): documents and their
bands travel as flat arrays per bucket, and whatever the number of buckets the stages find exactly the copies and
candidate pairs that grouping document by document and band by band finds."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from pipeline.beam_pipeline import (BUCKET_INPUT_BYTES, BandPairs, CandidateBuffer, Candidates, ExactDuplicates,
                                    RemovedDuplicates, band_buckets, dedup_buckets, document_buckets, exact_buckets)
from pipeline.near_duplicates import (MinHashSettings, band_keys, band_pairs, band_rows, equal_row_groups, exact_key,
                                      keep_rank, signature)
from support.bundled_data import WIKI_SUMMARIES, read_corpus_documents

SETTINGS = MinHashSettings()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """60 summaries, then for 20 of them a copy with one word changed and for 10 an exact copy (other case)."""
    summaries = [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 400)
                 if len(" ".join(lines).split()) >= 60][:60]
    near = [" ".join("zq" if k == 3 else word for k, word in enumerate(text.split())) for text in summaries[:20]]
    return summaries + near + [text.upper() for text in summaries[20:30]]


def packs_of(texts: list[str], files: int = 3) -> list[Candidates]:
    """The texts as one Candidates pack per file (document i in file i mod files), as readers send them."""
    buffers = [CandidateBuffer() for _ in range(files)]
    for i, text in enumerate(texts):
        buffers[i % files].add(i // files, ("train", "valid")[i % 2], i % 5, len(text), f"f{i % files}:{i // files}",
                               exact_key(text), signature(text, SETTINGS).tobytes(), f"id{i}")
    return [buffer.pack(f"f{k}", identified=True) for k, buffer in enumerate(buffers)]


def test_a_pack_keeps_every_documents_key_place_and_signature_through_buckets_and_joins(texts):
    packs = packs_of(texts)
    joined = Candidates.joined(packs)
    assert joined.count == len(texts) and joined.files == ("f0", "f1", "f2")
    assert sorted(joined.keys()) == sorted(f"f{i % 3}:{i // 3}" for i in range(len(texts)))
    for buckets in (1, 4):
        parts = [part for pack in packs for _, part in document_buckets(pack, buckets)]
        again = Candidates.joined(parts)
        assert sorted(again.keys()) == sorted(joined.keys())
        row = again.keys().index("f1:4")  # text 13
        one = again.candidate(row, "f1:4", signed=True)
        assert (one.split, one.shard, one.bytes, one.id) == ("valid", 3, len(texts[13]), "id13")
        assert np.array_equal(np.frombuffer(one.signature, np.uint64), signature(texts[13], SETTINGS))


def test_equal_rows_are_grouped_and_rows_that_only_share_a_hash_are_not():
    rows = np.array([[7, 1, 2], [7, 1, 3], [5, 0, 0], [7, 1, 2], [9, 9, 9], [5, 0, 0], [7, 1, 2]], np.uint64)
    assert [group.tolist() for group in equal_row_groups(rows)] == [[2, 5], [0, 3, 6]]
    assert equal_row_groups(rows[:1]) == [] and equal_row_groups(rows[[0, 1, 4]]) == []


def test_band_rows_are_equal_exactly_when_band_keys_are(texts):
    signatures = np.stack([signature(text, SETTINGS) for text in texts])
    by_key = defaultdict(list)
    for document, values in enumerate(signatures):
        for key in band_keys(values, SETTINGS):
            by_key[key].append(document)
    expected = sorted(members for members in by_key.values() if len(members) > 1)
    rows = band_rows(signatures, SETTINGS)
    found = sorted((group // SETTINGS.bands).tolist() for group in equal_row_groups(rows))
    assert found == expected and len(expected) >= 20 * 10  # each near copy shares most of its 14 bands


@pytest.mark.parametrize("buckets", [1, 3, 64])
def test_the_band_buckets_give_the_candidate_pairs_of_grouping_band_by_band(texts, buckets):
    by_key = defaultdict(set)
    for i, text in enumerate(texts):
        for key in band_keys(signature(text, SETTINGS), SETTINGS):
            by_key[key].add(f"f{i % 3}:{i // 3}")
    expected = {pair for members in by_key.values() for pair in band_pairs(members)}
    grouped = defaultdict(list)
    for pack in packs_of(texts):
        for bucket, rows in band_buckets(pack, SETTINGS, buckets):
            grouped[bucket].append(rows)
    assert len(grouped) == buckets  # 90 x 14 bands spread over every bucket
    stage = BandPairs(SETTINGS.seed, buckets, 2 + SETTINGS.rows)
    ends = [end for bucket in grouped.items() for _, pack in stage.process(bucket) for end in pack]
    assert {(a, b) for _, a, b in ends} == expected and len(expected) >= 20
    # both ends of each pair, once per bucket that found it (other buckets find it by other bands)
    assert set(ends) == {(end, a, b) for a, b in expected for end in (a, b)}
    assert buckets > 1 or len(ends) == len(set(ends))


@pytest.mark.parametrize("buckets", [1, 5])
def test_exact_copies_are_found_in_their_bucket_and_the_least_ranked_copy_is_kept(texts, buckets):
    grouped = defaultdict(list)
    for pack in packs_of(texts):
        for bucket, part in exact_buckets(pack, buckets):
            grouped[bucket].append(part)
    stage = ExactDuplicates(seed=0, near=True)
    out = [value for bucket in grouped.items() for value in stage.process(bucket)]
    removed = [item for value in out if isinstance(value[-1], RemovedDuplicates) for item in value[1].removed]
    kept = Candidates.joined(value for value in out if isinstance(value, Candidates))
    assert len(removed) == 10 and kept.count == len(texts) - 10
    for duplicate in removed:
        assert keep_rank(duplicate.kept) < keep_rank(duplicate.key) and duplicate.stage == "exact"
        assert duplicate.kept in kept.keys() and duplicate.key not in kept.keys()


def test_a_reader_sends_its_candidates_in_packs_of_at_most_candidates_per_pack(tmp_path, texts, spm_model,
                                                                              monkeypatch):
    import pipeline.beam_pipeline as beam_pipeline
    from pipeline.corpus import expand_inputs
    from pipeline.preprocess_config import PreprocessConfig
    from support.bundled_data import TINY_DATA

    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    config = PreprocessConfig(inputs=(str(path),), output="unused", vocab=spm_model, dedup=("exact", "near"),
                              **TINY_DATA)
    (input_file,) = expand_inputs(config.inputs)
    monkeypatch.setattr(beam_pipeline, "CANDIDATES_PER_PACK", 7)
    packs = [element for element in beam_pipeline.ReadDocuments(config).process(beam_pipeline.ReadTask(input_file))
             if isinstance(element, Candidates)]
    assert [pack.count for pack in packs] == [7] * (len(texts) // 7) + [len(texts) % 7]
    joined = Candidates.joined(packs)
    assert joined.keys() == [f"{input_file.key}:{i}" for i in range(len(texts))]
    assert joined.exact_keys == b"".join(exact_key(text) for text in texts)


def test_the_buckets_are_one_per_bucket_input_bytes_of_input():
    assert dedup_buckets(0) == dedup_buckets(BUCKET_INPUT_BYTES) == 1
    assert dedup_buckets(BUCKET_INPUT_BYTES + 1) == 2 and dedup_buckets(100 * BUCKET_INPUT_BYTES) == 100
