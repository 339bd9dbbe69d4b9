"""Two-stream attention, the XLNet block and its remat modes give the same numbers under JAX as under
TensorFlow (float32, to 1e-5), and on each backend every remat mode gives the gradients of ``none``.

One child process (support.backends) computes every JAX result; this module must therefore not import
TensorFlow at module level.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support.backends import module_level_imports, run_on_backend

# One xdist worker runs the module's tests, so that its module fixtures (a JAX child process) are built once
pytestmark = pytest.mark.xdist_group("attention_backends")

LAYERS = Path(__file__).resolve().parents[3] / "trainer" / "layers"
PORTABLE = ("attention", "transformer_block", "remat")

D_MODEL, N_HEAD, D_HEAD, D_INNER = 16, 2, 8, 32
B, L, M, P = 4, 6, 4, 3  # batch (even: bi_data), segment, memory, query rows
K = M + L
RATE = 0.25
MODES = ("none", "attention", "full")
BIASES = {"r_w_bias": (N_HEAD, D_HEAD), "r_r_bias": (N_HEAD, D_HEAD), "r_s_bias": (N_HEAD, D_HEAD),
          "seg_embed": (2, N_HEAD, D_HEAD)}
# Every attention call's inputs besides h and g, by case: all of them, bi_data without memory, masks or
# segments, and the content stream alone.
CASES = {"everything": ("pos_emb", "mem", "content_mask", "query_mask", "query_positions", "query_valid",
                        "content_segment_diff", "query_segment_diff"),
         "bi_data": ("pos_emb_bi_data", "query_positions"),
         "content_only": ("pos_emb", "mem", "content_mask", "content_segment_diff")}


def as_seed(values: tuple[int, int], seed_dtype: str) -> np.ndarray:
    """A SeedGenerator state on a backend: TensorFlow's int64, JAX's uint32 (its low 32 bits)."""
    seed = np.array(values, np.int64)
    return seed if seed_dtype == "int64" else (seed & 0xFFFFFFFF).astype(np.uint32)


def make_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    normal = lambda *shape, scale=1.0: (rng.normal(size=shape) * scale).astype(np.float32)  # noqa: E731
    inputs = {"h": normal(B, L, D_MODEL), "g": normal(B, P, D_MODEL), "mem": normal(B, M, D_MODEL),
              "pos_emb": normal(1, K + L, D_MODEL), "pos_emb_bi_data": normal(2, L + L, D_MODEL),
              "content_mask": rng.random((B, L, K)) < 0.3, "query_mask": rng.random((B, P, K)) < 0.3,
              "query_positions": np.stack([rng.permutation(L)[:P] for _ in range(B)]).astype(np.int32),
              "query_valid": np.array([[1, 1, 0]] + [[1, 1, 1]] * (B - 1), np.float32),
              "content_segment_diff": rng.random((B, L, K)) < 0.5, "query_segment_diff": rng.random((B, P, K)) < 0.5}
    inputs.update({name: normal(*shape, scale=0.4) for name, shape in BIASES.items()})
    # a decoder's cache: rows at these positions attend keys 0..L-1 projected before, in two parts
    inputs["row_positions"] = np.array([[3, 5]] * B, np.int32)
    inputs["blocked"] = np.arange(L)[None, None, :] > inputs["row_positions"][:, :, None]
    return inputs


def build_block(keras_module, inputs: dict | None = None, remat: str = "none", dropout: float = 0.0):
    """The block, its trainable weights ``block/i`` from ``inputs`` when given (else seeded initial ones)."""
    from trainer.layers.transformer_block import XLNetBlock

    if inputs is None:
        keras_module.utils.set_random_seed(1)  # (it imports TensorFlow: only the TensorFlow side draws weights)
    block = XLNetBlock(D_MODEL, N_HEAD, D_HEAD, D_INNER, dropout=dropout, dropatt=dropout, remat=remat)
    block.build(None)  # its sublayers are: stateless_call asks for the block's flag too
    if inputs is not None:
        for i, variable in enumerate(block.trainable_variables):
            variable.assign(inputs[f"block/{i}"])
    return block


def seed_generators(block, seed_dtype: str) -> None:
    """Every dropout generator of ``block`` at a fixed state, the same on both backends."""
    generators = [v for v in block.non_trainable_variables if "seed_generator" in v.path]
    assert len(generators) == 4
    for i, state in enumerate(generators):
        state.assign(as_seed((11 + i, 3), seed_dtype))


def attention_kwargs(inputs: dict, case: str) -> dict:
    kwargs = {name: inputs[name] for name in CASES[case]}
    if "pos_emb_bi_data" in kwargs:
        kwargs["pos_emb"] = kwargs.pop("pos_emb_bi_data")
    return {**kwargs, **{name: inputs[name] for name in BIASES}}


def forward(inputs: dict, seed_dtype: str) -> dict:
    """Every compared forward value, on the backend this runs under (TensorFlow here, JAX in the child)."""
    import keras

    inputs = {name: keras.ops.convert_to_tensor(value) for name, value in inputs.items()}

    block = build_block(keras, inputs)
    out = {}
    for case in CASES:
        g = None if case == "content_only" else inputs["g"]
        h_out, g_out = block.attention(inputs["h"], g, **attention_kwargs(inputs, case))
        out[f"{case}/h"] = h_out
        if g_out is not None:
            out[f"{case}/g"] = g_out
    out["block/h"], out["block/g"] = block(inputs["h"], inputs["g"], **attention_kwargs(inputs, "everything"))
    dropped = build_block(keras, inputs, dropout=RATE)
    seed_generators(dropped, seed_dtype)
    out["block_dropout/h"], out["block_dropout/g"] = dropped(inputs["h"], inputs["g"], training=True,
                                                             **attention_kwargs(inputs, "everything"))
    # the cache: keys and values of the segment in two parts, positions 0..L-1, distances L..0
    attention = block.attention
    keys, values = attention.project_keys_values(inputs["h"])
    position_keys = attention.project_positions(inputs["pos_emb"][:, :L + 1])  # as if distances L .. 0
    out["cached"] = block.cached_step(inputs["g"][:, :2], (keys[:, :, :4], keys[:, :, 4:]),
                                      (values[:, :, :4], values[:, :, 4:]), position_keys, inputs["row_positions"],
                                      inputs["blocked"], None, **{name: inputs[name] for name in BIASES})
    return out


def loss_of(h_out, g_out):
    from keras import ops

    return ops.sum(ops.sin(h_out)) + ops.sum(ops.cos(g_out))


def tensorflow_gradients(inputs: dict) -> dict:
    """Per remat mode, with dropout: the loss and the gradients of the block's weights, h and g (tf.GradientTape)."""
    import keras
    import tensorflow as tf

    inputs = {name: tf.constant(value) for name, value in inputs.items()}
    out = {}
    for mode in MODES:
        block = build_block(keras, inputs, mode, RATE)
        seed_generators(block, "int64")
        h, g = inputs["h"], inputs["g"]
        with tf.GradientTape() as tape:
            tape.watch([h, g])
            loss = loss_of(*block(h, g, training=True, **attention_kwargs(inputs, "everything")))
        grads = tape.gradient(loss, block.trainable_variables + [h, g])
        out[f"{mode}/loss"] = loss.numpy()
        out.update({f"{mode}/grad{i}": tf.convert_to_tensor(grad).numpy() for i, grad in enumerate(grads)})
    return out


