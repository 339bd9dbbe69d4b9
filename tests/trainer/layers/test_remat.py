"""Rematerialisation's building blocks (trainer/layers/remat.py, trainer/layers/dropout.py): a recomputed
region gives the plain function's values and gradients, keeps only its inputs for the backward pass,
and dropout drawn before a region gives the masks a plain call draws."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer.layers import HashDropout, RelativeAttentionBiases, XLNetBlock
from trainer.layers.remat import check_remat, recompute

RNG = np.random.default_rng(0)
X = tf.constant(RNG.normal(size=(3, 5, 8)), tf.float32)
MASK = tf.constant(RNG.random((3, 5, 8)) < 0.3)


def dense_with_mask(layer: keras.layers.Dense):
    def fn(floats, fixed):
        return {"out": tf.where(fixed["mask"], 0.0, layer(floats["x"]) * floats["scale"]), "unused": None}
    return fn


def values_and_gradients(layer, run):
    with tf.GradientTape() as tape:
        tape.watch(X)
        scale = tf.constant(1.5)
        tape.watch(scale)
        out = run({"x": X, "scale": scale}, {"mask": MASK})["out"]
        loss = tf.reduce_sum(tf.sin(out))
    return [out] + tape.gradient(loss, [X, scale] + layer.trainable_variables)


@pytest.mark.parametrize("wrap", [lambda f: f(), lambda f: tf.function(f)()], ids=["eager", "tf.function"])
def test_a_recomputed_region_gives_the_values_and_gradients_of_the_plain_function(wrap):
    layer = keras.layers.Dense(8)
    layer.build((None, 8))
    fn = dense_with_mask(layer)
    plain = wrap(lambda: values_and_gradients(layer, fn))
    recomputed = wrap(lambda: values_and_gradients(layer, lambda floats, fixed: recompute(fn, floats, fixed)))
    assert len(recomputed) == 5  # the output, x, scale, kernel and bias: the variables read inside get gradients
    for want, got in zip(plain, recomputed):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_none_outputs_of_a_region_stay_none():
    out = recompute(lambda floats, fixed: (floats * 2.0, None), X)
    assert out[1] is None
    np.testing.assert_array_equal(out[0].numpy(), X.numpy() * 2.0)


def backward_inputs_from_the_forward_pass(fn) -> list[tf.Tensor]:
    """The forward pass's tensors the backward pass of ``fn`` (a loss of X) reads, in its graph."""
    forward_ops = []

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(X)
            loss = fn(X)
        forward_ops.append(len(tf.compat.v1.get_default_graph().get_operations()))
        return tape.gradient(loss, X)

    graph = step.get_concrete_function().graph
    operations = graph.get_operations()
    forward = {op.name for op in operations[:forward_ops[-1]]}
    return [t for op in operations[forward_ops[-1]:] for t in op.inputs
            if t.op.name in forward and t.op.type not in ("Const", "Placeholder")]


def test_the_backward_pass_of_a_region_reads_only_its_inputs():
    def chain(x):
        return tf.reduce_sum(tf.exp(tf.tanh(x) * 3.0))

    plain = {t.op.type for t in backward_inputs_from_the_forward_pass(chain)}
    assert {"Tanh", "Exp"} <= plain  # what the plain chain's gradient keeps
    kept = backward_inputs_from_the_forward_pass(lambda x: tf.reduce_sum(recompute(lambda f, _: tf.exp(tf.tanh(f) * 3.0), x)))
    assert not {"Tanh", "Exp", "Mul"} & {t.op.type for t in kept}


def test_an_explicit_seed_gives_the_mask_the_generator_would_draw():
    drawn, plain = HashDropout(0.3, seed=7), HashDropout(0.3, seed=7)
    seed = drawn.draw_seed(training=True)
    np.testing.assert_array_equal(drawn(X, training=True, seed=seed).numpy(), plain(X, training=True).numpy())
    # the generator advanced once, as for one call: the next masks agree too
    np.testing.assert_array_equal(drawn(X, training=True).numpy(), plain(X, training=True).numpy())
    assert drawn.draw_seed(training=False) is None and HashDropout(0.0).draw_seed(training=True) is None


def test_dynamic_shapes_with_an_explicit_seed_drop_as_keras_dropout_does():
    layer = HashDropout(0.4, seed=3)
    generator = keras.random.SeedGenerator(3)

    @tf.function(input_signature=[tf.TensorSpec([None, 5, 8], tf.float32)])
    def ours(x):
        return layer(x, training=True, seed=layer.draw_seed(training=True))

    @tf.function(input_signature=[tf.TensorSpec([None, 5, 8], tf.float32)])
    def keras_way(x):
        return keras.random.dropout(x, 0.4, seed=generator)

    np.testing.assert_array_equal(ours(X).numpy(), keras_way(X).numpy())


def test_a_block_draws_its_seeds_in_the_order_of_a_plain_call():
    blocks = {}
    for mode in ("none", "full"):
        keras.utils.set_random_seed(4)
        blocks[mode] = XLNetBlock(8, 2, 4, 16, dropout=0.1, dropatt=0.1, remat=mode)
    pos_emb = tf.constant(RNG.normal(size=(1, 10, 8)), tf.float32)
    g = tf.constant(RNG.normal(size=(3, 2, 8)), tf.float32)
    biases = RelativeAttentionBiases(1, 2, 4)(layer_index=0)
    outputs = {mode: block(X, g, training=True, pos_emb=pos_emb, query_positions=tf.constant([[0, 4]] * 3), **biases)
               for mode, block in blocks.items()}
    for want, got in zip(outputs["none"], outputs["full"]):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    states = {mode: [v.numpy() for v in block.non_trainable_variables] for mode, block in blocks.items()}
    assert len(states["none"]) == 4  # attention probabilities, attention output, feed-forward inner and output
    for want, got in zip(states["none"], states["full"]):
        np.testing.assert_array_equal(got, want)


def test_an_unknown_remat_mode_is_refused_naming_the_three():
    with pytest.raises(ValueError, match="none, attention, full.*'partial'"):
        check_remat("partial")
    with pytest.raises(ValueError, match="remat must be one of"):
        XLNetBlock(8, 2, 4, 16, remat="layers")


def test_a_region_whose_input_is_not_finite_gives_nan_not_an_index_error():
    # the region's integer inputs wait for its first element (nan * 0 is nan): they become zeros, so
    # that a diverged run stops at the controller's finite-loss check rather than in a gather
    x = tf.constant([[np.nan, 1.0, 2.0]])
    gathered = recompute(lambda floats, fixed: tf.gather(floats, fixed, batch_dims=1), x, tf.constant([[2, 1]]))
    assert np.isnan(gathered.numpy()).all()
