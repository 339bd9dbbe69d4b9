"""The network, the permutation LM objective and the heads on JAX: no TensorFlow loaded, and
TensorFlow's numbers (issue 37: same weights, same inputs, float32 on the CPU, to 1e-5).

TensorFlow computes in the test process, JAX in one child process for every case
(support/backends.py). Both run :func:`compute_cases`, so this module imports no TensorFlow at
module level: the child imports it under JAX.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from support.backends import run_on_backend
from support.bundled_data import REPO

# One xdist worker runs the module's tests, so that its module fixture (both backends' runs, about
# two minutes) is built once
pytestmark = pytest.mark.xdist_group("model_backends")

# The modules issue 37 makes portable: trainer/layers/ and the network, objective and heads.
PORTABLE_MODULES = (
    "trainer.layers", "trainer.layers.answer_span", "trainer.layers.attention", "trainer.layers.attention_biases",
    "trainer.layers.counter_hash", "trainer.layers.dropout", "trainer.layers.feed_forward",
    "trainer.layers.relative_position", "trainer.layers.remat", "trainer.layers.sequence_summary",
    "trainer.layers.transformer_block",
    "trainer.models", "trainer.models.backend_ops", "trainer.models.config", "trainer.models.head_spec",
    "trainer.models.heads", "trainer.models.natural_order", "trainer.models.network", "trainer.models.permutation",
    "trainer.models.pretrainer", "trainer.models.question_answering", "trainer.models.sequence_model",
)

SPECIAL = {"sep": 4, "cls": 3}
BATCH, SEQ_LEN, NUM_PREDICT, PERM_SIZE, MEM_LEN = 4, 8, 3, 4, 6
# name -> config changes, and whether the inputs have a memory, padding, and dropout (training); the
# remat cases recompute the "dropout" case (its weights, inputs and seeds).
DROPOUT = {"config": {"dropout": 0.1, "dropatt": 0.1}, "memory": True, "input_mask": True, "training": True}
CASES = {
    "plain": {},
    "bi_data_clamp_len": {"config": {"bi_data": True, "clamp_len": 3}},
    "memory": {"memory": True},
    "input_mask": {"input_mask": True},
    "everything": {"config": {"bi_data": True, "clamp_len": 3}, "memory": True, "input_mask": True},
    "dropout": DROPOUT,
    "remat_attention": {**DROPOUT, "remat": "attention", "like": "dropout"},
    "remat_full": {**DROPOUT, "remat": "full", "like": "dropout"},
}
TARGETS = ("perm_mask", "target_positions", "target_valid", "target")
EXACT_OUTPUTS = (*TARGETS, "start_top_index", "end_top_index")
SEGMENTS, OPTIONS = 2, 2


def model_config(case: str) -> Any:
    from trainer.models.config import model_preset

    return model_preset("tiny").replace(vocab_size=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32,
                                        mem_len=MEM_LEN, reuse_len=4, **CASES[case].get("config", {}))


def case_inputs(case: str, seed: int) -> dict[str, np.ndarray]:
    """The inputs of one case: compact pretraining features, and memory and padding where the case has them."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 50, [BATCH, SEQ_LEN])
    ids[:, -2], ids[:, -1] = SPECIAL["sep"], SPECIAL["cls"]
    inputs = {"input_ids": ids.astype(np.int32),
              "segment_ids": np.repeat([[0] * (SEQ_LEN - 4) + [1, 1, 1, 2]], BATCH, 0).astype(np.int32),
              "is_masked": rng.random([BATCH, SEQ_LEN]) < 0.4,
              "perm_seed": rng.integers(0, 2 ** 31 - 1, [BATCH, 2]).astype(np.int32)}
    if CASES[case].get("memory"):
        inputs["mems"] = rng.normal(size=[2, BATCH, MEM_LEN, 16]).astype(np.float32)
        inputs["mem_mask"] = (np.arange(MEM_LEN)[None, :] >= rng.integers(0, 3, [BATCH, 1])).astype(np.int32)
    if CASES[case].get("input_mask"):
        inputs["input_mask"] = (np.arange(SEQ_LEN)[None, :] >= np.array([[0], [2], [1], [3]])).astype(np.int32)
    return inputs


