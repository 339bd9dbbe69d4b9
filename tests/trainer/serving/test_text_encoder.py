"""In-graph text encoding (trainer/serving/text_encoder.py): the layout XLNet expects, built from raw text."""
from __future__ import annotations

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from tfrecords.pair_lengths import pair_lengths, trim_a_b
from tfrecords.text_normalization import normalize_text as normalize_for_records
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import corpus_lines

# XLNet's ids, which the vocabulary fixture must reproduce (checked in `encoder`).
SPECIAL = {"unk": 0, "cls": 3, "sep": 4, "pad": 5, "mask": 6}
SEP, CLS, PAD, MASK = SPECIAL["sep"], SPECIAL["cls"], SPECIAL["pad"], SPECIAL["mask"]
MAX_LENGTH = 24


@pytest.fixture(scope="module")
def sp_proto(vocab) -> bytes:
    return vocab.model_proto


@pytest.fixture(scope="module")
def sp(sp_proto) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=sp_proto)


@pytest.fixture(scope="module")
def encoder(sp_proto, vocab) -> XLNetTextEncoder:
    assert vocab.special_ids.to_dict().items() >= SPECIAL.items()
    return XLNetTextEncoder(sp_proto, SPECIAL, max_length=MAX_LENGTH, uncased=False)


def left_padded(ids: list[int], length: int = MAX_LENGTH, pad: int = PAD) -> list[int]:
    return [pad] * (length - len(ids)) + ids


def encode_one(encoder: XLNetTextEncoder, text_a: str, text_b: str | None = None) -> dict[str, list[int]]:
    out = encoder.encode(tf.constant([text_a]), None if text_b is None else tf.constant([text_b]))
    return {name: value.numpy()[0].tolist() for name, value in out.items()}


def test_in_graph_tokenizer_gives_the_ids_preprocessing_gives(encoder, vocab):
    """Serving tokenises raw text exactly as the Beam pipeline does (normalize_text, then SentencePiece)."""
    lines = corpus_lines(300) + ["Caf\u00e9  ``d\u00e9j\u00e0 vu''\tand\u00a0more", ""]
    expected = vocab.processor().encode([normalize_for_records(line) for line in lines], out_type=int)
    assert encoder.tokenize(tf.constant(lines)).to_list() == expected


def test_single_text_is_text_sep_cls_left_padded(encoder, sp):
    text = "Neoclassicism and expressionism came mostly after 1900."
    pieces = sp.encode(text)
    out = encode_one(encoder, text)
    assert out["input_ids"] == left_padded(pieces + [SEP, CLS])
    assert out["segment_ids"] == left_padded([0] * (len(pieces) + 1) + [2], pad=0)
    assert out["input_mask"] == left_padded([1] * (len(pieces) + 2), pad=0)


def test_pair_is_a_sep_b_sep_cls_with_segments_0_1_2(encoder, sp):
    a, b = "Jazz became important.", "The term was first applied in 1946."
    pa, pb = sp.encode(a), sp.encode(b)
    out = encode_one(encoder, a, b)
    assert out["input_ids"] == left_padded(pa + [SEP] + pb + [SEP, CLS])
    assert out["segment_ids"] == left_padded([0] * (len(pa) + 1) + [1] * (len(pb) + 1) + [2], pad=0)
    assert out["input_mask"] == left_padded([1] * (len(pa) + len(pb) + 3), pad=0)


def test_cls_is_always_the_last_position(encoder):
    out = encoder.encode(tf.constant(corpus_lines(20)))
    assert (out["input_ids"].numpy()[:, -1] == CLS).all()
    assert (out["input_mask"].numpy()[:, -1] == 1).all()


def test_long_text_keeps_its_first_pieces(encoder, sp):
    text = corpus_lines(400)[-1] + " " + corpus_lines(3)[2]
    pieces = sp.encode(text)
    assert len(pieces) > MAX_LENGTH
    out = encode_one(encoder, text)
    assert out["input_ids"] == pieces[:MAX_LENGTH - 2] + [SEP, CLS]
    assert out["input_mask"] == [1] * MAX_LENGTH


def test_pair_truncation_keeps_the_lengths_preprocessing_keeps():
    """Same rule as the records (XLNet's _truncate_seq_pair: trim the longer, B on ties)."""
    grid = [(a, b, budget) for a in range(0, 15) for b in range(0, 15) for budget in range(0, 12)]
    a, b, budget = (np.array(column) for column in zip(*grid))
    got_a, got_b = pair_lengths(tf.constant(a), tf.constant(b), tf.constant(budget))
    expected = [trim_a_b(*row) for row in grid]
    assert list(zip(got_a.numpy().tolist(), got_b.numpy().tolist())) == expected


