"""The JAX pretraining step (trainer/runtime/jax_step.py): the TensorFlow trainer's losses and gradient
norms, memory carried, remat, mixed_bfloat16, gradient accumulation, data parallel over devices, and what
it refuses.

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
# Gradient accumulation: 2 micro-steps of 4 rows per step, memory carried, as the controller's.
ACCUMULATION = ["accumulation_steps=2"]
ACCUMULATION_STEPS = 4


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


def jax_steps(inputs, model, train, special_ids, remat="none", precision="float32", data_parallel=False,
              steps=STEPS):
    """``steps`` steps of the JAX step; ``data_parallel``: over every local device."""
    import keras

    from trainer.runtime import jax_step

    if data_parallel:
        jax_step.data_parallel()
    keras.mixed_precision.set_global_policy(precision)
    step = build_step(inputs, model, {**train, "precision": precision}, special_ids, remat)
    out = run_steps(inputs, step, train["train_batch_size"], steps)
    out["variable_dtypes_are_float32"] = np.array(all(v.dtype == "float32" for v in step.pretrainer.weights))
    out["compute_dtype"] = np.array(step.pretrainer.network.compute_dtype)
    return out


# The runs the tests compare, in one fresh process on two CPU devices (XLA_FLAGS below): the float32 step
# under each remat mode, under mixed_bfloat16, and data parallel over both devices, without and with
# accumulation (on the accumulation's batches; last: it sets Keras's distribution for the rest of the
# process). A run without a distribution uses the first device. (Accumulation on one device: the engine's
# mixture run, tests/trainer/runtime/test_jax_engine.py, and the exact comparison below.)
RUNS = {"none": {}, "attention": {"remat": "attention"}, "full": {"remat": "full"},
        "bf16": {"precision": "mixed_bfloat16"}, "two_devices": {"data_parallel": True},
        "accumulation": {"data_parallel": True, "accumulation": True}}


def all_jax_runs(inputs, model, train, special_ids, accumulation_train):
    """``RUNS``; ``inputs`` holds the accumulation's batches and weights under "accumulation/"."""
    import jax

    assert len(jax.devices()) == 2
    prefix = "accumulation/"
    plain = {key: value for key, value in inputs.items() if not key.startswith(prefix)}
    accumulated = {key[len(prefix):]: value for key, value in inputs.items() if key.startswith(prefix)}
    out = {}
    for run, settings in RUNS.items():
        settings = dict(settings)
        if settings.pop("accumulation", False):
            settings.update(inputs=accumulated, train=accumulation_train, steps=ACCUMULATION_STEPS)
        settings = {"inputs": plain, "train": train, **settings}
        out.update({f"{run}/{key}": value
                    for key, value in jax_steps(model=model, special_ids=special_ids, **settings).items()})
    return out


# --------------------------------------------------------------------- the TensorFlow side
def tensorflow_inputs(train_overrides=()):
    """The configs, the first ``STEPS`` batches `xlnet train` reads ([rows, ...]; [micro-steps, rows, ...]
    with accumulation, as the JAX step takes them) and the pretrained weights, as arrays."""
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
    micro_steps = slice(None) if train.accumulation_steps > 1 else 0
    inputs = {name: np.stack([batch[name].numpy()[micro_steps] for batch in batches]) for name in FEATURES}
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


def tensorflow_controller_steps(tmp_path, train_overrides, steps) -> dict[str, np.ndarray]:
    """Losses and gradient norms of ``steps`` steps of the TensorFlow controller, in this process, from the
    pretrained fixture's weights on the batches `xlnet train` reads (as :func:`tensorflow_trainer_rows`,
    without a command's start-up)."""
    import tensorflow as tf

    from tfrecords.manifest import load_manifest
    from trainer.configs.overrides import resolve_configs
    from trainer.tasks.pretraining import pretraining_controller

    sets = [f"model.{item}" for item in MODEL] + [f"train.{item}" for item in TRAIN + list(train_overrides)]
    model, train, _ = resolve_configs("tiny", None, sets)
    controller = pretraining_controller(model, train, manifest=load_manifest(str(LEGACY / "data")),
                                        model_dir=str(tmp_path), strategy=tf.distribute.get_strategy(),
                                        init_checkpoint=str(PRETRAINED), log=lambda line: None)
    controller.start_input()
    out = controller.run_loop(0, steps)
    return {"loss": out.losses, "grad_norm": out.norms}


