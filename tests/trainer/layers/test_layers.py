"""Layer-level behaviour: rel_shift, relative distances, hashed dropout, mask constant."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.layers import HashDropout, RelativePositionEncoding, mask_fill_value, rel_shift
from trainer.layers.counter_hash import hashed_uniform_bits
from trainer.layers.tensorflow_dropout import keep_mask
from trainer.layers.relative_position import gather_relative, relative_distances


def test_relative_distances_run_from_klen_down_to_minus_qlen_plus_one():
    assert relative_distances(klen=5, qlen=3, attn_type="bi", clamp_len=-1).numpy().tolist() == \
        [5, 4, 3, 2, 1, 0, -1, -2]
    assert relative_distances(klen=5, qlen=3, attn_type="uni", clamp_len=-1).numpy().tolist() == [5, 4, 3, 2, 1, 0]
    assert relative_distances(klen=5, qlen=3, attn_type="bi", clamp_len=2).numpy().tolist() == \
        [2, 2, 2, 2, 1, 0, -1, -2]


def test_rel_shift_gives_entry_i_j_the_distance_mlen_plus_i_minus_j():
    qlen, mlen = 3, 2
    klen = qlen + mlen
    distances = relative_distances(klen, qlen, "bi", -1).numpy()
    table = np.broadcast_to(distances, [1, 1, qlen, len(distances)])  # score = its distance
    shifted = rel_shift(tf.constant(table), klen).numpy()[0, 0]
    expected = (mlen + np.arange(qlen))[:, None] - np.arange(klen)[None, :]
    np.testing.assert_array_equal(shifted, expected)


def test_gather_relative_equals_rel_shift_on_the_chosen_rows():
    scores = tf.random.stateless_normal([2, 3, 4, 10], seed=[1, 2])
    positions = tf.constant([[3, 0], [1, 2]])
    picked = gather_relative(tf.gather(scores, positions, axis=2, batch_dims=1), positions, qlen=4, klen=6)
    full = rel_shift(scores, 6).numpy()
    for b in range(2):
        np.testing.assert_array_equal(picked.numpy()[b], full[b][:, positions.numpy()[b]])


def test_backward_half_of_bi_data_uses_negated_distances():
    encoding = RelativePositionEncoding(8, attn_type="bi", bi_data=True)(klen=4, qlen=2)
    forward, backward = encoding.numpy()
    np.testing.assert_allclose(backward[:, :4], -forward[:, :4], atol=1e-7)  # sin is odd
    np.testing.assert_allclose(backward[:, 4:], forward[:, 4:], atol=1e-7)  # cos is even


def test_dropout_is_identity_unless_training():
    x = tf.ones([4, 64])
    layer = HashDropout(0.5)
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())


def test_dropout_drops_about_rate_and_rescales_the_rest():
    out = HashDropout(0.1, seed=3)(tf.ones([200, 500]), training=True).numpy()
    assert abs((out == 0).mean() - 0.1) < 0.005
    np.testing.assert_allclose(out[out != 0], 1 / 0.9, rtol=1e-6)


def test_dropout_draws_a_new_mask_every_call_and_repeats_with_the_seed():
    x = tf.ones([16, 64])
    first, second = HashDropout(0.3, seed=5), HashDropout(0.3, seed=5)
    a, b = first(x, training=True).numpy(), first(x, training=True).numpy()
    assert (a != b).any()
    np.testing.assert_array_equal(second(x, training=True).numpy(), a)


def test_dropout_mask_is_the_same_under_xla():
    x = tf.ones([16, 64])
    eager, compiled = HashDropout(0.3, seed=9), HashDropout(0.3, seed=9)
    np.testing.assert_array_equal(tf.function(lambda v: compiled(v, training=True), jit_compile=True)(x).numpy(),
                                  eager(x, training=True).numpy())


def test_the_compiled_keep_mask_is_the_hash_computed_op_by_op():
    seed = tf.constant([123456789, -42], tf.int64)
    bits = hashed_uniform_bits(tf.TensorShape([8, 33, 7]), seed)  # eager, one TensorFlow op at a time
    np.testing.assert_array_equal(keep_mask((8, 33, 7), seed, 0.1).numpy(), bits.numpy() >= int(0.1 * 2 ** 32))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_mask_fill_value_is_finite_in_every_compute_dtype(dtype):
    assert np.isfinite(tf.cast(mask_fill_value(dtype), dtype).numpy().astype(np.float32))
    assert tf.cast(mask_fill_value(dtype), tf.float32).numpy() < -6e4


def test_attention_over_a_single_key_shows_no_warning():
    # One key is a legitimate row (a one-token prompt); Keras warns about any softmax over an axis of size 1.
    import warnings

    from trainer.layers import TwoStreamRelativeAttention

    attention = TwoStreamRelativeAttention(d_model=8, n_head=2, d_head=4)
    h = tf.ones([1, 1, 8])
    pos_emb = RelativePositionEncoding(8)(klen=1, qlen=1)
    biases = {name: tf.zeros([2, 4]) for name in ("r_w_bias", "r_r_bias", "r_s_bias")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, _ = attention(h, None, pos_emb, seg_embed=tf.zeros([2, 2, 4]), **biases)
    assert out.shape == (1, 1, 8)
    assert [str(warning.message) for warning in caught] == []
