"""Fine-tuning heads (trainer/models/sequence_model.py, trainer/layers/sequence_summary.py): the summary of the
<cls> state, head shapes per task, and the losses as the original computes them."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from trainer.layers.sequence_summary import SequenceSummary
from trainer.models.sequence_model import XLNetForSequenceTask, task_loss
from trainer.serving.text_encoder import XLNetTextEncoder

from support.sequence_networks import small_sequence_network

MAX_LENGTH = 24
SENTENCES = ["In the beginning God created the heaven and the earth.",
             "And the earth was without form, and void.",
             "Paris is the capital and most populous city of France."]


@pytest.fixture(scope="module")
def network(vocab):
    return small_sequence_network(vocab.vocab_size)


@pytest.fixture(scope="module")
def encoder(vocab):
    return XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), MAX_LENGTH, uncased=False)


def encoded(encoder, texts, texts_b=None):
    return encoder.encode(tf.constant(texts), None if texts_b is None else tf.constant(texts_b))


def test_summary_is_tanh_of_the_projected_last_position_only():
    summary = SequenceSummary(4, dropout=0.5)
    hidden = np.random.default_rng(0).normal(size=(2, 5, 4)).astype(np.float32)
    kernel, bias = (w.numpy() for w in summary.summary.weights)
    expected = np.tanh(hidden[:, -1] @ kernel + bias)
    np.testing.assert_allclose(summary(tf.constant(hidden)).numpy(), expected, rtol=1e-6)
    changed = hidden.copy()
    changed[:, :-1] += 10.0  # every position but <cls>
    np.testing.assert_allclose(summary(tf.constant(changed)).numpy(), expected, rtol=1e-6)


def test_summary_dropout_acts_only_in_training():
    summary = SequenceSummary(64, dropout=0.5)
    hidden = tf.ones([3, 2, 64])
    assert np.all(summary(hidden, training=False).numpy() != 0)
    assert np.mean(summary(hidden, training=True).numpy() == 0) > 0.3


def test_summary_config_round_trips():
    summary = SequenceSummary(8, dropout=0.1, initializer_range=0.05, name="sequence_summary")
    assert SequenceSummary.from_config(summary.get_config()).get_config() == summary.get_config()


def test_classification_gives_one_logit_per_label(network, encoder):
    model = XLNetForSequenceTask(network, "classification", num_labels=3)
    assert model(encoded(encoder, SENTENCES)).shape == (3, 3)
    assert model.logits_proj.kernel.shape == (32, 3)


def test_regression_gives_one_score_per_example(network, encoder):
    model = XLNetForSequenceTask(network, "regression")
    assert model(encoded(encoder, SENTENCES[:2], SENTENCES[1:])).shape == (2,)


def test_multiple_choice_scores_each_option_as_its_own_sequence(network, encoder):
    model = XLNetForSequenceTask(network, "multiple-choice")
    context = ["Paris is the capital and most populous city of France."] * 3
    options = ["Which city? Paris", "Which city? London", "Which city? Rome"]
    rows = encoded(encoder, context, options)  # [3 options, max_length]
    logits = model({name: value[None] for name, value in rows.items()})  # one question, 3 options
    assert logits.shape == (1, 3)
    one_by_one = model._logits(rows, training=False)  # the same rows as a batch of 3 sequences: [3, 1]
    np.testing.assert_allclose(logits.numpy()[0], one_by_one.numpy()[:, 0], rtol=1e-5)


def test_the_head_reads_the_cls_state_of_the_network(network, encoder):
    model = XLNetForSequenceTask(network, "classification", num_labels=2)
    inputs = encoded(encoder, SENTENCES)
    hidden, _ = network.encode(inputs["input_ids"], inputs["segment_ids"], input_mask=inputs["input_mask"])
    expected = model.logits_proj(model.sequence_summary(hidden))  # summary of hidden[:, -1], <cls>
    np.testing.assert_allclose(model(inputs).numpy(), expected.numpy(), rtol=1e-6)
    assert np.all(inputs["input_ids"].numpy()[:, -1] == encoder.special_ids["cls"])


def test_classification_loss_is_softmax_cross_entropy():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]], np.float32)
    # -log(e^2 / (e^2 + 1 + e^-1)) and -log(1/3)
    expected = [-np.log(np.exp(2) / (np.exp(2) + 1 + np.exp(-1))), np.log(3.0)]
    np.testing.assert_allclose(task_loss("classification", tf.constant(logits), tf.constant([0, 2])), expected,
                               rtol=1e-6)


def test_regression_loss_is_squared_error_without_a_half():
    np.testing.assert_allclose(task_loss("regression", tf.constant([1.5, -2.0]), tf.constant([0.5, 1.0])),
                               [1.0, 9.0])


def test_multiple_choice_loss_is_cross_entropy_over_the_options():
    logits = tf.constant([[0.0, np.log(3.0)]], tf.float32)  # p = [1/4, 3/4]
    np.testing.assert_allclose(task_loss("multiple-choice", logits, tf.constant([1])), [np.log(4 / 3)], rtol=1e-6)


def test_unknown_task_and_single_label_classification_are_refused(network):
    with pytest.raises(ValueError, match="task must be one of classification, regression, multiple-choice"):
        XLNetForSequenceTask(network, "squad")
    with pytest.raises(ValueError, match="at least 2 labels"):
        XLNetForSequenceTask(network, "classification", num_labels=1)


def test_model_config_round_trips_with_its_network(network):
    model = XLNetForSequenceTask(network, "classification", num_labels=4, name="classifier")
    rebuilt = XLNetForSequenceTask.from_config(model.get_config())
    assert (rebuilt.task, rebuilt.num_labels, rebuilt.name) == ("classification", 4, "classifier")
    assert rebuilt.network.config == network.config