@pytest.fixture(scope="module")
def inputs():
    return tensorflow_inputs()


@pytest.fixture(scope="module")
def accumulation_inputs():
    return tensorflow_inputs(ACCUMULATION)


@pytest.fixture(scope="module")
def runs(inputs, accumulation_inputs):
    """{run: {loss, grad_norm, ...}} of ``RUNS``, computed under JAX."""
    arrays, model, train, special_ids = inputs
    arrays = {**arrays, **{f"accumulation/{key}": value for key, value in accumulation_inputs[0].items()}}
    flat = run_on_backend(all_jax_runs, arrays, model=model, train=train, special_ids=special_ids,
                          accumulation_train=accumulation_inputs[2],
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


@pytest.mark.slow  # the controller in this process (about 20 s) and the JAX runs
def test_accumulated_steps_with_memory_over_two_devices_have_the_tensorflow_controllers_losses(tmp_path, runs):
    """Micro-steps of 4 rows split over the devices by their second axis, the memory carried from one
    micro-step to the next: the controller's losses and gradient norms with the same accumulation."""
    tensorflow = tensorflow_controller_steps(tmp_path, ACCUMULATION, ACCUMULATION_STEPS)
    jax = runs["accumulation"]
    assert int(jax["memory_devices"]) == 2
    np.testing.assert_allclose(jax["loss"], tensorflow["loss"], rtol=1e-4)
    np.testing.assert_allclose(jax["grad_norm"], tensorflow["grad_norm"], rtol=1e-4)
    assert not np.allclose(jax["loss"], runs["none"]["loss"][:ACCUMULATION_STEPS])  # other batches, other steps


def refusals_under_jax(inputs, model, train, special_ids):
    """The message of the setting the step refuses."""
    from tfrecords.errors import UsageError

    try:
        build_step(inputs, model, {**train, "precision": "mixed_float16"}, special_ids)
        return {"mixed_float16": np.array("")}
    except UsageError as error:
        return {"mixed_float16": np.array(str(error))}


@pytest.mark.slow  # a fresh JAX process (about 15 s)
def test_mixed_float16_is_refused_in_one_line(inputs):
    arrays, model, train, special_ids = inputs
    messages = run_on_backend(refusals_under_jax, arrays, model=model, train=train, special_ids=special_ids)
    assert str(messages["mixed_float16"]) == ("precision mixed_float16 needs dynamic loss scaling, which the JAX "
                                              "step does not do; use mixed_bfloat16 (or float32)")


def test_the_step_on_tensorflow_is_refused_naming_keras_backend():
    from tfrecords.errors import UsageError
    from trainer.runtime.jax_step import require_jax

    with pytest.raises(UsageError, match=r"^the JAX pretraining step needs KERAS_BACKEND=jax; Keras runs on "
                                         r"'tensorflow' here$"):
        require_jax()


# ------------------------------------------------- what the step refuses and the NaN guard (issue 44)
# A one-layer model on 16 positions: each process below compiles at most two small steps.
SMALL = {"model": ["n_layer=1", "d_model=16", "n_head=2", "d_head=8", "d_inner=32", "vocab_size=50", "dropout=0",
                   "dropatt=0"], "seq_len": 16, "mem_len": 8, "num_predict": 4}


def small_step(mem_len=SMALL["mem_len"], precision="float32", rows=2, accumulation_steps=1):
    """A PretrainingStep of the SMALL model (under JAX) and a batch of the benchmark's synthetic rows:
    ``rows`` x ``accumulation_steps`` of them, laid out [accumulation_steps, rows, ...] with accumulation."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("accelerator_step", REPO / "benchmarks" / "accelerator_step.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    from trainer.models.pretrainer import XLNetPretrainer
    from trainer.runtime.jax_step import PretrainingStep

    model, train = bench.setting_configs("tiny", SMALL["model"], SMALL["seq_len"], mem_len, SMALL["num_predict"],
                                         precision, "none")
    train = train.replace(train_batch_size=rows, accumulation_steps=accumulation_steps)
    pretrainer = XLNetPretrainer(model, train.seq_len, train.num_predict, train.perm_size, bench.SPECIAL_IDS)
    batch = bench.synthetic_batch(rows * accumulation_steps, SMALL["seq_len"], SMALL["num_predict"],
                                  model.reuse_len, model.vocab_size)
    if accumulation_steps > 1:
        batch = {name: value.reshape(accumulation_steps, rows, *value.shape[1:]) for name, value in batch.items()}
    return PretrainingStep(pretrainer, train), batch


def message_of(action) -> np.ndarray:
    """``"ErrorType: message"`` of what ``action()`` raised ("" when it raised nothing)."""
    try:
        action()
    except Exception as error:  # noqa: BLE001 (the test reads the type and the message)
        return np.array(f"{type(error).__name__}: {error}")
    return np.array("")


def refusals_before_any_step(inputs):
    """The messages of what the step refuses on the host, before any step is compiled."""
    import keras

    step, batch = small_step()
    state = step.initial_state(2)
    out = {}
    out["id_at_vocab"] = message_of(lambda: step(state, {**batch, "input_ids": np.where(
        np.arange(SMALL["seq_len"]) == 3, 50, batch["input_ids"]).astype(np.int32)}))
    out["negative_id"] = message_of(lambda: step(state, {**batch, "input_ids": -batch["input_ids"]}))
    out["float_nan"] = message_of(lambda: step(state, {**batch, "is_masked": np.full((2, 16), np.nan, np.float32)}))
    four = {name: np.concatenate([value, value]) for name, value in batch.items()}
    out["four_rows_for_two"] = message_of(lambda: step(state, four))
    out["huge_mem_len"] = message_of(lambda: small_step(mem_len=10 ** 8)[0].initial_state(2))
    accumulated, micro_batches = small_step(accumulation_steps=2)
    three = {name: np.concatenate([value, value[:1]]) for name, value in micro_batches.items()}
    out["three_micro_steps_for_two"] = message_of(lambda: accumulated(accumulated.initial_state(2), three))
    out["no_micro_steps_for_two"] = message_of(lambda: accumulated(accumulated.initial_state(2), batch))
    out["bad_id_in_second_micro_step"] = message_of(lambda: accumulated(accumulated.initial_state(2), {
        **micro_batches, "input_ids": np.where(np.arange(2)[:, None, None] == 1, 50, micro_batches["input_ids"])}))
    keras.mixed_precision.set_global_policy("mixed_float16")
    out["float16_policy"] = message_of(lambda: small_step(precision="float32"))
    keras.mixed_precision.set_global_policy("float32")
    return out


@pytest.fixture(scope="module")
def refusals():
    return {name: str(value) for name, value in run_on_backend(refusals_before_any_step, {}).items()}


def test_an_input_id_at_the_vocabulary_size_is_refused_naming_where(refusals):
    assert refusals["id_at_vocab"] == ("DataError: batch input_ids[0, 3] is 50, outside the vocabulary [0, 50) "
                                       "(2 such ids)")


def test_a_negative_input_id_is_refused(refusals):
    assert refusals["negative_id"].startswith("DataError: batch input_ids[0, 0] is -")
    assert "outside the vocabulary [0, 50) (32 such ids)" in refusals["negative_id"]


def test_a_float_feature_with_nan_is_refused_naming_it(refusals):
    assert refusals["float_nan"] == ("UsageError: batch is_masked is float32: the step takes integer features "
                                     "(is_masked may be bool), as the reader gives them")


def test_a_batch_of_four_rows_for_a_state_of_two_names_the_mismatch(refusals):
    assert refusals["four_rows_for_two"] == ("UsageError: the batch has 4 rows, the state's memory 2 "
                                             "(initial_state(2)): give initial_state the batch's rows")


def test_a_batch_of_three_micro_steps_for_accumulation_steps_2_is_refused_naming_the_count(refusals):
    assert refusals["three_micro_steps_for_two"] == (
        "UsageError: batch input_ids has shape [3, 2, 16], the step takes [2, 2, 16] (accumulation_steps 2, rows, "
        "seq_len 16)")


def test_a_batch_without_the_micro_step_axis_is_refused_under_accumulation(refusals):
    assert refusals["no_micro_steps_for_two"] == (
        "UsageError: batch input_ids has shape [2, 16], the step takes [2, 2, 16] (accumulation_steps 2, rows, "
        "seq_len 16)")


def test_an_input_id_outside_the_vocabulary_in_a_later_micro_step_is_refused_naming_where(refusals):
    assert refusals["bad_id_in_second_micro_step"] == (
        "DataError: batch input_ids[1, 0, 0] is 50, outside the vocabulary [0, 50) (32 such ids)")


def test_a_mem_len_beyond_the_memory_is_refused_naming_mem_len_before_allocating(refusals):
    message = refusals["huge_mem_len"]
    assert message.startswith("UsageError: mem_len 100000000: a pretraining step of 2 rows per device at seq_len "
                              "16 with a memory of 100000000 positions needs about ")
    assert "of this machine's physical memory" in message and "; the largest that fits is mem_len " in message


def test_a_float16_global_policy_is_refused_though_the_config_says_float32(refusals):
    assert refusals["float16_policy"] == (
        "UsageError: the network computes in float16 (dtype policy mixed_float16, from keras.mixed_precision's "
        "global policy when it was built; the config's precision is float32): float16 needs dynamic loss scaling, "
        "which the JAX step does not do; set the global policy to mixed_bfloat16 or float32 before building the "
        "pretrainer")


def accumulated_and_whole_steps() -> dict:
    """Two steps on 8 synthetic rows, memory off and dropout off: as 2 micro-steps of 4 rows and as one
    batch of 8, from the same weights; and the compilations of the accumulated step."""
    from trainer.runtime import jax_step

    whole, batch = small_step(mem_len=0, rows=8)
    accumulated, micro_batches = small_step(mem_len=0, rows=4, accumulation_steps=2)
    for target, source in zip(accumulated.pretrainer.trainable_variables, whole.pretrainer.trainable_variables):
        target.assign(np.array(source))  # a copy: the whole step's first call takes (donates) its buffers
    out = {}
    for name, step, rows, features in (("whole", whole, 8, batch), ("accumulated", accumulated, 4, micro_batches)):
        state, metrics = step.initial_state(rows), []
        for _ in range(2):
            state, step_metrics = step(state, features)
            metrics.append(jax_step.as_numpy(step_metrics))
        out.update({f"{name}/{key}": np.array([row[key] for row in metrics])
                    for key in ("loss", "accuracy", "grad_norm", "num_targets")})
    out["accumulated_compilations"] = accumulated._step._cache_size()
    return out


def guarded_steps(inputs):
    """Steps on a good batch, on ids outside the vocabulary given as device arrays, on NaN weights, then on
    a good batch again; accumulated steps and whole ones; then two steps under data_parallel() on one
    device and the step's compilations."""
    import jax

    from trainer.runtime import jax_step

    assert len(jax.devices()) == 1
    step, batch = small_step()
    out = accumulated_and_whole_steps()
    state, metrics = step(step.initial_state(2), batch)
    out["first_loss"] = jax_step.as_numpy(metrics)["loss"]
    before = [np.asarray(value) for value in state.trainable]
    bad = {**batch, "input_ids": jax.device_put(np.full((2, 16), 50, np.int32))}
    state, metrics = step(state, bad)
    out["bad_ids_message"] = message_of(lambda: jax_step.as_numpy(metrics))
    out["bad_ids_kept_the_state"] = all(np.array_equal(a, np.asarray(b)) for a, b in zip(before, state.trainable))
    copy = jax.tree_util.tree_map(jax.numpy.copy, state)  # the step takes (donates) the state it is given
    poisoned = copy._replace(trainable=[jax.numpy.full_like(copy.trainable[0], np.nan), *copy.trainable[1:]])
    kept = [np.asarray(value) for value in poisoned.trainable]
    after_nan, metrics = step(poisoned, batch)
    out["nan_message"] = message_of(lambda: jax_step.as_numpy(metrics))
    out["nan_kept_the_state"] = all(np.array_equal(a, np.asarray(b), equal_nan=True)
                                    for a, b in zip(kept, after_nan.trainable))
    state, metrics = step(state, batch)  # the state the bad ids gave back: the last good one
    out["good_after_bad_loss"] = jax_step.as_numpy(metrics)["loss"]

    jax_step.data_parallel()
    step, batch = small_step()
    state = step.initial_state(2)
    for _ in range(3):
        state, metrics = step(state, batch)
        jax_step.as_numpy(metrics)
    out["compilations_data_parallel_one_device"] = step._step._cache_size()
    return out


@pytest.fixture(scope="module")
def guarded():
    return {name: value for name, value in run_on_backend(guarded_steps, {}).items()}


@pytest.mark.slow  # four small steps compiled in a fresh JAX process (about 60 s)
def test_ids_outside_the_vocabulary_on_device_leave_the_state_as_it_was_and_stop(guarded):
    assert str(guarded["bad_ids_message"]) == (
        "StepNotAppliedError: input_ids left the vocabulary at step 2; the step did not apply its update: the state "
        "it gave back is step 1's. Lower learning_rate or check the data.")
    assert bool(guarded["bad_ids_kept_the_state"])


@pytest.mark.slow  # the same process
def test_a_nan_loss_leaves_the_state_as_it_was_and_stops_in_the_controllers_words(guarded):
    assert str(guarded["nan_message"]).startswith("StepNotAppliedError: loss became nan (gradient norm nan) at "
                                                  "step 2; the step did not apply its update")
    assert bool(guarded["nan_kept_the_state"])


@pytest.mark.slow  # the same process
def test_a_good_batch_after_a_refused_one_trains_from_the_last_good_state(guarded):
    assert np.isfinite(guarded["good_after_bad_loss"]) and np.isfinite(guarded["first_loss"])


@pytest.mark.slow  # the same process
def test_two_micro_steps_of_4_rows_give_the_loss_and_gradient_norm_of_one_step_of_8(guarded):
    """Without memory or dropout the two are the same sums (of the same rows' losses and gradients, over
    the same targets): exact arithmetic, so only float32 rounding (the order of the additions) tells
    them apart; the second step checks that the update was applied once, with that gradient."""
    np.testing.assert_array_equal(guarded["accumulated/num_targets"], guarded["whole/num_targets"])
    for key in ("loss", "accuracy", "grad_norm"):
        np.testing.assert_allclose(guarded[f"accumulated/{key}"], guarded[f"whole/{key}"], rtol=1e-5)
    assert int(guarded["accumulated_compilations"]) == 1


@pytest.mark.slow  # the same process
def test_data_parallel_on_one_device_compiles_the_step_once(guarded):
    assert int(guarded["compilations_data_parallel_one_device"]) == 1
