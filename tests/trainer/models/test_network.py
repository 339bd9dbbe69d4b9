"""The public model API (trainer/models/network.py, trainer/models/pretrainer.py): build_network, the two-stream
call, encode, the pretrainer."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.models.config import model_preset
from trainer.models.network import build_network
from trainer.models.pretrainer import XLNetPretrainer, is_largest

SPECIAL = {"sep": 4, "cls": 3}


def small_config(**changes):
    return model_preset("tiny").replace(vocab_size=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32,
                                        mem_len=6, reuse_len=4, **changes)


def compact_features(batch=4, seq_len=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 50, [batch, seq_len])
    ids[:, -2], ids[:, -1] = SPECIAL["sep"], SPECIAL["cls"]
    return {"input_ids": tf.constant(ids, tf.int32),
            "segment_ids": tf.constant(np.repeat([[0] * (seq_len - 4) + [1, 1, 1, 2]], batch, 0), tf.int32),
            "is_masked": tf.constant(rng.random([batch, seq_len]) < 0.4),
            "perm_seed": tf.constant(rng.integers(0, 2**20, [batch, 2]), tf.int32)}


def test_call_returns_query_logits_and_one_memory_per_layer():
    network = build_network(small_config())
    batch, seq_len, num_predict = 4, 8, 3
    perm_mask = tf.zeros([batch, seq_len, seq_len])
    target_mapping = tf.one_hot(tf.constant([[1, 3, 5]] * batch), seq_len)
    logits, new_mems = network(tf.ones([batch, seq_len], tf.int32), tf.zeros([batch, seq_len], tf.int32), perm_mask,
                               target_mapping, network.initial_mems(batch))
    assert logits.shape == (batch, num_predict, 50) and logits.dtype == tf.float32
    assert [m.shape for m in new_mems] == [(batch, 6, 16)] * 2



def two_stream_inputs(batch=4, seq_len=8):
    rng = np.random.default_rng(4)
    return (tf.constant(rng.integers(5, 50, [batch, seq_len]), tf.int32), tf.zeros([batch, seq_len], tf.int32),
            tf.constant(rng.random([batch, seq_len, seq_len]) < 0.5), tf.one_hot([[1, 3, 5]] * batch, seq_len))


def test_call_gives_the_logits_of_the_query_stream_streams_returns_with_dropout():
    # call's last layer skips the content stream's own attention (no one reads it); the dropout
    # seeds are drawn as for a full layer, so the query stream and the memories are those of streams
    ids, segments, perm_mask, target_mapping = two_stream_inputs()
    outputs = []
    for method in ("call", "streams"):
        tf.keras.utils.set_random_seed(9)
        network = build_network(small_config(dropout=0.1, dropatt=0.1))
        mems = network.initial_mems(4)
        if method == "call":
            outputs.append(network(ids, segments, perm_mask, target_mapping, mems, training=True))
        else:
            _, query, new_mems = network.streams(ids, segments, perm_mask, target_mapping, mems, training=True)
            outputs.append((network.logits(query), new_mems))
    (logits, mems), (expected_logits, expected_mems) = outputs
    np.testing.assert_array_equal(logits.numpy(), expected_logits.numpy())
    for mem, expected in zip(mems, expected_mems):
        np.testing.assert_array_equal(mem.numpy(), expected.numpy())


def test_call_runs_no_content_stream_attention_in_its_last_layer():
    ids, segments, perm_mask, target_mapping = two_stream_inputs()
    network = build_network(small_config())
    content_scores = (4, 2, 8, 6 + 8)  # [B, N, L, M + L]

    def score_tensors(method):
        graph = tf.function(method).get_concrete_function(ids, segments, perm_mask, target_mapping,
                                                          network.initial_mems(4)).graph
        return sum(1 for op in graph.get_operations() if op.type == "Softmax"
                   and tuple(op.outputs[0].shape) == content_scores)

    assert score_tensors(network.streams) == 2
    assert score_tensors(network.call) == 1


def test_encode_returns_content_states():
    network = build_network(small_config())
    hidden, new_mems = network.encode(tf.ones([2, 8], tf.int32), tf.zeros([2, 8], tf.int32))
    assert hidden.shape == (2, 8, 16)
    assert [m.shape for m in new_mems] == [(2, 4, 16)] * 2  # first reuse_len=4 positions, no old memory


def test_build_network_accepts_a_preset_name():
    assert build_network("tiny").config == model_preset("tiny")


def test_pretrainer_loss_is_finite_and_counts_real_targets():
    pretrainer = XLNetPretrainer(small_config(), seq_len=8, num_predict=4, perm_size=4, special_ids=SPECIAL)
    features = compact_features()
    out = pretrainer.compute(features, pretrainer.network.initial_mems(4), training=False)
    flags = features["is_masked"].numpy()
    flags[:, -2:] = False  # <sep>/<cls> are never targets
    assert out["num_targets"].numpy() == np.minimum(flags.sum(1), 4).sum()
    assert np.isfinite(out["loss"].numpy()) and 0 <= out["accuracy"].numpy() <= 1


def test_pretrainer_step_compiles_with_xla():
    pretrainer = XLNetPretrainer(small_config(), seq_len=8, num_predict=4, perm_size=4, special_ids=SPECIAL)
    features = compact_features()
    eager = pretrainer.compute(features, None, training=False)["loss"]
    compiled = tf.function(lambda f: pretrainer.compute(f, None, training=False)["loss"], jit_compile=True)
    np.testing.assert_allclose(compiled(features).numpy(), eager.numpy(), rtol=1e-4)


def test_pretrainer_rejects_perm_size_that_does_not_split_the_parts():
    with pytest.raises(ValueError, match="perm_size=3 must divide reuse_len=4"):
        XLNetPretrainer(small_config(), seq_len=8, num_predict=4, perm_size=3, special_ids=SPECIAL)


def test_loss_is_mean_cross_entropy_over_real_targets():
    pretrainer = XLNetPretrainer(small_config(), seq_len=8, num_predict=4, perm_size=4, special_ids=SPECIAL)
    features = compact_features(seed=3)
    out = pretrainer.compute(features, None, training=False)
    logits = out["logits"].numpy().astype(np.float64)
    targets = pretrainer.targets_from_compact(features)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets["target"].numpy()[..., None], -1)[..., 0]
    valid = targets["target_valid"].numpy()
    assert valid.sum() < valid.size  # some padding rows, which must not count
    np.testing.assert_allclose(out["loss"].numpy(), -(picked * valid).sum() / valid.sum(), rtol=1e-5)


def test_dense_original_style_features_give_the_same_loss_as_compact_ones():
    from trainer.models.permutation import dense_inputs

    pretrainer = XLNetPretrainer(small_config(), seq_len=8, num_predict=4, perm_size=4, special_ids=SPECIAL)
    features = compact_features(seed=4)
    dense = dense_inputs(features["input_ids"], features["is_masked"], features["perm_seed"], reuse_len=4, perm_size=4,
                         num_predict=4, sep_id=SPECIAL["sep"], cls_id=SPECIAL["cls"])
    dense_features = {"input_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                      **{k: dense[k] for k in ("perm_mask", "target_mapping", "target_mask", "target")}}
    np.testing.assert_allclose(pretrainer.compute(dense_features, None)["loss"].numpy(),
                               pretrainer.compute(features, None)["loss"].numpy(), rtol=1e-6)


def test_pretrainer_trains_inside_strategy_run():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        pretrainer = XLNetPretrainer(small_config(dropout=0.1), seq_len=8, num_predict=4, perm_size=4,
                                     special_ids=SPECIAL)
    features = compact_features()

    @tf.function
    def step(batch):
        def replica_step(batch):
            with tf.GradientTape() as tape:
                out = pretrainer.compute(batch, None, training=True)
            grads = tape.gradient(out["loss"], pretrainer.trainable_variables)
            return out["loss"], tf.linalg.global_norm(grads)
        return strategy.run(replica_step, args=(batch,))

    loss, grad_norm = step(features)
    assert np.isfinite(loss.numpy()) and grad_norm.numpy() > 0


def test_missing_compact_feature_is_named():
    pretrainer = XLNetPretrainer(small_config(), seq_len=8, num_predict=4, perm_size=4, special_ids=SPECIAL)
    features = compact_features()
    del features["perm_seed"]
    with pytest.raises(ValueError, match="features lack perm_seed"):
        pretrainer.compute(features, None)


def test_a_prediction_is_correct_when_the_targets_logit_is_the_largest_ties_included():
    logits = tf.constant([[0.1, 0.7, 0.2], [0.5, 0.1, 0.5], [0.5, 0.1, 0.5], [0.9, 0.0, -1.0]])
    target = tf.constant([1, 2, 1, 2])
    # Row 1's target ties for the largest: correct (an argmax would pick id 0).
    assert is_largest(logits, target).numpy().tolist() == [True, True, False, False]


def test_without_ties_correct_is_where_the_argmax_is_the_target():
    rng = np.random.default_rng(3)
    logits = tf.constant(rng.standard_normal([4, 6, 50]), tf.float32)
    target = tf.constant(rng.integers(0, 50, [4, 6]), tf.int32)
    target = tf.where(tf.constant(rng.random([4, 6]) < 0.5), tf.argmax(logits, -1, output_type=tf.int32), target)
    expected = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), target).numpy()
    assert expected.any() and not expected.all()
    assert np.array_equal(is_largest(logits, target).numpy(), expected)
