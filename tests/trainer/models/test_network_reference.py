"""The Keras network computes exactly XLNet's equations: matched against tests/support/reference_numpy.py to 1e-5."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.conversion.tf1_checkpoint import assign_original_weights
from trainer.models.config import ModelConfig
from trainer.models.network import build_network
from trainer.models.permutation import dense_inputs

from support import reference_numpy

BATCH, SEQ_LEN, NUM_PREDICT, MEM = 4, 8, 3, 5
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def tiny_config(**changes) -> ModelConfig:
    values = dict(vocab_size=40, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, dropout=0.1, dropatt=0.1,
                  bi_data=False, attn_type="bi", clamp_len=-1, untie_r=True, mem_len=6, reuse_len=4)
    values.update(changes)
    return ModelConfig(**values)


def reference_config(config: ModelConfig) -> dict:
    keys = ("n_layer", "d_model", "n_head", "d_head", "d_inner", "ff_activation", "untie_r", "attn_type", "bi_data",
            "clamp_len", "mem_len", "reuse_len")
    return dict({k: getattr(config, k) for k in keys}, vocab=config.vocab_size)


def network_with_reference_weights(config: ModelConfig, seed: int = 0):
    weights = reference_numpy.random_weights(reference_config(config), seed=seed)
    network = build_network(config)
    assign_original_weights(network, weights)
    return network, weights


def example_inputs(config: ModelConfig, with_memory: bool, seed: int = 1):
    """Token ids, segments (A, B, <cls> as segment 2), a realistic permutation from the on-device
    code (some padded target rows) and optional random memory."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, config.vocab_size, [BATCH, SEQ_LEN]).astype(np.int32)
    ids[:, -3], ids[:, -1] = 4, 3  # <sep>, <cls>
    segments = np.array([[0, 0, 0, 0, 1, 1, 1, 2]] * BATCH, np.int32)
    is_masked = np.zeros([BATCH, SEQ_LEN], bool)
    is_masked[:, [1, 5]] = True
    is_masked[0, 2] = True  # example 0 has 3 targets, the others 2 (+ a padding row)
    dense = dense_inputs(tf.constant(ids), tf.constant(is_masked), tf.constant(rng.integers(0, 999, [BATCH, 2])),
                         reuse_len=4, perm_size=2, num_predict=NUM_PREDICT, sep_id=4, cls_id=3)
    mems = [rng.normal(0, 1, [BATCH, MEM, config.d_model]).astype(np.float32) for _ in range(config.n_layer)] \
        if with_memory else None
    return ids, segments, dense["perm_mask"].numpy(), dense["target_mapping"].numpy(), mems


CASES = {
    "plain": dict(),
    "memory": dict(),
    "bi_data": dict(bi_data=True),
    "bi_data_memory": dict(bi_data=True),
    "clamp_len": dict(clamp_len=3),
    "tied_biases": dict(untie_r=False),
    "uni_attention": dict(attn_type="uni"),
    "relu_no_memory_cache": dict(ff_activation="relu", mem_len=0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_stream_logits_and_memory_match_reference(case):
    config = tiny_config(**CASES[case])
    network, weights = network_with_reference_weights(config)
    ids, segments, perm_mask, target_mapping, mems = example_inputs(config, with_memory="memory" in case)
    content, query, new_mems = network.streams(ids, segments, perm_mask, target_mapping,
                                               None if mems is None else [tf.constant(m) for m in mems])
    logits, _ = network(ids, segments, perm_mask, target_mapping, mems)
    expected = reference_numpy.forward(weights, reference_config(config), ids, segments, perm_mask, target_mapping,
                                       mems)
    np.testing.assert_allclose(content.numpy(), expected["content"], **TOLERANCE)
    np.testing.assert_allclose(query.numpy(), expected["query"], **TOLERANCE)
    np.testing.assert_allclose(logits.numpy(), expected["logits"], **TOLERANCE)
    if config.mem_len == 0:
        assert new_mems is None and expected["new_mems"] is None
    else:
        for ours, theirs in zip(new_mems, expected["new_mems"]):
            np.testing.assert_allclose(ours.numpy(), theirs, **TOLERANCE)


@pytest.mark.parametrize("case", ["bi", "uni", "bi_data_memory"])
def test_content_stream_encode_matches_reference(case):
    config = tiny_config(attn_type="uni" if case == "uni" else "bi", bi_data=case == "bi_data_memory")
    network, weights = network_with_reference_weights(config, seed=3)
    ids, segments, _, _, mems = example_inputs(config, with_memory=case == "bi_data_memory")
    hidden, new_mems = network.encode(ids, segments, mems=mems)
    expected = reference_numpy.forward(weights, reference_config(config), ids, segments, None, None, mems)
    np.testing.assert_allclose(hidden.numpy(), expected["content"], **TOLERANCE)
    for ours, theirs in zip(new_mems, expected["new_mems"]):
        np.testing.assert_allclose(ours.numpy(), theirs, **TOLERANCE)


def test_compiled_with_xla_matches_reference():
    config = tiny_config(bi_data=True)
    network, weights = network_with_reference_weights(config)
    ids, segments, perm_mask, target_mapping, mems = example_inputs(config, with_memory=True)
    compiled = tf.function(lambda *args: network(*args)[0], jit_compile=True)
    logits = compiled(ids, segments, perm_mask, target_mapping, [tf.constant(m) for m in mems])
    expected = reference_numpy.forward(weights, reference_config(config), ids, segments, perm_mask, target_mapping,
                                       mems)
    np.testing.assert_allclose(logits.numpy(), expected["logits"], **TOLERANCE)