def jax_gradients(inputs: dict) -> dict:
    """``tensorflow_gradients`` under JAX: the block's stateless_call under jax.grad, jitted."""
    import jax
    import keras

    inputs = {name: keras.ops.convert_to_tensor(value) for name, value in inputs.items()}
    out = {}
    for mode in MODES:
        block = build_block(keras, inputs, mode, RATE)
        seed_generators(block, "uint32")
        trainable = [v.value for v in block.trainable_variables]
        non_trainable = [v.value for v in block.non_trainable_variables]
        kwargs = attention_kwargs(inputs, "everything")

        def loss_fn(trainable, h, g):
            outputs, _ = block.stateless_call(trainable, non_trainable, h, g, training=True, **kwargs)
            return loss_of(*outputs)

        loss, (weights, h, g) = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1, 2)))(
            trainable, inputs["h"], inputs["g"])
        out[f"{mode}/loss"] = loss
        out.update({f"{mode}/grad{i}": grad for i, grad in enumerate(list(weights) + [h, g])})
    return out


def jax_region(inputs: dict) -> dict:
    """trainer/layers/remat.recompute under JAX: the gradients of the plain function, none to its fixed inputs."""
    import jax
    from keras import ops

    from trainer.layers.remat import recompute

    def fn(floats, fixed):
        return {"out": ops.tanh(floats["x"] * fixed["mem"][:, :1]) * fixed["mask"][:, :1, :1], "unused": None}

    def loss(x, mem, run):
        return ops.sum(run({"x": x}, {"mem": mem, "mask": ops.ones_like(mem)})["out"])

    arguments = (inputs["h"][:, :M], inputs["mem"])
    plain = jax.grad(loss, argnums=(0, 1))(*arguments, fn)
    recomputed = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(
        *arguments, lambda floats, fixed: recompute(fn, floats, fixed))
    return {"plain/x": plain[0], "plain/mem": plain[1], "recomputed/x": recomputed[0], "recomputed/mem": recomputed[1]}


