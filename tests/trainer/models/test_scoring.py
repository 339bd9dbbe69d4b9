"""Natural-order scoring, read in segments with Transformer-XL memory."""
import numpy as np
import pytest
import tensorflow as tf
from support.strong_networks import SMALL, strong_inference_network, strong_network

from trainer.models.config import ModelConfig
from trainer.models.inference_network import inference_config, inference_network
from trainer.models.natural_order import natural_order_inputs
from trainer.models.scoring import score_in_one_pass, score_segment, score_tokens

LENGTHS = [23, 14, 9]
CONTEXTS = [3, 1, 2]


@pytest.fixture(scope="module")
def full_memory():
    return strong_inference_network(mem_len=max(LENGTHS))


@pytest.fixture(scope="module")
def texts():
    """Three right-padded texts of different lengths."""
    ids = np.random.default_rng(3).integers(9, 40, [3, max(LENGTHS)]).astype(np.int32)
    for row, length in enumerate(LENGTHS):
        ids[row, length:] = 0
    return ids


def test_log_probs_are_the_query_streams_log_softmax_of_each_token(full_memory):
    network = inference_network(full_memory, mem_len=0)
    ids = np.random.default_rng(4).integers(9, 40, [1, 7]).astype(np.int32)
    out = score_in_one_pass(network, ids, [7], [2])
    inputs = natural_order_inputs(2, 7)
    logits, _ = network(ids, np.zeros_like(ids), inputs["perm_mask"][None], inputs["target_mapping"][None])
    expected = tf.nn.log_softmax(logits[0]).numpy()[np.arange(5), ids[0, 2:]]
    np.testing.assert_allclose(out["token_log_probs"][0, 2:], expected, atol=1e-5)
    np.testing.assert_array_equal(out["token_log_probs"][0, :2], [0.0, 0.0])
    np.testing.assert_array_equal(out["scored"][0], [False, False, True, True, True, True, True])
    assert int(out["num_tokens"][0]) == 5
    np.testing.assert_allclose(out["log_likelihood"][0], expected.sum(), rtol=1e-6)


def test_segments_with_memory_covering_the_text_equal_one_pass(texts, full_memory):
    whole = score_in_one_pass(full_memory, texts, LENGTHS, CONTEXTS)
    for segment_len in (5, 8):
        segmented = score_tokens(full_memory, texts, LENGTHS, CONTEXTS, segment_len=segment_len)
        np.testing.assert_allclose(segmented["token_log_probs"], whole["token_log_probs"], atol=1e-4)
        np.testing.assert_array_equal(segmented["num_tokens"], [20, 13, 7])


@pytest.mark.slow
def test_memory_shorter_than_the_text_changes_the_scores(texts, full_memory):
    whole = score_in_one_pass(full_memory, texts, LENGTHS, CONTEXTS)
    short = score_tokens(strong_inference_network(mem_len=2), texts, LENGTHS, CONTEXTS, segment_len=4)
    # The first segment has no memory to miss; later ones do.
    np.testing.assert_allclose(short["token_log_probs"][:, :4], whole["token_log_probs"][:, :4], atol=1e-4)
    assert np.abs(short["token_log_probs"][0, 4:] - whole["token_log_probs"][0, 4:]).max() > 0.01


def test_each_text_of_a_batch_scores_as_alone(texts, full_memory):
    network = inference_network(full_memory, mem_len=8)
    batch = score_tokens(network, texts, LENGTHS, CONTEXTS, segment_len=5)
    for row, (length, context) in enumerate(zip(LENGTHS, CONTEXTS)):
        alone = score_tokens(network, texts[row:row + 1, :length], [length], [context], segment_len=5)
        np.testing.assert_allclose(batch["token_log_probs"][row, :length], alone["token_log_probs"][0], atol=1e-5)
        np.testing.assert_array_equal(batch["token_log_probs"][row, length:], 0.0)


@pytest.mark.slow
def test_a_compiled_segment_gives_the_same_scores(texts, full_memory):
    network = inference_network(full_memory, mem_len=6)
    compiled = tf.function(lambda *args: score_segment(network, *args))
    eager = score_tokens(network, texts, LENGTHS, CONTEXTS, segment_len=4)
    traced = score_tokens(network, texts, LENGTHS, CONTEXTS, segment_len=4, segment_fn=compiled)
    np.testing.assert_allclose(traced["token_log_probs"], eager["token_log_probs"], atol=1e-5)


def test_a_context_longer_than_the_first_segment_is_refused(texts, full_memory):
    with pytest.raises(tf.errors.InvalidArgumentError, match="first segment"):
        score_tokens(full_memory, texts, LENGTHS, [5, 1, 1], segment_len=4)


def test_a_training_network_is_refused_and_converted_with_its_weights():
    trained = strong_network(ModelConfig(**SMALL, bi_data=True))
    with pytest.raises(ValueError, match="inference_network"):
        score_tokens(trained, np.full([1, 4], 9), [4], [1], segment_len=4)
    reading = inference_network(trained, mem_len=5)
    assert reading.config == inference_config(trained.config, 5)
    assert reading.config.reuse_len == 0 and not reading.config.bi_data
    for copied, original in zip(reading.weights, trained.weights):
        np.testing.assert_array_equal(copied.numpy(), original.numpy())
    assert inference_network(reading, mem_len=5) is reading


