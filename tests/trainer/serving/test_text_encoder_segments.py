"""Texts over several segments (XLNetTextEncoder.encode_segments, kept_lengths): the cutting rule the
recurrence reads, fine-tuning and serving alike."""
from __future__ import annotations

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
from support.bundled_data import corpus_lines

from tfrecords.pair_lengths import trim_a_b
from trainer.serving.text_encoder import XLNetTextEncoder

SPECIAL = {"unk": 0, "cls": 3, "sep": 4, "pad": 5, "mask": 6}
SEP, CLS, PAD = SPECIAL["sep"], SPECIAL["cls"], SPECIAL["pad"]
LENGTH = 16
NAMES = ("input_ids", "segment_ids", "input_mask")


@pytest.fixture(scope="module")
def sp(vocab) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=vocab.model_proto)


@pytest.fixture(scope="module")
def encoder(vocab) -> XLNetTextEncoder:
    return XLNetTextEncoder(vocab.model_proto, SPECIAL, max_length=LENGTH, uncased=False)


def long_text(pieces: int, sp) -> str:
    """Words of the bundled corpus joined until the text has at least ``pieces`` pieces (a word
    has few pieces, so hardly more)."""
    words, text = iter(" ".join(corpus_lines(200)).split()), ""
    while len(sp.encode(text)) < pieces:
        text = (text + " " + next(words)).strip()
    return text


def segments_of(encoder, texts_a, texts_b=None, max_segments=3) -> dict[str, np.ndarray]:
    out = encoder.encode_segments(tf.constant(texts_a), None if texts_b is None else tf.constant(texts_b),
                                  max_segments=max_segments)
    return {name: out[name].numpy() for name in NAMES}


def test_one_segment_is_exactly_encode(encoder, sp):
    texts = ["", "Jazz.", corpus_lines(1)[0], long_text(40, sp)]
    for texts_b in (None, ["Yes.", long_text(30, sp), "", "No."]):
        one = segments_of(encoder, texts, texts_b, max_segments=1)
        today = encoder.encode(tf.constant(texts), None if texts_b is None else tf.constant(texts_b))
        for name in NAMES:
            assert one[name].shape == (4, 1, LENGTH)
            np.testing.assert_array_equal(one[name][:, 0], today[name].numpy())


def test_a_text_that_fits_one_segment_is_encode_in_the_last_segment_after_empty_ones(encoder):
    texts = ["", "A short review.", corpus_lines(1)[0][:40]]
    out = segments_of(encoder, texts, max_segments=3)
    today = encoder.encode(tf.constant(texts))
    for name in NAMES:
        np.testing.assert_array_equal(out[name][:, -1], today[name].numpy())
    assert (out["input_ids"][:, :2] == PAD).all()
    assert (out["input_mask"][:, :2] == 0).all() and (out["segment_ids"][:, :2] == 0).all()


def test_a_long_text_is_cut_into_consecutive_segments_in_reading_order(encoder, sp):
    text = long_text(LENGTH + 5, sp)
    pieces = sp.encode(text)
    assert LENGTH < len(pieces) <= 2 * LENGTH - 2
    out = segments_of(encoder, [text], max_segments=3)
    flat = out["input_ids"][0].reshape(-1)
    expected = [PAD] * (3 * LENGTH - len(pieces) - 2) + pieces + [SEP, CLS]
    assert flat.tolist() == expected
    assert out["input_ids"][0, -1, -2:].tolist() == [SEP, CLS]
    assert out["input_mask"][0].reshape(-1).tolist() == [0 if i == PAD else 1 for i in expected]
    assert out["segment_ids"][0].reshape(-1).tolist()[-1] == 2


def test_a_text_longer_than_max_segments_keeps_its_first_pieces(encoder, sp):
    text = long_text(3 * LENGTH + 10, sp)
    out = segments_of(encoder, [text], max_segments=3)
    assert out["input_ids"][0].reshape(-1).tolist() == sp.encode(text)[:3 * LENGTH - 2] + [SEP, CLS]
    assert (out["input_mask"] == 1).all()


def test_a_pair_keeps_its_second_text_in_the_last_segment(encoder, sp):
    a, b = long_text(3 * LENGTH, sp), "Is it long?"
    pa, pb = sp.encode(a), sp.encode(b)
    out = segments_of(encoder, [a], [b], max_segments=3)
    flat = out["input_ids"][0].reshape(-1).tolist()
    assert flat == pa[:3 * LENGTH - 3 - len(pb)] + [SEP] + pb + [SEP, CLS]
    last = out["segment_ids"][0, -1].tolist()
    assert last[-len(pb) - 2:] == [1] * (len(pb) + 1) + [2] and 1 not in out["segment_ids"][0, :-1]


def test_a_text_of_n_segments_in_a_longer_batch_is_its_n_segments_after_empty_ones(encoder, sp):
    texts = [long_text(LENGTH + 4, sp), "Short."]
    assert LENGTH < len(sp.encode(texts[0])) <= 2 * LENGTH - 2
    four, two = segments_of(encoder, texts, max_segments=4), segments_of(encoder, texts[:1], max_segments=2)
    for name in NAMES:
        np.testing.assert_array_equal(four[name][0, 2:], two[name][0])
        assert not four["input_mask"][0, :2].any()


def test_the_kept_lengths_of_one_segment_are_the_pair_rule_of_records():
    encoder_like = XLNetTextEncoder.__new__(XLNetTextEncoder)
    encoder_like.max_length = 10
    grid = [(a, b) for a in range(0, 25) for b in range(0, 25)]
    a, b = (tf.constant(column) for column in zip(*grid))
    kept_a, kept_b = encoder_like.kept_lengths(a, b, 1)
    assert list(zip(kept_a.numpy().tolist(), kept_b.numpy().tolist())) == [trim_a_b(x, y, 7) for x, y in grid]
    single, _ = encoder_like.kept_lengths(a, None, 1)
    assert single.numpy().tolist() == [min(x, 8) for x, _ in grid]


@pytest.mark.parametrize("segments", [2, 3])
def test_a_pair_over_segments_is_truncated_only_past_the_segments_or_past_one_segment_of_b(segments):
    encoder_like = XLNetTextEncoder.__new__(XLNetTextEncoder)
    encoder_like.max_length = 10
    grid = [(a, b) for a in range(0, 40) for b in range(0, 25)]
    a, b = (np.array(column) for column in zip(*grid))
    kept_a, kept_b = (t.numpy() for t in encoder_like.kept_lengths(tf.constant(a), tf.constant(b), segments))
    truncated = (kept_a < a) | (kept_b < b)
    np.testing.assert_array_equal(truncated, (a + b + 3 > 10 * segments) | (b > 7))
    assert (kept_b <= 7).all() and (kept_a + kept_b + 3 <= 10 * segments).all()
    assert ((kept_a == a) | (kept_a + kept_b + 3 == 10 * segments)).all()  # A cut only to fill every segment


def test_max_segments_below_one_is_refused(encoder):
    with pytest.raises(ValueError, match="max_segments must be at least 1, got 0"):
        encoder.encode_segments(tf.constant(["x"]), max_segments=0)