def compute_under_jax(inputs: dict) -> dict:
    """Everything the JAX side computes, in one child; also whether TensorFlow got imported on the way."""
    import sys

    import trainer.layers  # noqa: F401  (every layer module)

    out = {f"forward/{key}": value for key, value in forward(inputs, "uint32").items()}
    out.update({f"grads/{key}": value for key, value in jax_gradients(inputs).items()})
    out.update({f"region/{key}": value for key, value in jax_region(inputs).items()})
    out["tensorflow_imported"] = np.array("tensorflow" in sys.modules)
    return out


@pytest.fixture(scope="module")
def results():
    """(TensorFlow's results, JAX's results) for the same inputs and weights."""
    import keras

    inputs = make_inputs()
    inputs.update({f"block/{i}": keras.ops.convert_to_numpy(variable)
                   for i, variable in enumerate(build_block(keras).trainable_variables)})
    jax = run_on_backend(compute_under_jax, inputs)
    tensorflow = {f"forward/{key}": keras.ops.convert_to_numpy(value)
                  for key, value in forward(inputs, "int64").items()}
    tensorflow.update({f"grads/{key}": value for key, value in tensorflow_gradients(inputs).items()})
    return tensorflow, jax


def test_the_ported_modules_import_no_tensorflow_at_module_level():
    for module in PORTABLE:
        assert "tensorflow" not in module_level_imports(LAYERS / f"{module}.py"), module


@pytest.mark.slow  # one JAX child process (about 30 s) and the TensorFlow side
def test_jax_runs_the_layers_without_importing_tensorflow(results):
    _, jax = results
    assert not jax["tensorflow_imported"]


FORWARD = [f"{case}/{stream}" for case in CASES for stream in ("h", "g") if (case, stream) != ("content_only", "g")]


@pytest.mark.slow
@pytest.mark.parametrize("key", FORWARD + ["block/h", "block/g", "block_dropout/h", "block_dropout/g", "cached"])
def test_attention_and_the_block_agree_to_1e_5(results, key):
    tensorflow, jax = results
    want, got = tensorflow[f"forward/{key}"], jax[f"forward/{key}"]
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_every_remat_mode_gives_the_gradients_of_tensorflow(results, mode):
    tensorflow, jax = results
    keys = sorted(key for key in tensorflow if key.startswith(f"grads/{mode}/"))
    assert len(keys) == len([key for key in jax if key.startswith(f"grads/{mode}/")]) > 3
    for key in keys:
        np.testing.assert_allclose(jax[key], tensorflow[key], rtol=1e-5, atol=1e-5, err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
@pytest.mark.parametrize("mode", ["attention", "full"])
def test_on_each_backend_every_remat_mode_gives_the_gradients_of_none(results, backend, mode):
    got = results[backend == "jax"]
    for key in sorted(key for key in got if key.startswith("grads/none/")):
        np.testing.assert_allclose(got[key.replace("/none/", f"/{mode}/")], got[key], rtol=1e-6, atol=1e-6,
                                   err_msg=key)


@pytest.mark.slow
def test_a_recomputed_region_under_jax_gives_the_plain_gradients_and_none_to_its_fixed_inputs(results):
    _, jax = results
    np.testing.assert_allclose(jax["region/recomputed/x"], jax["region/plain/x"], rtol=1e-6, atol=1e-6)
    assert np.abs(jax["region/plain/mem"]).max() > 0  # the plain function's memory has a gradient
    np.testing.assert_array_equal(jax["region/recomputed/mem"], 0.0)  # the region's fixed memory has none
