"""A prompt read as Transformer-XL reads a text (trainer/models/generation.py ``read_prompt`` and
``start_from_memory``): segment by segment with memory, never one quadratic pass.

Exact where it can be: a prompt of at most one segment starts as ``start_generation``'s one pass
starts it; a prompt of whole segments predicts its first new token as segment-by-segment scoring
with memory (``encode_segments``' memory, then ``score_segment`` of the next position) predicts it."""
import numpy as np
import pytest
import tensorflow as tf
from support.strong_networks import strong_inference_network

from trainer.models.generation import choose_tokens, read_prompt, start_from_memory, start_generation
from trainer.models.scoring import score_segment

CACHE = 8
SEGMENT = 8
VOCAB = 40  # support.strong_networks.SMALL


@pytest.fixture(scope="module")
def network():
    return strong_inference_network(mem_len=CACHE)


def prompt(length: int, seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(9, VOCAB, [length]).astype(np.int32)


def first_logits(network, ids, segment_fn=None) -> tf.Tensor:
    mems, valid = read_prompt(network, ids, SEGMENT, segment_fn)
    return start_from_memory(network, mems, valid)[1]


@pytest.mark.parametrize("length", [1, 5, SEGMENT])
def test_a_prompt_within_one_segment_starts_as_the_one_pass_reading(network, length):
    ids = prompt(length)
    _, expected = start_generation(network, ids[None], [length])
    np.testing.assert_array_equal(first_logits(network, ids), expected)


def test_a_long_prompt_predicts_what_segment_by_segment_scoring_with_memory_predicts(network):
    ids = prompt(3 * SEGMENT)
    _, mems = network.encode_segments(ids.reshape(1, 3, SEGMENT), training=False)
    # Every token of the vocabulary as the one target of a segment after that memory: log p(token | prompt).
    candidates = tf.range(VOCAB)[:, None]
    scored, _ = score_segment(network, candidates, tf.ones_like(candidates), tf.ones_like(candidates, tf.bool),
                              [tf.tile(mem, [VOCAB, 1, 1]) for mem in mems])
    expected = scored.numpy()[:, 0]
    logits = first_logits(network, ids)
    np.testing.assert_allclose(tf.nn.log_softmax(logits)[0], expected, atol=1e-5)
    assert int(choose_tokens(logits, 0.0, 0, 1.0, 0, 0)[0]) == int(np.argmax(expected))
    # The memory matters: one pass over the whole prompt predicts otherwise.
    _, one_pass = start_generation(network, ids[None], [len(ids)])
    assert float(tf.reduce_max(tf.abs(one_pass - logits))) > 0.1


def test_reading_a_long_prompt_never_sees_more_than_one_segment_and_the_memory(network):
    seen = []

    def segment_fn(segment, mems):
        seen.append((int(segment.shape[1]), 0 if mems is None else int(mems[0].shape[1])))
        return network.encode(segment, tf.zeros_like(segment), mems=mems)[1]

    ids = prompt(5 * SEGMENT + 3)
    mems, valid = read_prompt(network, ids, SEGMENT, segment_fn)
    assert len(seen) == 6 and seen[0] == (3, 0)  # the first segment holds the remainder
    assert max(queries for queries, _ in seen) == SEGMENT and max(memory for _, memory in seen) == CACHE
    assert [mem.shape[1] for mem in mems] == [CACHE, CACHE] and valid.shape == (1, CACHE)


def test_a_bad_segment_length_or_an_empty_prompt_is_refused(network):
    with pytest.raises(ValueError, match="segment_len must be at least 1"):
        read_prompt(network, prompt(4), 0)
    with pytest.raises(ValueError, match="a prompt must hold at least one token"):
        read_prompt(network, np.zeros([0], np.int32), SEGMENT)
