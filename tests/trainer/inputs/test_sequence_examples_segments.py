"""Fine-tuning inputs over several segments (trainer/inputs/sequence_examples.py with max_segments): the
serving encoder's layout and its truncation rule."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from support.bundled_data import ROTTEN

from trainer.inputs import sequence_examples
from trainer.inputs.sequence_examples import ChoiceExample, TextExample
from trainer.serving.text_encoder import XLNetTextEncoder

LENGTH = 16


@pytest.fixture(scope="module")
def encoder(vocab):
    return XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), LENGTH, uncased=False)


@pytest.fixture(scope="module")
def examples():
    return sequence_examples.read_text_examples(str(ROTTEN / "dev.tsv"))[:20]


def test_text_batches_are_the_encoders_segments(encoder, examples):
    texts = [example.text for example in examples]
    columns, encode = sequence_examples.example_columns(examples, encoder, max_segments=3)
    features = encode({name: tf.constant(column) for name, column in columns.items()})
    expected = encoder.encode_segments(tf.constant(texts), max_segments=3)
    for name in ("input_ids", "segment_ids", "input_mask"):
        assert features[name].shape == (20, 3, LENGTH)
        np.testing.assert_array_equal(features[name].numpy(), expected[name].numpy())


def test_choice_batches_have_a_segment_axis_after_the_options(encoder, examples):
    choices = [ChoiceExample(example.text, "The review is _.", ("fresh", "rotten"), 0, example.path, example.line)
               for example in examples[:4]]
    columns, encode = sequence_examples.example_columns(choices, encoder, max_segments=2)
    features = encode({name: tf.constant(column) for name, column in columns.items()})
    assert features["input_ids"].shape == (4, 2, 2, LENGTH)
    expected = encoder.encode_segments(tf.constant([choices[1].context]), tf.constant(["The review is rotten."]), 2)
    np.testing.assert_array_equal(features["input_ids"].numpy()[1, 1], expected["input_ids"].numpy()[0])


def test_truncated_texts_are_counted_by_the_encoders_rule(encoder, examples):
    pieces = np.array([len(encoder.tokenize(tf.constant([e.text]))[0]) for e in examples])
    for segments in (1, 2, 4):
        assert sequence_examples.count_truncated(examples, encoder, segments) == int((pieces + 2 > segments * LENGTH)
                                                                                     .sum())
    assert sequence_examples.count_truncated(examples, encoder, 4) < sequence_examples.count_truncated(examples,
                                                                                                       encoder)


def test_a_pair_is_truncated_when_its_second_text_outgrows_the_last_segment(encoder):
    """B sits in the last segment: four segments hold a long A, not a B longer than one segment."""
    long_b = TextExample("Short.", " ".join(["word"] * 30), "fresh", "x", 1)
    long_a = TextExample(" ".join(["word"] * 30), "Fine.", "fresh", "x", 2)
    assert sequence_examples.count_truncated([long_b, long_a], encoder, 4) == 1
    assert sequence_examples.count_truncated([long_a], encoder, 1) == 1
