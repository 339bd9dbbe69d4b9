"""The layers give the same numbers under JAX as under TensorFlow: the hash and dropout bits exactly,
the shifts and gathers exactly, everything computed in float32 to 1e-5.

One child process (support.backends) computes every JAX result, as one jax.jit-compiled function;
this module must therefore not import TensorFlow at module level.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from support.backends import module_level_imports, run_on_backend

# One xdist worker runs the module's tests, so that its module fixtures (a JAX child process) are built once
pytestmark = pytest.mark.xdist_group("layer_backends")

LAYERS = Path(__file__).resolve().parents[3] / "trainer" / "layers"
PORTABLE = ("counter_hash", "dropout", "relative_position", "attention_biases", "feed_forward", "sequence_summary",
            "answer_span")

D_MODEL, D_INNER, RATE = 8, 16, 0.25
ENCODINGS = {"bi": {}, "uni": {"attn_type": "uni"}, "bi_data": {"bi_data": True},
             "clamp_len": {"bi_data": True, "clamp_len": 3}, "dropout": {"dropout": RATE}}
ACTIVATIONS = ("gelu", "gelu_exact")
SEED = np.array([123456789, -42], np.int64)  # TensorFlow's int64 seeds; JAX's are uint32: its low 32 bits


def as_uint32_seed(seed: np.ndarray) -> np.ndarray:
    return (seed & 0xFFFFFFFF).astype(np.uint32)


def make_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(2, 5, D_MODEL)).astype(np.float32)
    return {"counters": rng.integers(0, 2 ** 32, 1000, dtype=np.uint64).astype(np.uint32),
            "x": rng.normal(size=(4, 6, 40)).astype(np.float32),
            "scores": rng.normal(size=(2, 3, 4, 10)).astype(np.float32),
            "positions": np.array([[3, 0], [1, 2]], np.int32),
            "hidden": hidden, "start_states": rng.normal(size=(2, 3, D_MODEL)).astype(np.float32),
            "p_mask": (rng.random((2, 5)) < 0.3).astype(np.float32)}


def build_layers(inputs: dict[str, np.ndarray] | None = None, seed_dtype: str = "int64") -> dict:
    """Every compared layer by name; with ``inputs``, its weights are the ``name/i`` arrays there and its
    dropout generator's state is given, so that both backends draw the same bits."""
    import keras

    from trainer.layers.answer_span import AnswerClass, EndLogits, StartLogits
    from trainer.layers.attention_biases import RelativeAttentionBiases
    from trainer.layers.dropout import HashDropout
    from trainer.layers.feed_forward import PositionwiseFeedForward
    from trainer.layers.relative_position import RelativePositionEncoding
    from trainer.layers.sequence_summary import SequenceSummary

    if inputs is None:
        keras.utils.set_random_seed(0)  # it imports TensorFlow where it is installed: not in the JAX child
    layers = {f"ff_{name}": PositionwiseFeedForward(D_MODEL, D_INNER, activation=name, dropout=RATE)
              for name in ACTIVATIONS}
    layers.update(summary=SequenceSummary(D_MODEL, dropout=RATE), start=StartLogits(D_MODEL),
                  end=EndLogits(D_MODEL), answer=AnswerClass(D_MODEL, dropout=RATE),
                  biases=RelativeAttentionBiases(3, 2, 4), dropout=HashDropout(RATE, seed=7))
    layers.update({f"encoding_{name}": RelativePositionEncoding(D_MODEL, **settings)
                   for name, settings in ENCODINGS.items()})
    if inputs is not None:
        for name, layer in layers.items():
            layer.set_weights([inputs[f"{name}/{i}"] for i in range(len(layer.weights))])
        for name, state in {"summary": (9, 0), "answer": (2, 5), "encoding_dropout": (5, 0)}.items():
            layers[name].dropout.seed_generator.state.assign(backend_seed(state, seed_dtype))
    return layers


def backend_seed(values, seed_dtype: str) -> np.ndarray:
    """A seed [2] in the backend's seed dtype (int64 on TensorFlow, uint32 on JAX)."""
    seed = np.array(values, np.int64)
    return seed if seed_dtype == "int64" else as_uint32_seed(seed)


def compute(layers: dict, inputs: dict[str, np.ndarray], seed_dtype: str) -> dict:
    """Every compared value, on the backend this runs under (TensorFlow here, JAX in the child)."""
    from trainer.layers.counter_hash import hashed_uniform_bits, mix32
    from trainer.layers.relative_position import gather_relative, rel_shift

    seeded = {"seed": backend_seed(SEED, seed_dtype)}
    out = {"mix32": mix32(inputs["counters"]), "bits": hashed_uniform_bits((8, 33, 7), seeded["seed"])}
    dropout = layers["dropout"]
    out.update(dropout_first=dropout(inputs["x"], training=True), dropout_second=dropout(inputs["x"], training=True),
               dropout_seeded=dropout(inputs["x"], training=True, **seeded))
    out["rel_shift"] = rel_shift(inputs["scores"], 6)
    rows = np.take_along_axis(inputs["scores"], inputs["positions"][:, None, :, None], axis=2)
    out["gather_relative"] = gather_relative(rows, inputs["positions"], qlen=4, klen=6)
    out.update({f"encoding_{name}": layers[f"encoding_{name}"](klen=7, qlen=3, training=True) for name in ENCODINGS})
    seeds = (backend_seed((3, 0), seed_dtype), backend_seed((4, 1), seed_dtype))
    out.update({f"ff_{name}": layers[f"ff_{name}"](inputs["hidden"], training=True, seeds=seeds)
                for name in ACTIVATIONS})
    out.update(summary=layers["summary"](inputs["hidden"], training=True),
               start=layers["start"](inputs["hidden"], inputs["p_mask"]),
               end=layers["end"](inputs["hidden"], inputs["start_states"], inputs["p_mask"]),
               answer=layers["answer"](inputs["hidden"][:, 0], inputs["hidden"][:, -1], training=True))
    out.update({f"biases_{key}": value for key, value in layers["biases"](layer_index=1).items()})
    return out


