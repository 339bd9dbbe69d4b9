"""The natural-order factorisation: a context that sees itself, then targets in natural order."""
import numpy as np
import tensorflow as tf
from support.strong_networks import strong_inference_network

from trainer.models.natural_order import natural_order_inputs, natural_order_mask, natural_order_targets
from trainer.models.permutation import dense_inputs


def explicit_permutation_mask(order: list[int], context: set[int], length: int) -> np.ndarray:
    """perm_mask (1 = may not attend, the query stream's view) from first principles for the
    factorisation ``order`` of the targets, the ``context`` positions being non-targets."""
    rank = {position: index for index, position in enumerate(order)}
    mask = np.zeros([length, length], np.float32)
    for i in range(length):
        for j in range(length):
            if j in context:
                continue  # everyone sees the context
            if i in context or rank[j] >= rank[i]:
                mask[i, j] = 1.0  # the context sees no target; a target sees only earlier ones
    return mask


def test_mask_of_a_context_of_two_and_three_targets():
    expected = np.array([[0, 0, 1, 1, 1],
                         [0, 0, 1, 1, 1],
                         [0, 0, 1, 1, 1],
                         [0, 0, 0, 1, 1],
                         [0, 0, 0, 0, 1]], np.float32)
    inputs = natural_order_inputs(context_length=2, total_length=5)
    np.testing.assert_array_equal(inputs["perm_mask"], expected)
    np.testing.assert_array_equal(inputs["target_positions"], [2, 3, 4])
    np.testing.assert_array_equal(inputs["target_mapping"], np.eye(5)[2:])


def test_targets_of_padded_rows():
    is_target = natural_order_targets(tf.constant([2, 4]), tf.constant([4, 6]), 6)
    np.testing.assert_array_equal(is_target, [[0, 0, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1]])


def test_natural_order_is_the_pretraining_permutation_with_blocks_of_one():
    # perm_size 1 and no context part: the pretraining ranks are the positions themselves.
    ids = tf.constant([[11, 12, 13, 14, 15, 16, 17, 18]])
    is_target = natural_order_targets(tf.constant([3]), tf.constant([8]), 8)
    dense = dense_inputs(ids, is_target, tf.constant([[7, 9]]), reuse_len=0, perm_size=1, num_predict=5, sep_id=4,
                         cls_id=3)
    np.testing.assert_array_equal(tf.cast(natural_order_mask(is_target), tf.float32), dense["perm_mask"])
    np.testing.assert_array_equal(natural_order_inputs(3, 8)["target_mapping"][None], dense["target_mapping"])


def test_logits_equal_the_two_stream_pass_of_an_explicit_permutation():
    network = strong_inference_network(mem_len=0)
    length, context = 9, [0, 1, 2, 3]
    ids = np.random.default_rng(1).integers(9, 40, [1, length])
    segments = np.zeros_like(ids)
    # The context in a shuffled order (its members see each other whatever the order), then the targets in order.
    order = [2, 0, 3, 1, 4, 5, 6, 7, 8]
    explicit = explicit_permutation_mask(order, set(context), length)
    mapping = np.eye(length, dtype=np.float32)[None, 4:]
    expected, _ = network(ids, segments, explicit[None], mapping)
    inputs = natural_order_inputs(len(context), length)
    logits, _ = network(ids, segments, inputs["perm_mask"][None], inputs["target_mapping"][None])
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    assert float(tf.reduce_max(tf.abs(logits[:, 1:] - logits[:, :1]))) > 0.1  # the rows differ: the test can fail


def test_a_prediction_sees_the_tokens_before_it_and_none_after():
    network = strong_inference_network(mem_len=0)
    ids = np.random.default_rng(2).integers(9, 40, [1, 8])
    inputs = natural_order_inputs(3, 8)
    mask, mapping = inputs["perm_mask"][None], inputs["target_mapping"][None]
    base, _ = network(ids, np.zeros_like(ids), mask, mapping)
    changed = ids.copy()
    changed[0, 5] = 9 if ids[0, 5] != 9 else 10
    moved, _ = network(changed, np.zeros_like(ids), mask, mapping)
    # targets 3..7: position 5 is target 2; predictions of positions 3..5 ignore it, 6 and 7 read it.
    np.testing.assert_allclose(moved[:, :3], base[:, :3], atol=1e-6)
    assert float(tf.reduce_max(tf.abs(moved[:, 3:] - base[:, 3:]))) > 1e-3