def test_long_pair_keeps_the_first_pieces_of_both_texts(encoder, sp):
    a, b = corpus_lines(3)[2], corpus_lines(5)[4]
    pa, pb = sp.encode(a), sp.encode(b)
    keep_a, keep_b = trim_a_b(len(pa), len(pb), MAX_LENGTH - 3)
    out = encode_one(encoder, a, b)
    assert out["input_ids"] == pa[:keep_a] + [SEP] + pb[:keep_b] + [SEP, CLS]


def test_empty_string_encodes_as_sep_cls(encoder):
    out = encode_one(encoder, "")
    assert out["input_ids"] == left_padded([SEP, CLS])
    assert out["input_mask"] == left_padded([1, 1], pad=0)


def test_batch_of_mixed_lengths_equals_texts_encoded_one_by_one(encoder):
    texts = ["", "Jazz.", corpus_lines(1)[0], corpus_lines(3)[2]]
    batch = encoder.encode(tf.constant(texts))
    for row, text in enumerate(texts):
        single = encoder.encode(tf.constant([text]))
        for name in ("input_ids", "segment_ids", "input_mask"):
            assert batch[name].numpy()[row].tolist() == single[name].numpy()[0].tolist()


def test_mask_literal_becomes_one_mask_id_between_the_encoded_parts(encoder, sp):
    out = encoder.encode_masked(tf.constant(["Paris is the <mask> of France and <mask> is its river."]))
    expected = sp.encode("Paris is the") + [MASK] + sp.encode("of France and") + [MASK] + sp.encode("is its river.")
    assert out["input_ids"].numpy()[0].tolist() == left_padded(expected + [SEP, CLS])
    assert out["is_masked"].numpy()[0].tolist() == left_padded([int(i == MASK) for i in expected] + [0, 0], pad=0)
    assert out["num_masks"].numpy().tolist() == [2]


def test_punctuation_glued_to_a_mask_gets_no_word_boundary_piece(encoder, sp):
    out = encoder.encode_masked(tf.constant(["The film stars Keir <mask>."]))
    expected = sp.encode("The film stars Keir") + [MASK] + [sp.piece_to_id(".")]
    assert out["input_ids"].numpy()[0].tolist() == left_padded(expected + [SEP, CLS])


def test_text_without_mask_reports_zero_masks(encoder):
    out = encoder.encode_masked(tf.constant(["No masks in this sentence.", ""]))
    assert out["num_masks"].numpy().tolist() == [0, 0]
    assert out["is_masked"].numpy().sum() == 0


def test_masks_beyond_max_length_are_truncated_and_not_counted(encoder):
    long_prefix = corpus_lines(3)[2]
    out = encoder.encode_masked(tf.constant([f"The <mask> said {long_prefix} <mask>"]))
    assert out["num_masks"].numpy().tolist() == [1]
    assert out["input_ids"].numpy()[0, -2:].tolist() == [SEP, CLS]


def test_invalid_utf8_is_replaced_not_an_error(encoder):
    out = encoder.encode(tf.constant([b"caf\xc3 au lait"]))
    assert out["input_mask"].numpy().sum() > 2


def test_encoder_refuses_special_ids_without_mask(sp_proto):
    with pytest.raises(ValueError, match="mask"):
        XLNetTextEncoder(sp_proto, {"sep": 4, "cls": 3, "pad": 5}, max_length=16, uncased=False)


def test_encoder_refuses_max_length_below_three(sp_proto):
    with pytest.raises(ValueError, match="max_length"):
        XLNetTextEncoder(sp_proto, SPECIAL, max_length=2, uncased=False)


@pytest.mark.parametrize("texts", [["", "   "], ["<mask>", "<mask><mask>"], []], ids=["empty", "only-masks", "none"])
def test_masked_encoding_of_texts_without_a_piece_outside_their_masks(encoder, texts):
    out = encoder.encode_masked(tf.constant(texts, tf.string))
    assert out["input_ids"].shape == (len(texts), MAX_LENGTH)
    assert out["num_masks"].numpy().tolist() == [text.count("<mask>") for text in texts]
    for row, text in zip(out["input_ids"].numpy(), texts):
        assert row[-2:].tolist() == [SEP, CLS] and (row == MASK).sum() == text.count("<mask>")
