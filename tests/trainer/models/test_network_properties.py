"""XLNet's defining properties: no target leak, factorisation order respected, memory equivalence,
serialisable layers, mixed precision."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer.conversion.tf1_checkpoint import assign_original_weights
from trainer.layers import (
    PositionwiseFeedForward,
    RelativeAttentionBiases,
    RelativePositionEncoding,
    TwoStreamRelativeAttention,
    XLNetBlock,
)
from trainer.models.config import ModelConfig
from trainer.models.network import XLNetNetwork, build_network
from trainer.models.permutation import dense_inputs
from trainer.models.pretrainer import XLNetPretrainer

from support import reference_numpy

SEP, CLS = 4, 3
SEQ_LEN = 12


def config(**changes) -> ModelConfig:
    values = dict(vocab_size=40, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, bi_data=True, mem_len=6,
                  reuse_len=4)
    values.update(changes)
    return ModelConfig(**values)


def strong_network(model_config: ModelConfig) -> XLNetNetwork:
    """Weights large enough that any visible change moves the outputs clearly."""
    reference_config = dict(n_layer=model_config.n_layer, n_head=model_config.n_head, d_head=model_config.d_head,
                            d_model=model_config.d_model, d_inner=model_config.d_inner, untie_r=model_config.untie_r,
                            vocab=model_config.vocab_size)
    network = build_network(model_config)
    assign_original_weights(network, reference_numpy.random_weights(reference_config, seed=5))
    return network


def permuted_batch(seed: int = 2):
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, 40, [2, SEQ_LEN]).astype(np.int32)
    ids[:, 7], ids[:, 10], ids[:, 11] = SEP, SEP, CLS
    segments = np.array([[0] * 8 + [1, 1, 1, 2]] * 2, np.int32)
    is_masked = np.zeros([2, SEQ_LEN], bool)
    is_masked[:, [1, 2, 5, 6, 8, 9]] = True
    dense = dense_inputs(tf.constant(ids), tf.constant(is_masked), tf.constant([[3, 1], [4, 1]]), reuse_len=4,
                         perm_size=2, num_predict=6, sep_id=SEP, cls_id=CLS)
    return ids, segments, {k: v.numpy() for k, v in dense.items()}


def query_logits(network, ids, segments, dense):
    return network(ids, segments, dense["perm_mask"], dense["target_mapping"], None)[0].numpy()


def target_positions(dense, example):
    return dense["target_mapping"][example].argmax(-1)


def test_changing_a_target_token_does_not_change_its_own_prediction():
    network = strong_network(config())
    ids, segments, dense = permuted_batch()
    before = query_logits(network, ids, segments, dense)
    for row, position in enumerate(target_positions(dense, 0)):
        changed = ids.copy()
        changed[0, position] = 9 if ids[0, position] != 9 else 10
        after = query_logits(network, changed, segments, dense)
        np.testing.assert_allclose(after[0, row], before[0, row], rtol=0, atol=1e-6)


def test_a_token_later_in_the_factorisation_order_does_not_change_earlier_predictions():
    network = strong_network(config())
    ids, segments, dense = permuted_batch()
    before = query_logits(network, ids, segments, dense)
    positions = target_positions(dense, 0)
    target_ranks = dense["ranks"][0, positions]
    middle = np.argsort(target_ranks)[len(positions) // 2]  # a target with earlier and later targets
    changed = ids.copy()
    changed[0, positions[middle]] = 9 if ids[0, positions[middle]] != 9 else 10
    after = query_logits(network, changed, segments, dense)
    earlier = target_ranks < target_ranks[middle]
    later = target_ranks > target_ranks[middle]
    np.testing.assert_allclose(after[0, earlier], before[0, earlier], rtol=0, atol=1e-6)
    assert np.abs(after[0, later] - before[0, later]).max() > 1e-3  # later targets do see it


def test_content_stream_sees_its_own_token():
    network = strong_network(config())
    ids, segments, dense = permuted_batch()
    # perm_mask all ones: the content stream of every position can see nothing but itself.
    blind = np.ones_like(dense["perm_mask"])
    content, _, _ = network.streams(ids, segments, blind, dense["target_mapping"])
    changed = ids.copy()
    changed[0, 3] += 1
    content_changed, _, _ = network.streams(changed, segments, blind, dense["target_mapping"])
    assert np.abs(content_changed.numpy()[0, 3] - content.numpy()[0, 3]).max() > 1e-3
    np.testing.assert_allclose(content_changed.numpy()[0, 4:], content.numpy()[0, 4:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("attn_type", ["bi", "uni"])
def test_memory_equals_attending_over_the_concatenation(attn_type):
    half = 6
    network = strong_network(config(attn_type=attn_type, mem_len=half, reuse_len=half))
    rng = np.random.default_rng(0)
    first, second = rng.integers(9, 40, [2, half]), rng.integers(9, 40, [2, half])
    second_segments = np.array([[0, 0, 0, 1, 1, 2]] * 2)
    _, mems = network.encode(first, np.zeros_like(first))
    with_memory, _ = network.encode(second, second_segments, mems=mems)
    # The mask that memory implies: the first segment never sees the second, the second sees everything.
    perm_mask = np.zeros([2, 2 * half, 2 * half], np.float32)
    perm_mask[:, :half, half:] = 1
    together, _, _ = network.streams(np.concatenate([first, second], 1),
                                     np.concatenate([np.zeros_like(first), second_segments], 1), perm_mask,
                                     target_positions=tf.zeros([2, 1], tf.int32))
    np.testing.assert_allclose(with_memory.numpy(), together.numpy()[:, half:], rtol=1e-5, atol=1e-5)


def test_memory_caches_the_first_reuse_len_inputs_and_keeps_the_last_mem_len():
    network = strong_network(config(mem_len=6, reuse_len=4))
    ids = np.arange(10, 22).reshape(2, 6)
    old = [tf.fill([2, 6, 16], float(i)) for i in range(2)]
    _, new = network.encode(ids, np.zeros_like(ids), mems=old)
    embedded = tf.gather(network.word_embedding.embeddings, ids).numpy()
    np.testing.assert_allclose(new[0].numpy()[:, :2], old[0].numpy()[:, 4:])
    np.testing.assert_allclose(new[0].numpy()[:, 2:], embedded[:, :4])  # layer 0 caches its input: embeddings


def test_memory_carries_no_gradient():
    network = strong_network(config())
    ids = np.arange(10, 22).reshape(1, 12).repeat(2, 0)
    with tf.GradientTape() as tape:
        _, new = network.encode(ids, np.zeros_like(ids))
        total = tf.reduce_sum(new[1])
    assert tape.gradient(total, network.word_embedding.embeddings) is None


LAYERS = [
    RelativePositionEncoding(16, attn_type="uni", bi_data=True, clamp_len=5, dropout=0.1),
    TwoStreamRelativeAttention(16, 2, 8, dropout=0.1, dropatt=0.2),
    PositionwiseFeedForward(16, 24, activation="relu", dropout=0.1),
    XLNetBlock(16, 2, 8, 24, activation="gelu", dropout=0.1, dropatt=0.0),
    RelativeAttentionBiases(3, 2, 8, untie_r=False),
]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: type(layer).__name__)
def test_layer_config_round_trips(layer):
    rebuilt = type(layer).from_config(layer.get_config())
    assert rebuilt.get_config() == layer.get_config()


def test_network_and_pretrainer_configs_round_trip():
    network = build_network(config(clamp_len=7, attn_type="uni"))
    assert XLNetNetwork.from_config(network.get_config()).config == network.config
    pretrainer = XLNetPretrainer(config(), 12, 4, 2, {"sep": SEP, "cls": CLS}, network=network)
    assert XLNetPretrainer.from_config(pretrainer.get_config()).get_config() == pretrainer.get_config()


def test_dropout_only_when_training():
    network = strong_network(config(dropout=0.3, dropatt=0.3))
    ids, segments, dense = permuted_batch()
    args = (ids, segments, dense["perm_mask"], dense["target_mapping"], None)
    np.testing.assert_array_equal(network(*args)[0].numpy(), network(*args)[0].numpy())
    assert np.abs(network(*args, training=True)[0].numpy() - network(*args)[0].numpy()).max() > 1e-3


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_matches_float32(policy):
    reference = strong_network(config())
    mixed = build_network(config(), dtype=policy)
    for ours, theirs in zip(mixed.weights, reference.weights):
        ours.assign(theirs)
    ids, segments, dense = permuted_batch()
    content, _, _ = mixed.streams(ids, segments, dense["perm_mask"], dense["target_mapping"])
    assert content.dtype == keras.mixed_precision.Policy(policy).compute_dtype
    expected = query_logits(reference, ids, segments, dense)
    got = query_logits(mixed, ids, segments, dense)
    assert np.isfinite(got).all()
    # 16-bit activations: agreement to a few percent of the logit range.
    assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()


def test_float16_fully_blocked_rows_stay_finite():
    network = build_network(config(), dtype="mixed_float16")
    ids, segments, dense = permuted_batch()
    logits, _ = network(ids, segments, np.ones_like(dense["perm_mask"]), dense["target_mapping"], None)
    assert np.isfinite(logits.numpy()).all()
