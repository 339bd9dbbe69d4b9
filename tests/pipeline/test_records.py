"""Record building (pipeline/records.py) on real tokens of the bundled corpus."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from pipeline.records import RecordBuilder, split_a_b
from pipeline.streams import reverse_stream
from tfrecords.pair_lengths import trim_a_b
from tfrecords.record_config import ConfigError, RecordConfig
from tfrecords.schema import SEG_A, SEG_B, SEG_CLS
from tfrecords.span_masking import SpanMasker
from tfrecords.text_normalization import normalize_text

from support.bundled_data import read_corpus_documents

CONFIG = RecordConfig(seq_len=128, reuse_len=64, num_predict=21, perm_size=32)


@pytest.fixture(scope="module")
def stream(vocab, corpus_files):
    """~130k tokens of real text (Wikipedia summaries) as one stream: (ids, sentence starts)."""
    processor = vocab.processor()
    documents = read_corpus_documents(Path(corpus_files[-1]), 1000)
    lines = [normalize_text(line) for doc in documents for line in doc]
    pieces = [p for p in processor.encode(lines, out_type=int) if p]
    ids = np.array(list(itertools.chain.from_iterable(pieces)), dtype=np.int32)
    starts = np.cumsum([len(p) for p in pieces])[:-1]
    return ids, starts


@pytest.fixture(scope="module")
def builder(vocab):
    return RecordBuilder(CONFIG, vocab.word_start_table(), vocab.special_ids.sep, vocab.special_ids.cls)


@pytest.fixture(scope="module")
def records(builder, stream):
    ids, starts = stream
    batches = list(builder.build(ids, starts, 5, False, np.random.default_rng(0)))
    return {name: np.concatenate([getattr(b, name) for b in batches]) for name in
            ("input_ids", "segment_ids", "is_masked", "word_start", "label", "stream_id", "stream_pos")}


def a_lengths(records) -> np.ndarray:
    return (records["segment_ids"] == SEG_A).sum(axis=1) - CONFIG.reuse_len - 1


def test_every_record_is_context_a_sep_b_sep_cls_of_exactly_seq_len(records, vocab):
    ids, seg = records["input_ids"], records["segment_ids"]
    sep, cls = vocab.special_ids.sep, vocab.special_ids.cls
    assert ids.shape[1] == CONFIG.seq_len and len(ids) > 300
    assert (ids[:, -1] == cls).all() and (ids[:, -2] == sep).all()
    first_sep = CONFIG.reuse_len + a_lengths(records)
    assert (ids[np.arange(len(ids)), first_sep] == sep).all()
    assert ((ids == sep).sum(axis=1) == 2).all() and ((ids == cls).sum(axis=1) == 1).all()
    assert (a_lengths(records) >= 1).all() and ((seg == SEG_B).sum(axis=1) >= 2).all()


def test_segment_ids_are_zero_for_context_a_and_first_sep_one_for_b_and_second_sep_two_for_cls(records):
    seg = records["segment_ids"]
    for row, a_len in zip(seg, a_lengths(records)):
        first_sep = CONFIG.reuse_len + a_len
        assert (row[:first_sep + 1] == SEG_A).all()
        assert (row[first_sep + 1:-1] == SEG_B).all()
        assert row[-1] == SEG_CLS


def test_consecutive_records_advance_by_reuse_len(records, stream):
    ids = stream[0]
    for pos in range(len(records["input_ids"])):
        start = pos * CONFIG.reuse_len
        np.testing.assert_array_equal(records["input_ids"][pos, :CONFIG.reuse_len], ids[start:start + CONFIG.reuse_len])
        a_len = a_lengths(records)[pos]
        np.testing.assert_array_equal(records["input_ids"][pos, CONFIG.reuse_len:CONFIG.reuse_len + a_len],
                                      ids[start + CONFIG.reuse_len:start + CONFIG.reuse_len + a_len])
    np.testing.assert_array_equal(records["stream_pos"], np.arange(len(records["stream_pos"])))
    assert (records["stream_id"] == 5).all()


def test_labels_mix_true_continuations_and_random_b(records):
    assert 0.35 < records["label"].mean() < 0.65


def test_true_continuation_b_starts_at_a_sentence_start_after_a(stream):
    ids, starts = stream
    rng = np.random.default_rng(3)
    seen = 0
    for begin in range(64, 60000, 64):
        a_len, b_begin, b_len, label = split_a_b(len(ids), starts, begin, CONFIG.ab_len, rng)
        assert a_len + b_len == CONFIG.ab_len
        assert b_begin == 0 or b_begin in set(starts.tolist())
        if label == 1:
            seen += 1
            assert b_begin >= begin + a_len
    assert seen > 50


def test_trim_matches_one_token_at_a_time_from_the_longer_side():
    def reference(a, b, total):
        while a + b > total:
            if a > b:
                a -= 1
            else:
                b -= 1
        return a, b

    for a, b, total in itertools.product(range(0, 40), range(0, 40), (1, 7, 30)):
        assert trim_a_b(a, b, total) == reference(a, b, total)


def test_every_record_has_exactly_num_predict_targets_split_43_42_style(records):
    masked = records["is_masked"]
    assert (masked.sum(axis=1) == CONFIG.num_predict).all()
    assert (masked[:, :CONFIG.reuse_len].sum(axis=1) == 11).all()  # ceil(21 / 2) in the context
    assert (masked[:, CONFIG.reuse_len:].sum(axis=1) == 10).all()
    assert RecordConfig().context_budget == 43 and RecordConfig().ab_budget == 42


def test_sep_and_cls_are_never_masked(records, vocab):
    special = np.isin(records["input_ids"], [vocab.special_ids.sep, vocab.special_ids.cls])
    assert not (records["is_masked"].astype(bool) & special).any()


def test_word_start_flags_come_from_the_pieces(records, vocab):
    processor = vocab.processor()
    for token, flag in zip(records["input_ids"][0], records["word_start"][0]):
        piece = processor.id_to_piece(int(token))
        assert flag == (piece.startswith(("\u2581", "<")) or not piece[0].isalnum()), piece


def span_runs(spans: np.ndarray):
    padded = np.concatenate([[0], spans, [0]])
    edges = np.diff(padded)
    return zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1))


@pytest.fixture(scope="module")
def segments(stream, vocab):
    ids = stream[0][:400 * 256].reshape(400, 256)
    return vocab.word_start_table()[ids], np.ones(ids.shape, dtype=bool)


def test_whole_word_spans_cover_one_to_five_words_with_probability_about_one_over_n(segments):
    word_start, maskable = segments
    spans = SpanMasker(RecordConfig()).spans(word_start, maskable, 43, np.random.default_rng(0))
    words = []
    for row in range(len(spans)):
        for beg, end in span_runs(spans[row]):
            assert word_start[row, beg] and (end == 256 or word_start[row, end]), "spans are whole words"
            words.append(int(word_start[row, beg:end].sum()))
    frequency = np.bincount(words, minlength=6)[1:] / len(words)
    expected = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()  # 0.438 0.219 0.146 0.109 0.088
    assert max(words) <= 5
    np.testing.assert_allclose(frequency, expected, atol=0.04)


def test_subword_flag_reproduces_spans_of_n_pieces(segments):
    word_start, maskable = segments
    spans = SpanMasker(RecordConfig(subword_spans=True)).spans(word_start, maskable, 43, np.random.default_rng(0))
    lengths = [end - beg for row in spans for beg, end in span_runs(row)]
    ends_mid_word = sum(1 for r in range(len(spans)) for _, end in span_runs(spans[r])
                        if end < 256 and not word_start[r, end])
    frequency = np.bincount(lengths, minlength=6)[1:] / len(lengths)
    expected = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()
    assert max(lengths) <= 5 and ends_mid_word > 100
    np.testing.assert_allclose(frequency, expected, atol=0.04)


def test_spans_never_cover_blocked_positions_and_top_up_reaches_the_goal(segments):
    word_start, maskable = segments
    maskable = maskable.copy()
    maskable[:, ::7] = False
    masker = SpanMasker(RecordConfig())
    mask = masker.sample_batch(word_start, maskable, 60, np.random.default_rng(1))
    assert not (mask & ~maskable).any()
    assert (mask.sum(axis=1) == 60).all()


def test_reversed_stream_records_read_the_text_backwards(builder, stream):
    ids, starts = stream
    reversed_ids, reversed_starts = reverse_stream(ids, starts)
    batch = next(builder.build(reversed_ids, reversed_starts, 21, True, np.random.default_rng(0)))
    np.testing.assert_array_equal(batch.input_ids[0, :CONFIG.reuse_len], ids[::-1][:CONFIG.reuse_len])
    assert (batch.is_masked.sum(axis=1) == CONFIG.num_predict).all()
    assert set(reversed_starts.tolist()) == {len(ids) - s for s in starts.tolist()}


def test_same_generator_seed_gives_identical_records(builder, stream):
    ids, starts = stream
    first = next(builder.build(ids, starts, 0, False, np.random.default_rng(9)))
    second = next(builder.build(ids, starts, 0, False, np.random.default_rng(9)))
    for name in ("input_ids", "segment_ids", "is_masked", "label"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


@pytest.mark.parametrize("changes, flag", [
    (dict(seq_len=128, reuse_len=64, perm_size=48), "--perm-size"),
    (dict(seq_len=128, reuse_len=96, perm_size=64), "--perm-size"),
    (dict(seq_len=64, reuse_len=32, num_predict=70), "--num-predict"),
    (dict(seq_len=36, reuse_len=32), "--seq-len"),
    (dict(seq_len=128, reuse_len=128), "--reuse-len"),
    (dict(mask_alpha=1, mask_beta=2), "--mask-alpha"),
])
def test_impossible_configs_are_refused_naming_the_flag(changes, flag):
    with pytest.raises(ConfigError, match=flag):
        RecordConfig(**changes).validate()


def test_reference_xlnet_large_config_is_valid():
    RecordConfig(seq_len=512, reuse_len=256, num_predict=85, perm_size=256).validate()
