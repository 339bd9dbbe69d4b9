"""The Transformer-XL recurrence over segments (XLNetNetwork.encode_segments) and the memory mask."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.models.config import model_preset
from trainer.models.network import build_network

BATCH, SEGMENTS, LENGTH = 3, 3, 6


def segment_config(**changes):
    """Whole-sequence reading with a memory longer than one segment (it also keeps zero-padded
    positions from before the first segment, which the mask must hide)."""
    fields = dict(vocab_size=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32, mem_len=10, reuse_len=0,
                  bi_data=False, dropout=0.0, dropatt=0.0)
    return model_preset("tiny").replace(**{**fields, **changes})


def documents(seed=0):
    """[B, S, L] inputs of three documents: three full segments; two (the first segment empty); one
    and a half (left padded, as the text encoder lays them out)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(7, 50, [BATCH, SEGMENTS, LENGTH])
    segments = np.zeros([BATCH, SEGMENTS, LENGTH], np.int32)
    segments[:, -1, -1] = 2  # <cls>
    mask = np.ones([BATCH, SEGMENTS, LENGTH], np.int32)
    mask[1, 0] = 0
    mask[2, :2] = 0
    mask[2, 2, :3] = 0
    ids[mask == 0] = 5
    return tf.constant(ids, tf.int32), tf.constant(segments), tf.constant(mask)


def segment_by_segment(network, ids, segments, mask, training=False):
    mems = mem_mask = None
    states = []
    for index in range(ids.shape[1]):
        hidden, new_mems = network.encode(ids[:, index], segments[:, index], mask[:, index], mems, training,
                                          mem_mask=mem_mask)
        mem_mask = network.memory_mask(mask[:, index], mem_mask)
        mems = new_mems
        states.append(hidden)
    return tf.stack(states, axis=1), mems


def test_encode_segments_is_encode_called_segment_by_segment_with_the_previous_mems():
    network = build_network(segment_config())
    ids, segments, mask = documents()
    hidden, mems = network.encode_segments(ids, segments, mask)
    expected_hidden, expected_mems = segment_by_segment(network, ids, segments, mask)
    assert hidden.shape == (BATCH, SEGMENTS, LENGTH, 16) and [m.shape for m in mems] == [(BATCH, 10, 16)] * 2
    np.testing.assert_allclose(hidden.numpy(), expected_hidden.numpy(), atol=1e-6)
    for mem, expected in zip(mems, expected_mems):
        np.testing.assert_allclose(mem.numpy(), expected.numpy(), atol=1e-6)


def test_encode_segments_with_dropout_draws_what_encode_segment_by_segment_draws():
    ids, segments, mask = documents()
    outputs = []
    for read in ("segments", "one by one"):
        tf.keras.utils.set_random_seed(3)
        network = build_network(segment_config(dropout=0.2, dropatt=0.2))
        if read == "segments":
            outputs.append(network.encode_segments(ids, segments, mask, training=True)[0])
        else:
            outputs.append(segment_by_segment(network, ids, segments, mask, training=True)[0])
    np.testing.assert_allclose(outputs[0].numpy(), outputs[1].numpy(), atol=1e-6)


def test_one_segment_is_encode():
    network = build_network(segment_config())
    ids, segments, mask = documents()
    hidden, mems = network.encode_segments(ids[:, :1], segments[:, :1], mask[:, :1])
    expected, expected_mems = network.encode(ids[:, 0], segments[:, 0], mask[:, 0])
    np.testing.assert_array_equal(hidden.numpy()[:, 0], expected.numpy())
    for mem, expected in zip(mems, expected_mems):
        np.testing.assert_array_equal(mem.numpy(), expected.numpy())


def test_each_document_of_a_mixed_batch_reads_as_it_reads_alone():
    """Alone: a document with only the segments it has; in the batch its missing segments are
    padding, whose memory positions the mask hides."""
    network = build_network(segment_config())
    ids, segments, mask = documents()
    batch, _ = network.encode_segments(ids, segments, mask)
    for row, first in ((0, 0), (1, 1), (2, 2)):
        alone, _ = network.encode_segments(ids[row:row + 1, first:], segments[row:row + 1, first:],
                                           mask[row:row + 1, first:])
        real = mask.numpy()[row, first:] == 1
        np.testing.assert_allclose(batch.numpy()[row, first:][real], alone.numpy()[0][real], atol=1e-5)


def test_without_the_mask_padding_in_memory_changes_the_reading():
    """The counterpart of the test above: the mask is what makes a batch equal each document alone."""
    network = build_network(segment_config())
    ids, segments, mask = documents()
    padded = network.encode(ids[1, 1:2], segments[1, 1:2], mask[1, 1:2],
                            [tf.ones([1, LENGTH, 16])] * 2)[0].numpy()
    hidden = network.encode(ids[1, 1:2], segments[1, 1:2], mask[1, 1:2], [tf.ones([1, LENGTH, 16])] * 2,
                            mem_mask=tf.zeros([1, LENGTH], tf.int32))[0].numpy()
    alone = network.encode(ids[1, 1:2], segments[1, 1:2], mask[1, 1:2])[0].numpy()
    np.testing.assert_allclose(hidden, alone, atol=1e-5)
    assert np.abs(padded - alone).max() > 1e-2