def compute_under_jax(inputs: dict[str, np.ndarray]) -> dict:
    """``compute`` in the child, as one jax.jit-compiled function of the layers' variables (a training
    step's form, and one compilation instead of one per operation and shape)."""
    import jax
    import keras

    layers = build_layers(inputs, "uint32")
    variables = [variable for layer in layers.values() for variable in layer.variables]

    def run(values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return compute(layers, inputs, "uint32")

    out = jax.jit(run)([variable.value for variable in variables])
    return {**out, "tensorflow_imported": np.array("tensorflow" in sys.modules)}


@pytest.fixture(scope="module")
def results():
    """(TensorFlow's results, JAX's results) for the same inputs and weights."""
    import keras

    inputs = make_inputs()
    for name, layer in build_layers().items():
        inputs.update({f"{name}/{i}": weight for i, weight in enumerate(layer.get_weights())})
    jax = run_on_backend(compute_under_jax, inputs)
    tensorflow = compute(build_layers(inputs), inputs, "int64")
    return {key: keras.ops.convert_to_numpy(value) for key, value in tensorflow.items()}, jax


def test_no_portable_layer_module_imports_tensorflow_at_module_level():
    for module in PORTABLE:
        assert "tensorflow" not in module_level_imports(LAYERS / f"{module}.py"), module


@pytest.mark.slow  # one JAX child process: 15-35 s
def test_the_layers_run_under_jax_without_importing_tensorflow(results):
    assert not results[1]["tensorflow_imported"]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["mix32", "bits", "dropout_first", "dropout_second", "dropout_seeded",
                                 "rel_shift", "gather_relative"])
def test_the_hash_dropout_bits_and_the_relative_shifts_are_exactly_equal(results, key):
    tensorflow, jax = results
    assert tensorflow[key].dtype == jax[key].dtype
    np.testing.assert_array_equal(jax[key], tensorflow[key])


@pytest.mark.slow
def test_the_generators_draw_a_new_mask_every_call_on_both_backends(results):
    tensorflow, jax = results
    for out in (tensorflow, jax):
        assert ((out["dropout_first"] == 0) != (out["dropout_second"] == 0)).any()


@pytest.mark.slow
@pytest.mark.parametrize("key", [f"encoding_{name}" for name in ENCODINGS] + [f"ff_{name}" for name in ACTIVATIONS]
                         + ["summary", "start", "end", "answer", "biases_r_w_bias", "biases_r_r_bias",
                            "biases_r_s_bias", "biases_seg_embed"])
def test_float32_layers_agree_to_1e_5(results, key):
    tensorflow, jax = results
    assert tensorflow[key].shape == jax[key].shape and jax[key].dtype == np.float32
    np.testing.assert_allclose(jax[key], tensorflow[key], rtol=1e-5, atol=1e-5)
    if key in ("encoding_dropout", "summary"):  # dropout is their last operation
        assert ((jax[key] == 0) == (tensorflow[key] == 0)).all()  # the same dropped elements


def hash_refusal(inputs):
    """Under a backend the hash has not been checked on: hashed dropout's error, and dropout off still running."""
    import keras

    from tfrecords.errors import UsageError
    from trainer.layers.dropout import HashDropout

    layer = HashDropout(0.1, seed=1)
    try:
        layer(inputs["x"], training=True)
        message = ""
    except UsageError as error:
        message = str(error)
    return {"message": np.array(message), "off": layer(inputs["x"], training=False),
            "backend": np.array(keras.backend.backend())}


@pytest.mark.slow  # a fresh process on Keras's NumPy backend (about 10 s)
def test_a_backend_without_the_hashs_arithmetic_is_refused_in_one_line_naming_it_and_the_operation():
    x = np.ones((4, 8), "float32")
    out = run_on_backend(hash_refusal, {"x": x}, backend="numpy")
    assert str(out["backend"]) == "numpy"
    # One sentence (Keras adds the layer's name and arguments around an error raised in a call).
    assert ("Keras backend 'numpy' lacks the uint32 arithmetic of the counter hash (hashed dropout, permutation "
            "sampling) (trainer/layers/counter_hash.py); use KERAS_BACKEND=tensorflow or jax") in str(out["message"])
    assert "Traceback" not in str(out["message"])
    np.testing.assert_array_equal(out["off"], x)  # without dropout nothing is hashed