def _load(variables: list, weights: list[np.ndarray]) -> None:
    """Every variable (the dropout seeds' states too) from ``weights``, in the same order."""
    for variable, value in zip(variables, weights, strict=True):
        variable.assign(np.asarray(value).astype(variable.dtype))


def _loss_and_gradients(pretrainer: Any, features: dict, mems: Any, training: bool) -> tuple[dict, list]:
    """pretrainer.compute's outputs and the gradient of its loss for every trainable variable."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            outputs = pretrainer.compute(features, mems, training=training)
        gradients = tape.gradient(outputs["loss"], pretrainer.trainable_variables)
        return outputs, [tf.convert_to_tensor(gradient) for gradient in gradients]
    import jax

    fixed = [variable.value for variable in pretrainer.non_trainable_variables]

    def loss(trainable):
        outputs, _ = pretrainer.stateless_call(trainable, fixed, features, mems, training=training)
        return outputs["loss"], outputs

    (_, outputs), gradients = jax.value_and_grad(loss, has_aux=True)(
        [variable.value for variable in pretrainer.trainable_variables])
    return outputs, gradients


def compute_case(case: str, inputs: dict[str, np.ndarray], weights: list[np.ndarray]) -> dict[str, Any]:
    """One case on the running backend: the streams, ``encode``, and the pretraining loss and its
    gradients, each from the same weights and dropout seeds."""
    import keras
    from keras import ops

    from trainer.models.pretrainer import XLNetPretrainer

    pretrainer = XLNetPretrainer(model_config(case), SEQ_LEN, NUM_PREDICT, PERM_SIZE, SPECIAL,
                                 remat=CASES[case].get("remat", "none"))
    network, training = pretrainer.network, CASES[case].get("training", False)
    features = {name: ops.convert_to_tensor(inputs[name])
                for name in ("input_ids", "segment_ids", "is_masked", "perm_seed")}
    mems = None if "mems" not in inputs else [ops.convert_to_tensor(mem) for mem in inputs["mems"]]
    input_mask, mem_mask = inputs.get("input_mask"), inputs.get("mem_mask")
    results = {}

    _load(pretrainer.variables, weights)
    targets = pretrainer.targets_from_compact(features)
    results.update({name: targets[name] for name in TARGETS})
    content, query, new_mems = network.streams(features["input_ids"], features["segment_ids"], targets["perm_mask"],
                                               mems=mems, input_mask=input_mask,
                                               target_positions=targets["target_positions"],
                                               target_valid=targets["target_valid"], training=training)
    results.update(content=content, query=query, logits=network.logits(query))
    results.update({f"new_mems_{i}": mem for i, mem in enumerate(new_mems)})

    _load(pretrainer.variables, weights)
    hidden, encoded_mems = network.encode(features["input_ids"], features["segment_ids"], input_mask, mems,
                                          training, mem_mask)
    results["hidden"] = hidden
    results.update({f"encoded_mems_{i}": mem for i, mem in enumerate(encoded_mems)})

    _load(pretrainer.variables, weights)
    outputs, gradients = _loss_and_gradients(pretrainer, features, mems, training)
    results.update(loss=outputs["loss"], loss_logits=outputs["logits"])
    results.update({f"loss_mems_{i}": mem for i, mem in enumerate(outputs["new_mems"])})
    results.update({f"gradient_{i}": gradient for i, gradient in enumerate(gradients)})
    return {name: keras.ops.convert_to_numpy(value) for name, value in results.items()}


def build_heads() -> tuple[Any, Any, list]:
    """(a multiple-choice XLNetForSequenceTask, an XLNetForQuestionAnswering) over one network, and
    their variables in one order."""
    from trainer.models.network import build_network
    from trainer.models.question_answering import XLNetForQuestionAnswering
    from trainer.models.sequence_model import XLNetForSequenceTask

    network = build_network(model_config("plain"))
    choice = XLNetForSequenceTask(network, "multiple-choice")
    answers = XLNetForQuestionAnswering(network, start_n_top=2, end_n_top=2)
    own = [layer.variables for layer in (answers.start_logits, answers.end_logits, answers.answer_class)]
    return choice, answers, choice.variables + [variable for variables in own for variable in variables]


def heads_inputs(seed: int) -> dict[str, np.ndarray]:
    """Left-padded rows with <cls> last: options read over segments, and SQuAD features."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(10, 50, [BATCH, OPTIONS, SEGMENTS, SEQ_LEN]).astype(np.int32)
    ids[..., -1] = SPECIAL["cls"]
    mask = np.ones_like(ids)
    mask[:, :, 0, :3] = 0  # the first segment of every option starts with padding
    starts = rng.integers(3, SEQ_LEN - 1, [BATCH])
    return {"choice_input_ids": ids, "choice_segment_ids": np.zeros_like(ids), "choice_input_mask": mask,
            "labels": rng.integers(0, OPTIONS, [BATCH]).astype(np.int32),
            "input_ids": ids[:, 0, 1], "segment_ids": np.repeat([[0] * 3 + [1] * (SEQ_LEN - 3)], BATCH, 0),
            "input_mask": (np.arange(SEQ_LEN)[None, :] >= np.array([[0], [2], [1], [0]])).astype(np.int32),
            "p_mask": np.repeat([[1.0] * 3 + [0.0] * (SEQ_LEN - 4) + [1.0]], BATCH, 0).astype(np.float32),
            "start_positions": starts.astype(np.int32), "end_positions": (starts + 1).astype(np.int32),
            "is_impossible": np.array([0, 1, 0, 0], np.float32)}