def test_a_memory_mask_of_ones_is_no_mask():
    network = build_network(segment_config())
    ids, segments, mask = documents()
    mems = [tf.random.stateless_normal([BATCH, 4, 16], [1, layer]) for layer in range(2)]
    without, _ = network.encode(ids[:, 0], segments[:, 0], mask[:, 0], mems)
    ones, _ = network.encode(ids[:, 0], segments[:, 0], mask[:, 0], mems, mem_mask=tf.ones([BATCH, 4], tf.int32))
    np.testing.assert_array_equal(ones.numpy(), without.numpy())


def test_the_memory_mask_follows_the_memory_the_last_mem_len_positions():
    network = build_network(segment_config(mem_len=5))
    first = network.memory_mask(tf.constant([[0, 0, 1, 1]]))
    assert first.numpy().tolist() == [[0, 0, 1, 1]]
    assert network.memory_mask(tf.constant([[1, 1, 1, 0]]), first).numpy().tolist() == [[1, 1, 1, 1, 0]]
    cached_rows = build_network(segment_config(mem_len=5, reuse_len=2))
    assert cached_rows.memory_mask(tf.constant([[0, 1, 1, 1]])).numpy().tolist() == [[0, 1]]
    assert build_network(segment_config(mem_len=0)).memory_mask(tf.constant([[1]])) is None


def test_segments_memory_mask_is_the_mask_of_the_final_mems():
    network = build_network(segment_config(mem_len=8))
    ids, segments, mask = documents()
    _, mems = network.encode_segments(ids, segments, mask)
    mem_mask = network.segments_memory_mask(mask)
    assert mem_mask.shape == mems[0].shape[:2]
    np.testing.assert_array_equal(mem_mask.numpy(), mask.numpy().reshape(BATCH, -1)[:, -8:])


def test_only_the_last_segment_carries_gradients():
    network = build_network(segment_config())
    ids, segments, mask = documents()
    with tf.GradientTape(persistent=True) as tape:
        hidden, _ = network.encode_segments(ids, segments, mask, training=True)
        earlier = tf.reduce_sum(hidden[:, :-1] ** 2)
        last = tf.reduce_sum(hidden[:, -1] ** 2)
    variables = network.word_embedding.trainable_variables + network.blocks[0].trainable_variables
    zero = tf.UnconnectedGradients.ZERO
    assert all(not tf.convert_to_tensor(grad).numpy().any() for grad in tape.gradient(earlier, variables,
                                                                                      unconnected_gradients=zero))
    assert all(tf.convert_to_tensor(grad).numpy().any() for grad in tape.gradient(last, variables))


@pytest.mark.slow  # 7-11 s each
@pytest.mark.parametrize("remat", ["attention", "full"])
def test_remat_gives_the_loss_and_gradients_of_no_remat(remat):
    ids, segments, mask = documents()
    results = {}
    for mode in ("none", remat):
        tf.keras.utils.set_random_seed(5)
        network = build_network(segment_config(dropout=0.1, dropatt=0.1), remat=mode)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                hidden, _ = network.encode_last_segment(ids, segments, mask, training=True)
                loss = tf.reduce_sum(hidden[:, -1] ** 2)
            grads = tape.gradient(loss, network.trainable_variables)
            return loss, [grad for grad in grads if grad is not None]  # mask_emb, lm_bias: unused

        results[mode] = step()
    (loss, grads), (remat_loss, remat_grads) = results["none"], results[remat]
    np.testing.assert_allclose(remat_loss.numpy(), loss.numpy(), rtol=1e-6)
    assert len(grads) == len(remat_grads) == len(network.trainable_variables) - 2
    for grad, remat_grad in zip(grads, remat_grads):
        np.testing.assert_allclose(tf.convert_to_tensor(remat_grad).numpy(), tf.convert_to_tensor(grad).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_encode_last_segment_is_the_last_of_encode_segments():
    network = build_network(segment_config())
    ids, segments, mask = documents()
    last, _ = network.encode_last_segment(ids, segments, mask)
    np.testing.assert_array_equal(last.numpy(), network.encode_segments(ids, segments, mask)[0].numpy()[:, -1])


def test_encode_segments_refuses_inputs_without_a_segment_axis():
    network = build_network(segment_config())
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, segments, length\]"):
        network.encode_segments(tf.ones([2, 6], tf.int32))


def test_a_memory_mask_of_the_wrong_length_is_refused():
    network = build_network(segment_config())
    with pytest.raises(ValueError, match=r"mem_mask must be \[batch, 4\]"):
        network.encode(tf.ones([1, 6], tf.int32), mems=[tf.zeros([1, 4, 16])] * 2, mem_mask=tf.ones([1, 5]))
