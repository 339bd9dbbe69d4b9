"""The optimizer (trainer/runtime/optimization.py): layer-wise learning-rate decay (the factor of each
variable and its effect on one optimizer step), the schedules, and which variables weight decay skips."""
from __future__ import annotations

import keras
import numpy as np
import pytest

from trainer.configs.training import TrainConfig
from trainer.models.config import model_preset
from trainer.models.network import build_network
from trainer.runtime.optimization import (
    PerVariableLRAdamW,
    build_optimizer,
    layer_decay_multipliers,
    learning_rate_schedule,
    no_decay_variables,
    variable_key,
)

# No warm-up, so the first step already uses the full learning rate (at step 0 warm-up gives 0);
# weight decay on, so the test also covers the decoupled decay term.
CONFIG = TrainConfig(learning_rate=1e-2, warmup_steps=0, train_steps=10, weight_decay=0.01)


@pytest.fixture(scope="module")
def network():
    """A 3-layer tiny network with a small vocabulary (the embedding dominates the step time)."""
    keras.utils.set_random_seed(0)
    return build_network(model_preset("tiny").replace(n_layer=3, vocab_size=100))


@pytest.fixture(scope="module")
def gradients(network) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(size=v.shape).astype(np.float32) for v in network.trainable_variables]


# The deltas are differences of float32 weights, so they carry a rounding error of about
# eps32·|w| / |delta| = 6e-8·1 / 2.5e-3 ≈ 2.4e-5 relative (LayerNorm scales of 1 on layer 0).
RTOL = 1e-4


def one_step_deltas(network, gradients, lr_multipliers=None) -> list[np.ndarray]:
    """How much one step of a fresh optimizer moves each variable; the weights are restored after."""
    variables = network.trainable_variables
    before = [v.numpy() for v in variables]
    build_optimizer(CONFIG, variables, lr_multipliers).apply(gradients, variables)
    deltas = [v.numpy() - start for v, start in zip(variables, before)]
    for v, start in zip(variables, before):
        v.assign(start)
    return deltas


def test_layer_l_of_n_gets_rate_to_the_power_n_minus_1_minus_l(network):
    multipliers = layer_decay_multipliers(network, 0.5)
    for block, factor in zip(network.blocks, (0.25, 0.5, 1.0)):
        assert {multipliers[variable_key(v)] for v in block.trainable_variables} == {factor}


def test_embeddings_and_stacked_attention_biases_keep_factor_one(network):
    multipliers = layer_decay_multipliers(network, 0.5)
    outside = [network.word_embedding.embeddings, network.mask_emb, *network.attention_biases.trainable_variables]
    assert [multipliers[variable_key(v)] for v in outside] == [1.0] * len(outside)
    assert len(multipliers) == len(network.trainable_variables)


def test_a_step_moves_each_variable_by_its_factor_times_the_plain_step(network, gradients):
    multipliers = layer_decay_multipliers(network, 0.5)
    plain = one_step_deltas(network, gradients)
    decayed = one_step_deltas(network, gradients, multipliers)
    layer_0_kernel = network.blocks[0].attention.q_kernel
    index = [variable_key(v) for v in network.trainable_variables].index(variable_key(layer_0_kernel))
    np.testing.assert_allclose(decayed[index], 0.25 * plain[index], rtol=RTOL)
    for variable, with_factor, without in zip(network.trainable_variables, decayed, plain):
        np.testing.assert_allclose(with_factor, multipliers[variable_key(variable)] * without, rtol=RTOL,
                                   atol=1e-9, err_msg=variable.path)


def test_rate_one_gives_byte_identical_updates_to_the_plain_optimizer(network, gradients):
    plain = one_step_deltas(network, gradients)
    undecayed = one_step_deltas(network, gradients, layer_decay_multipliers(network, 1.0))
    for with_factor, without in zip(undecayed, plain):
        np.testing.assert_array_equal(with_factor, without)


def test_variables_without_a_multiplier_keep_the_full_learning_rate(network, gradients):
    kernel = network.blocks[0].attention.q_kernel
    deltas = one_step_deltas(network, gradients, {variable_key(kernel): 0.5})
    plain = one_step_deltas(network, gradients)
    for variable, with_factor, without in zip(network.trainable_variables, deltas, plain):
        factor = 0.5 if variable is kernel else 1.0
        np.testing.assert_allclose(with_factor, factor * without, rtol=RTOL, atol=1e-9, err_msg=variable.path)


def test_multipliers_for_variables_not_optimised_are_refused(network):
    other = build_network(model_preset("tiny").replace(n_layer=1, vocab_size=100))
    with pytest.raises(ValueError, match="variables the optimizer does not update"):
        build_optimizer(CONFIG, network.trainable_variables, layer_decay_multipliers(other, 0.5))


def test_non_positive_rate_is_refused(network):
    with pytest.raises(ValueError, match="must be positive"):
        layer_decay_multipliers(network, 0.0)


def test_config_round_trips_the_multipliers(network):
    optimizer = build_optimizer(CONFIG, network.trainable_variables, layer_decay_multipliers(network, 0.5))
    restored = PerVariableLRAdamW.from_config(optimizer.get_config())
    assert restored.learning_rate_multipliers == optimizer.learning_rate_multipliers
    assert sorted(set(restored.learning_rate_multipliers)) == [0.25, 0.5, 1.0]


# ------------------------------------------------------------------------------ schedules and decay
def test_learning_rate_warms_up_linearly_then_decays_linearly_to_the_end():
    schedule = learning_rate_schedule(TrainConfig(learning_rate=1e-3, warmup_steps=10, train_steps=110,
                                                  end_learning_rate=1e-4))
    values = [float(schedule(step)) for step in (0, 5, 10, 60, 110)]
    np.testing.assert_allclose(values, [0.0, 5e-4, 1e-3, 5.5e-4, 1e-4], rtol=1e-5, atol=1e-9)


def test_cosine_decay_reaches_the_midpoint_half_way():
    schedule = learning_rate_schedule(TrainConfig(learning_rate=1e-3, warmup_steps=10, train_steps=110,
                                                  decay="cosine", end_learning_rate=0.0))
    np.testing.assert_allclose([float(schedule(10)), float(schedule(60)), float(schedule(110))],
                               [1e-3, 5e-4, 0.0], rtol=1e-5, atol=1e-9)


def test_weight_decay_skips_layer_norm_and_biases_only():
    from trainer.models.network import build_network

    network = build_network(model_preset("tiny").replace(n_layer=1))
    optimizer = build_optimizer(TrainConfig(), network.trainable_variables)
    excluded = {v.path for v in no_decay_variables(network.trainable_variables)}
    decayed = {v.path for v in network.trainable_variables if optimizer._use_weight_decay(v)}
    assert excluded and decayed and not excluded & decayed
    assert all("norm" in p.lower() or "bias" in p.lower() for p in excluded)
    assert any("embedding" in p for p in decayed) and any("kernel" in p for p in decayed)