def compute_heads(inputs: dict[str, np.ndarray], weights: list[np.ndarray]) -> dict[str, Any]:
    """The fine-tuning heads on the running backend: multiple choice over segments (the memory
    recurrence) with its loss, and question answering's beam, teacher-forced outputs and losses."""
    import keras

    from trainer.models.question_answering import squad_losses
    from trainer.models.sequence_model import task_loss

    choice, answers, variables = build_heads()
    _load(variables, weights)
    logits = choice({name: inputs[f"choice_{name}"] for name in ("input_ids", "segment_ids", "input_mask")})
    results = {"choice_logits": logits, "choice_loss": task_loss("multiple-choice", logits, inputs["labels"])}
    features = {name: inputs[name] for name in ("input_ids", "segment_ids", "input_mask", "p_mask")}
    results.update(answers(features))
    taught = answers({**features, "start_positions": inputs["start_positions"]})
    results.update({f"taught_{name}": value for name, value in taught.items()})
    results["squad_losses"] = squad_losses(taught, inputs["start_positions"], inputs["end_positions"],
                                           inputs["is_impossible"])
    return {name: keras.ops.convert_to_numpy(value) for name, value in results.items()}


def _case_arrays(inputs: dict[str, np.ndarray], case: str) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """The inputs ``{case}__{name}`` of one case, and its weights ``{case}__weight_{i}`` in order."""
    mine = {name.split("__", 1)[1]: value for name, value in inputs.items() if name.startswith(f"{case}__")}
    count = sum(1 for name in mine if name.startswith("weight_"))
    return mine, [mine.pop(f"weight_{i}") for i in range(count)]


def compute_cases(inputs: dict[str, np.ndarray], cases: list[str]) -> dict[str, Any]:
    """Every case (and "heads") on the running backend, from the inputs and weights
    ``tensorflow_cases`` wrote -> outputs ``{case}__{name}``."""
    results = {}
    for case in cases:
        compute = compute_heads if case == "heads" else functools.partial(compute_case, case)
        results.update({f"{case}__{name}": value for name, value in compute(*_case_arrays(inputs, case)).items()})
    return results


