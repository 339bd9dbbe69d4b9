"""The JAX pretraining step (trainer/runtime/jax_step.py): the TensorFlow trainer's losses and gradient
norms, memory carried, remat and mixed_bfloat16, data parallel over devices, and what it refuses.

The JAX side runs in a fresh process (tests/support/backends.py); this module imports no TensorFlow at
module level, since that process imports it too."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support.backends import run_on_backend
from support.bundled_data import REPO

LEGACY = REPO / "tests" / "fixtures" / "legacy"
PRETRAINED = LEGACY / "pretrained"
FEATURES = ("input_ids", "segment_ids", "is_masked", "perm_seed")
# The legacy fixture's shapes (tests/trainer/test_legacy_model_dirs.py), dropout off so that both
# backends compute the same function; memory on (mem_len 16), bi_data on (the pretrained model's).
MODEL = ["vocab_size=1000", "n_layer=2", "d_model=32", "n_head=2", "d_head=16", "d_inner=64", "mem_len=16", "reuse_len=32",
         "dropout=0", "dropatt=0"]
TRAIN = ["seq_len=64", "num_predict=10", "perm_size=32", "train_batch_size=4", "eval_batch_size=4",
         "steps_per_loop=10", "checkpoint_every=10", "keep_checkpoints=1", "eval_every=0", "deterministic=true",
         "warmup_steps=2", "end_learning_rate=1e-3", "train_steps=10"]
STEPS = 10


# ------------------------------------------------------------------------ computed under JAX
def build_step(inputs, model, train, special_ids, remat="none"):
    """A PretrainingStep of the pretrained fixture's weights (``inputs``' weight_I, in variable order)."""
    from trainer.configs.training import TrainConfig
    from trainer.models.config import ModelConfig
    from trainer.models.pretrainer import XLNetPretrainer
    from trainer.runtime.jax_step import PretrainingStep

    model, train = ModelConfig.from_dict(model), TrainConfig.from_dict(train)
    pretrainer = XLNetPretrainer(model, train.seq_len, train.num_predict, train.perm_size, special_ids, remat=remat)
    for i, variable in enumerate(pretrainer.network.trainable_variables):
        variable.assign(inputs[f"weight_{i}"])
    return PretrainingStep(pretrainer, train)


def run_steps(inputs, step, batch_size, steps):
    """Per-step loss, gradient norm and learning rate of ``steps`` steps on ``inputs``' batches, and the
    number of devices the last memory was spread over."""
    from trainer.runtime.jax_step import as_numpy

    state, rows = step.initial_state(batch_size), []
    for i in range(steps):
        state, metrics = step(state, {name: inputs[name][i] for name in FEATURES})
        rows.append(as_numpy(metrics))
    out = {name: np.array([row[name] for row in rows]) for name in ("loss", "grad_norm", "learning_rate")}
    out["memory_devices"] = np.array(len(state.mems[0].sharding.device_set))
    return out


def jax_steps(inputs, model, train, special_ids, remat="none", precision="float32", data_parallel=False):
    """``STEPS`` steps of the JAX step; ``data_parallel``: over every local device."""
    import keras

    from trainer.runtime import jax_step

    if data_parallel:
        jax_step.data_parallel()
    keras.mixed_precision.set_global_policy(precision)
    step = build_step(inputs, model, {**train, "precision": precision}, special_ids, remat)
    out = run_steps(inputs, step, train["train_batch_size"], STEPS)
    out["variable_dtypes_are_float32"] = np.array(all(v.dtype == "float32" for v in step.pretrainer.weights))
    out["compute_dtype"] = np.array(step.pretrainer.network.compute_dtype)
    return out


# The runs the tests compare, in one fresh process on two CPU devices (XLA_FLAGS below): the float32 step
# under each remat mode, under mixed_bfloat16, and data parallel over both devices (last: it sets
# Keras's distribution for the rest of the process). A run without a distribution uses the first device.
RUNS = {"none": {}, "attention": {"remat": "attention"}, "full": {"remat": "full"},
        "bf16": {"precision": "mixed_bfloat16"}, "two_devices": {"data_parallel": True}}


def all_jax_runs(inputs, model, train, special_ids):
    import jax

    assert len(jax.devices()) == 2
    out = {}
    for run, settings in RUNS.items():
        out.update({f"{run}/{key}": value
                    for key, value in jax_steps(inputs, model, train, special_ids, **settings).items()})
    return out


# --------------------------------------------------------------------- the TensorFlow side
def tensorflow_inputs(train_overrides=()):
    """The configs, the first ``STEPS`` batches `xlnet train` reads and the pretrained weights, as arrays."""
    import tensorflow as tf

    from tfrecords.manifest import load_manifest
    from trainer.configs.overrides import resolve_configs
    from trainer.runtime.restore import open_model_directory, restore_model
    from trainer.tasks.pretraining import PretrainingTask

    sets = [f"model.{item}" for item in MODEL] + [f"train.{item}" for item in TRAIN + list(train_overrides)]
    model, train, _ = resolve_configs("tiny", None, sets)
    iterator = iter(PretrainingTask(model, train, load_manifest(str(LEGACY / "data"))).train_dataset(
        tf.distribute.get_strategy(), start_step=0))
    batches = [next(iterator) for _ in range(STEPS)]
    inputs = {name: np.stack([batch[name].numpy()[0] for batch in batches]) for name in FEATURES}  # micro-step 0
    network = restore_model(open_model_directory(str(PRETRAINED)), whole_sequence=False).network
    inputs.update({f"weight_{i}": v.numpy() for i, v in enumerate(network.trainable_variables)})
    special_ids = json.loads((PRETRAINED / "special_ids.json").read_text())
    return inputs, model.to_dict(), train.to_dict(), special_ids


def tensorflow_trainer_rows(tmp_path) -> list[dict]:
    """The step log of `xlnet train` (TensorFlow) from the pretrained fixture's weights."""
    model_dir = tmp_path / "tensorflow"
    sets = [arg for item in MODEL + TRAIN for arg in ("--set", item)]
    result = subprocess.run([sys.executable, str(REPO / "xlnet_cli.py"), "train", "--data", str(LEGACY / "data"),
                             "--model-dir", str(model_dir), "--preset", "tiny", "--init-checkpoint", str(PRETRAINED),
                             *sets], cwd=REPO, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in (model_dir / "train_steps.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def inputs():
    return tensorflow_inputs()


@pytest.fixture(scope="module")
def runs(inputs):
    """{run: {loss, grad_norm, ...}} of ``RUNS``, computed under JAX."""
    arrays, model, train, special_ids = inputs
    flat = run_on_backend(all_jax_runs, arrays, model=model, train=train, special_ids=special_ids,
                          env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    return {run: {key.split("/", 1)[1]: value for key, value in flat.items() if key.startswith(run + "/")}
            for run in RUNS}


@pytest.mark.slow  # `xlnet train` for 10 steps, and the JAX runs (about 60 s and 80 s)
def test_ten_jax_steps_have_the_tensorflow_trainers_losses_and_gradient_norms(tmp_path, runs):
    rows = tensorflow_trainer_rows(tmp_path)
    jax = runs["none"]
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    np.testing.assert_allclose(jax["loss"], [row["loss"] for row in rows], rtol=1e-4)
    np.testing.assert_allclose(jax["grad_norm"], [row["grad_norm"] for row in rows], rtol=1e-4)
    assert not np.allclose(jax["loss"], jax["loss"][0])  # the weights moved: the comparison is of ten steps


@pytest.mark.slow  # the JAX runs (shared with the tests above and below)
def test_remat_modes_give_the_same_steps(runs):
    for remat in ("attention", "full"):
        np.testing.assert_allclose(runs[remat]["loss"], runs["none"]["loss"], rtol=1e-5)
        np.testing.assert_allclose(runs[remat]["grad_norm"], runs["none"]["grad_norm"], rtol=1e-5)


@pytest.mark.slow  # the JAX runs
def test_mixed_bfloat16_computes_in_bfloat16_and_descends_as_float32_does(runs):
    bf16 = runs["bf16"]
    assert str(bf16["compute_dtype"]) == "bfloat16" and bool(bf16["variable_dtypes_are_float32"])
    # bfloat16 keeps 8 bits of mantissa: the same descent, to about a percent.
    np.testing.assert_allclose(bf16["loss"], runs["none"]["loss"], rtol=3e-2)
    assert not np.array_equal(bf16["loss"], runs["none"]["loss"])  # it did compute in another precision


@pytest.mark.slow  # the JAX runs
def test_data_parallel_over_two_devices_gives_the_steps_of_one(runs):
    one, two = runs["none"], runs["two_devices"]
    assert (int(one["memory_devices"]), int(two["memory_devices"])) == (1, 2)
    np.testing.assert_allclose(two["loss"], one["loss"], rtol=1e-5)
    np.testing.assert_allclose(two["grad_norm"], one["grad_norm"], rtol=1e-5)


def refusals_under_jax(inputs, model, train, special_ids):
    """The messages of the settings the step refuses, by setting."""
    from tfrecords.errors import UsageError

    messages = {}
    for name, change in {"mixed_float16": {"precision": "mixed_float16"},
                         "accumulation": {"accumulation_steps": 2}}.items():
        try:
            build_step(inputs, model, {**train, **change}, special_ids)
            messages[name] = np.array("")
        except UsageError as error:
            messages[name] = np.array(str(error))
    return messages


@pytest.mark.slow  # a fresh JAX process (about 15 s)
def test_mixed_float16_and_accumulation_are_refused_in_one_line_each(inputs):
    arrays, model, train, special_ids = inputs
    messages = run_on_backend(refusals_under_jax, arrays, model=model, train=train, special_ids=special_ids)
    assert str(messages["mixed_float16"]) == ("precision mixed_float16 needs dynamic loss scaling, which the JAX "
                                              "step does not do; use mixed_bfloat16 (or float32)")
    assert str(messages["accumulation"]) == ("accumulation_steps 2: the JAX step applies every batch it is given "
                                             "(accumulation_steps 1); give it the whole batch")


def test_the_step_on_tensorflow_is_refused_naming_keras_backend():
    from tfrecords.errors import UsageError
    from trainer.runtime.jax_step import require_jax

    with pytest.raises(UsageError, match=r"^the JAX pretraining step needs KERAS_BACKEND=jax; Keras runs on "
                                         r"'tensorflow' here$"):
        require_jax()
