"""Sequence heads over texts of several segments (XLNetForSequenceTask with a segment axis): the network
reads the segments through its memory and the head reads the last segment's <cls>."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from trainer.models.sequence_model import XLNetForSequenceTask
from trainer.serving.text_encoder import XLNetTextEncoder

from support.sequence_networks import small_sequence_network

LENGTH, SEGMENTS = 12, 3
TEXTS = ["In the beginning God created the heaven and the earth. And the earth was without form, and void; "
         "and darkness was upon the face of the deep.",
         "Paris is the capital and most populous city of France.",
         "Jazz."]


@pytest.fixture(scope="module")
def network(vocab):
    return small_sequence_network(vocab.vocab_size, mem_len=2 * LENGTH)


@pytest.fixture(scope="module")
def encoder(vocab):
    return XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), LENGTH, uncased=False)


def test_the_head_reads_the_cls_of_the_last_segment_read_through_the_memory(network, encoder):
    model = XLNetForSequenceTask(network, "classification", num_labels=2)
    inputs = encoder.encode_segments(tf.constant(TEXTS), max_segments=SEGMENTS)
    hidden, _ = network.encode_segments(inputs["input_ids"], inputs["segment_ids"], inputs["input_mask"])
    expected = model.logits_from_hidden(hidden[:, -1])
    np.testing.assert_allclose(model(inputs).numpy(), expected.numpy(), atol=1e-6)
    assert (inputs["input_ids"].numpy()[:, -1, -1] == encoder.special_ids["cls"]).all()


def test_a_text_of_one_segment_scores_as_a_batch_of_one_segment_texts(network, encoder):
    """Padding segments before a short text are invisible: its score is the one-segment score."""
    model = XLNetForSequenceTask(network, "regression")
    short = ["A fine film.", "Jazz."]
    assert encoder.encode(tf.constant(short))["input_mask"].numpy()[:, 0].sum() == 0  # each fits one segment
    segmented = model(encoder.encode_segments(tf.constant(short), max_segments=SEGMENTS))
    np.testing.assert_allclose(segmented.numpy(), model(encoder.encode(tf.constant(short))).numpy(), atol=1e-5)


def test_multiple_choice_reads_each_option_over_the_segments_of_its_context(network, encoder):
    model = XLNetForSequenceTask(network, "multiple-choice")
    options = ["Which? The earth", "Which? The deep"]
    rows = encoder.encode_segments(tf.constant(TEXTS[:1] * 2), tf.constant(options), max_segments=SEGMENTS)
    logits = model({name: value[None] for name, value in rows.items()})  # one question: [1, 2, S, L]
    assert logits.shape == (1, 2)
    np.testing.assert_allclose(logits.numpy()[0], model._logits(rows, training=False).numpy()[:, 0], atol=1e-6)