def tensorflow_cases() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(inputs with the weights of a freshly built network per case, TensorFlow's outputs)."""
    import keras

    from trainer.models.pretrainer import XLNetPretrainer

    inputs = {}
    for case in CASES:
        index = list(CASES).index(CASES[case].get("like", case))
        keras.utils.set_random_seed(index)
        pretrainer = XLNetPretrainer(model_config(case), SEQ_LEN, NUM_PREDICT, PERM_SIZE, SPECIAL)
        inputs.update({f"{case}__{name}": value for name, value in case_inputs(case, index).items()})
        inputs.update({f"{case}__weight_{i}": keras.ops.convert_to_numpy(variable.value)
                       for i, variable in enumerate(pretrainer.variables)})
    keras.utils.set_random_seed(len(CASES))
    inputs.update({f"heads__{name}": value for name, value in heads_inputs(len(CASES)).items()})
    inputs.update({f"heads__weight_{i}": keras.ops.convert_to_numpy(variable.value)
                   for i, variable in enumerate(build_heads()[2])})
    return inputs, compute_cases(inputs, [*CASES, "heads"])


@pytest.fixture(scope="module")
def both_backends() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    inputs, tensorflow = tensorflow_cases()
    return tensorflow, run_on_backend(compute_cases, inputs, cases=[*CASES, "heads"], timeout=600)


def test_the_portable_modules_load_no_tensorflow_under_jax():
    code = ("import sys\n" + "".join(f"import {name}\n" for name in PORTABLE_MODULES)
            + "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow')\n"
            + "assert not loaded, loaded[:5]\n")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def assert_same_outputs(tensorflow: dict[str, np.ndarray], jax: dict[str, np.ndarray], case: str) -> list[str]:
    """The outputs of ``case`` agree: integers exactly, floats to 1e-5. Returns their names."""
    names = sorted(name for name in tensorflow if name.startswith(f"{case}__"))
    assert names == sorted(name for name in jax if name.startswith(f"{case}__"))
    for name in names:
        if name.split("__", 1)[1] in EXACT_OUTPUTS:
            np.testing.assert_array_equal(jax[name], tensorflow[name], err_msg=name)
        else:
            np.testing.assert_allclose(jax[name], tensorflow[name], rtol=1e-5, atol=1e-5, err_msg=name)
    return names


@pytest.mark.slow  # about two minutes: TensorFlow and JAX each build and differentiate eight small networks
@pytest.mark.parametrize("case", list(CASES))
def test_jax_gives_tensorflows_states_logits_memory_loss_and_gradients(both_backends, case):
    names = assert_same_outputs(*both_backends, case)
    assert {f"{case}__gradient_0", f"{case}__new_mems_1", f"{case}__encoded_mems_1", f"{case}__loss"} <= set(names)


@pytest.mark.slow  # shares the run above
@pytest.mark.parametrize("case", [case for case in CASES if "remat" in CASES[case]])
def test_remat_changes_nothing_on_either_backend(both_backends, case):
    # Exact, but TensorFlow's gradients to 1e-6 as tests/trainer/models/test_remat.py allows: its
    # recomputed backward pass may sum a gradient in another order (remat attention: 1 ulp on 4 of
    # one [50, 16] gradient's 800 elements, measured; JAX's keras.remat gave the same bits).
    like = CASES[case]["like"]
    for backend, outputs in zip(("tensorflow", "jax"), both_backends):
        names = [name.split("__", 1)[1] for name in outputs if name.startswith(f"{like}__")]
        for name in names:
            got, want, message = outputs[f"{case}__{name}"], outputs[f"{like}__{name}"], f"{backend}: {name}"
            if name.startswith("gradient_") and backend == "tensorflow":
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=message)
            else:
                np.testing.assert_array_equal(got, want, err_msg=message)


@pytest.mark.slow  # shares the run above
def test_jax_gives_tensorflows_fine_tuning_heads(both_backends):
    names = assert_same_outputs(*both_backends, "heads")
    assert {"heads__choice_logits", "heads__end_top_index", "heads__squad_losses"} <= set(names)


@pytest.mark.slow  # shares the run above
def test_dropout_drops_the_same_elements_on_both_backends(both_backends):
    tensorflow, jax = both_backends
    for name in ("dropout__content", "dropout__query", "dropout__hidden"):
        dropped = tensorflow[name] == 0  # the output dropout's zeros
        assert 0 < dropped.mean() < 0.5, name
        np.testing.assert_array_equal(jax[name] == 0, dropped, err_msg=name)
    # the bits reach everything: with other bits the values would differ far beyond 1e-5
    np.testing.assert_allclose(jax["dropout__loss"], tensorflow["dropout__loss"], rtol=1e-5, atol=1e-5)
