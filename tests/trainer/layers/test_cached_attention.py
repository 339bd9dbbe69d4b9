"""The cached-step methods of the attention layer and block: rows attending keys and values
projected before give what a full call gives those rows."""
import numpy as np
import tensorflow as tf

from trainer.layers import RelativePositionEncoding, XLNetBlock

D_MODEL, N_HEAD, D_HEAD, LENGTH = 16, 2, 8, 7


def strong(layer) -> None:
    """Weights large enough that every term of the score matters."""
    rng = np.random.default_rng(3)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.4, weight.shape).astype(np.float32) + (1.0 if "gamma" in weight.name else 0.0))


def test_a_block_step_on_cached_keys_equals_the_full_call_on_those_rows():
    block = XLNetBlock(D_MODEL, N_HEAD, D_HEAD, 24)
    strong(block)
    rng = np.random.default_rng(4)
    h = tf.constant(rng.normal(size=[2, LENGTH, D_MODEL]), tf.float32)
    g = tf.constant(rng.normal(size=[2, 2, D_MODEL]), tf.float32)
    biases = {name: tf.constant(rng.normal(0, 0.4, shape), tf.float32) for name, shape in
              (("r_w_bias", [N_HEAD, D_HEAD]), ("r_r_bias", [N_HEAD, D_HEAD]), ("r_s_bias", [N_HEAD, D_HEAD]),
               ("seg_embed", [2, N_HEAD, D_HEAD]))}
    positions = tf.constant([[3, 6], [5, 2]])
    # The query rows see the keys before their position; one key of each row is hidden too.
    blocked = np.arange(LENGTH)[None, None, :] >= positions.numpy()[:, :, None]
    blocked[:, :, 1] = True
    segment_diff = tf.zeros([2, 2, LENGTH], tf.bool)
    full_encoding = RelativePositionEncoding(D_MODEL)(klen=LENGTH, qlen=LENGTH)
    _, expected = block(h, g, pos_emb=full_encoding, query_mask=tf.constant(blocked), query_positions=positions,
                        query_segment_diff=segment_diff, content_segment_diff=tf.zeros([2, LENGTH, LENGTH], tf.bool),
                        **biases)

    keys, values = block.attention.project_keys_values(h)
    # distances LENGTH .. 0: every distance a row can see
    position_keys = block.attention.project_positions(RelativePositionEncoding(D_MODEL)(klen=LENGTH, qlen=1))
    rows = block.cached_step(g, keys, values, position_keys, positions, tf.constant(blocked), segment_diff, **biases)
    np.testing.assert_allclose(rows, expected, atol=1e-5)
    assert float(tf.reduce_max(tf.abs(rows[0, 0] - rows[0, 1]))) > 0.1
