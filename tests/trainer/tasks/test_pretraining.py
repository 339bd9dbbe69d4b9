"""Pretraining on the controller and `xlnet train`: the loop's guarantees (resume, preemption, NaN guard,
XLA, mixed precision) on the bundled corpus. Its configuration is tested in tests/trainer/configs/, its
optimizer in tests/trainer/runtime/test_optimization.py."""
from __future__ import annotations

import json
import math
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.controller import Controller, TrainingDivergedError
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import STEP_LOG, pretraining_controller

from support.processes import output_of, signal_and_wait, start, wait_for

# The tiny preset made smaller still, so a step takes milliseconds on two CPU cores.
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32",
         "train_batch_size=4", "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2"]


def small_configs(*overrides: str):
    model, train, _ = resolve_configs("tiny", None, SMALL + list(overrides))
    return model.replace(vocab_size=8000), train


def make_trainer(tiny_data_dir, model_dir, *overrides: str, strategy=None) -> Controller:
    model, train = small_configs(*overrides)
    return pretraining_controller(model, train, manifest=load_manifest(str(tiny_data_dir)), model_dir=str(model_dir),
                   strategy=strategy or tf.distribute.get_strategy(), log=lambda line: None)




def train_command(data_dir, model_dir, *overrides: str) -> list[str]:
    args = ["train", "--data", str(data_dir), "--model-dir", str(model_dir), "--preset", "tiny"]
    for item in SMALL + list(overrides):
        args += ["--set", item]
    return args


def run_subprocess_training(args: list[str]) -> subprocess.Popen:
    """The `xlnet train` command ``args`` as `python -m trainer.task` in a child process."""
    return start(["-m", "trainer.task", *args[1:]])


# ---------------------------------------------------------------------------------- the loop
STRAIGHT = ("train_steps=12", "checkpoint_every=4", "eval_every=12")


@pytest.fixture(scope="module")
def straight_run(tiny_data_dir, tmp_path_factory) -> Path:
    """An uninterrupted 12-step `xlnet train` run (checkpoints every 4 steps, one evaluation)."""
    model_dir = tmp_path_factory.mktemp("straight") / "model"
    assert xlnet_cli.main(train_command(tiny_data_dir, model_dir, *STRAIGHT)) == 0
    return model_dir


def test_cli_train_writes_a_model_directory_export_can_use(straight_run):
    model_dir = straight_run
    for name in ("model_config.json", "train_config.json", "spiece.model", "special_ids.json"):
        assert (model_dir / name).exists(), name
    assert json.loads((model_dir / "train_config.json").read_text())["train_steps"] == 12
    assert json.loads((model_dir / "model_config.json").read_text())["n_layer"] == 2
    assert json.loads((model_dir / "text_normalization.json").read_text()) == {"uncased": False}  # as the data
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")).endswith("ckpt-12")
    assert sorted(ModelDirectory(model_dir).step_losses()) == list(range(1, 13))
    tags = {f"{name}/{tag}" for name in ("train", "eval") for tag in ModelDirectory(model_dir).scalar_tags(name)}
    assert {"train/loss", "train/plm_accuracy", "train/learning_rate", "train/grad_norm",
            "train/tokens_per_sec", "train/examples_per_sec", "train/model_flops_per_sec", "train/mfu",
            "eval/loss", "eval/accuracy", "eval/perplexity"} <= tags
    # MFU and goodput in every run (their own tests: tests/trainer/runtime/test_run_monitoring.py, slow)
    assert all(0 < row["mfu"] < 1 for row in ModelDirectory(model_dir).step_rows())
    assert json.loads((model_dir / ModelDirectory.GOODPUT).read_text())["runs"] == 1


def test_missing_data_directory_is_a_clear_error(tmp_path, capsys):
    code = xlnet_cli.main(["train", "--data", str(tmp_path / "none"), "--model-dir", str(tmp_path / "m")])
    assert code == 2
    assert "manifest.json" in capsys.readouterr().err


def test_model_directory_with_another_architecture_is_refused(tiny_data_dir, straight_run, capsys):
    code = xlnet_cli.main(train_command(tiny_data_dir, straight_run, *STRAIGHT, "d_inner=256"))
    assert code == 2
    assert "d_inner" in capsys.readouterr().err


@pytest.mark.slow
def test_resumed_run_continues_with_the_saved_memory_and_reader_position(tiny_data_dir, tmp_path):
    straight = make_trainer(tiny_data_dir, tmp_path / "a", "train_steps=6", "checkpoint_every=3")
    straight.train()
    first = make_trainer(tiny_data_dir, tmp_path / "b", "train_steps=3", "checkpoint_every=3")
    first.train()
    memory = [v.numpy() for v in first.task.train_memory.variables]
    resumed = make_trainer(tiny_data_dir, tmp_path / "b", "train_steps=6", "checkpoint_every=3")
    assert int(resumed.step.numpy()) == 3
    for saved, restored in zip(memory, resumed.task.train_memory.variables):
        np.testing.assert_array_equal(saved, restored.numpy())
        assert np.abs(saved).sum() > 0  # the memory really was carried, not zeros
    resumed.train()
    a, b = ModelDirectory(tmp_path / "a").step_losses(), ModelDirectory(tmp_path / "b").step_losses()
    np.testing.assert_allclose([a[s] for s in range(1, 7)], [b[s] for s in range(1, 7)], rtol=1e-5)


@pytest.mark.slow  # 28 s: a killed process and its restart
def test_sigkill_then_restart_gives_the_same_per_step_losses(tiny_data_dir, straight_run, tmp_path):
    model_dir = tmp_path / "killed"
    process = run_subprocess_training(train_command(tiny_data_dir, model_dir, *STRAIGHT))
    log = model_dir / STEP_LOG
    wait_for(lambda: (model_dir / "checkpoints" / "ckpt-4.index").exists() and log.exists()
             and len(log.read_text().splitlines()) >= 6, process, what="step 6")
    signal_and_wait(process, signal.SIGKILL)
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")) is not None
    assert xlnet_cli.main(train_command(tiny_data_dir, model_dir, *STRAIGHT)) == 0
    expected, resumed = ModelDirectory(straight_run).step_losses(), ModelDirectory(model_dir).step_losses()
    assert sorted(resumed) == list(range(1, 13))
    np.testing.assert_allclose([resumed[s] for s in range(1, 13)], [expected[s] for s in range(1, 13)], rtol=1e-5)
    # each step logged once: the steps the killed run logged after its last checkpoint were dropped
    assert [row["step"] for row in ModelDirectory(model_dir).step_rows()] == list(range(1, 13))


@pytest.mark.slow
def test_deterministic_runs_log_identical_rows_but_the_clock_fields(tiny_data_dir, tmp_path):
    settings = ("train_steps=40", "steps_per_loop=10", "checkpoint_every=40", "eval_every=0", "deterministic=true")
    logs = []
    for name in ("first", "second"):
        process = run_subprocess_training(train_command(tiny_data_dir, tmp_path / name, *settings))
        (output,) = output_of(process, timeout=300)
        assert process.returncode == 0, output
        logs.append(ModelDirectory(tmp_path / name).reproducible_step_rows())
    assert [row["step"] for row in logs[0]] == list(range(1, 41))
    assert logs[1] == logs[0]


@pytest.mark.slow  # about 15 s: a child run stopped with SIGTERM
def test_sigterm_saves_a_checkpoint_and_exits_cleanly(tiny_data_dir, tmp_path):
    model_dir = tmp_path / "preempted"
    process = run_subprocess_training(train_command(tiny_data_dir, model_dir, "train_steps=100000",
                                                    "checkpoint_every=100000", "eval_every=0"))
    log = model_dir / STEP_LOG
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2, process, what="step 2")
    output = signal_and_wait(process, signal.SIGTERM, timeout=120)
    assert process.returncode == 0, output
    assert '"stopped": "preempted"' in output
    saved = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    assert saved is not None and int(saved.rsplit("-", 1)[1]) == max(ModelDirectory(model_dir).step_losses())


def test_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tiny_data_dir, tmp_path):
    trainer = make_trainer(tiny_data_dir, tmp_path, "train_steps=2", "checkpoint_every=2")
    trainer.train()
    good = trainer.manager.latest_checkpoint
    embedding = trainer.network.word_embedding.embeddings
    embedding.assign(tf.fill(embedding.shape, float("nan")))
    trainer.config = trainer.config.replace(train_steps=4)
    with pytest.raises(TrainingDivergedError, match="loss became nan at step 3"):
        trainer.train()
    assert trainer.manager.latest_checkpoint == good
    reader = tf.train.load_checkpoint(good)
    assert all(np.isfinite(reader.get_tensor(name)).all() for name, _ in tf.train.list_variables(good)
               if reader.get_variable_to_dtype_map()[name].is_floating)


def test_train_step_compiles_with_xla_at_static_shapes(tiny_data_dir, tmp_path):
    # tf.function(jit_compile=True) raises instead of falling back when XLA cannot compile the step
    trainer = make_trainer(tiny_data_dir, tmp_path, "jit_compile=true", "train_steps=2", "n_layer=1")
    trainer.train()
    assert all(math.isfinite(loss) for loss in ModelDirectory(tmp_path).step_losses().values())
    assert trainer._grad_fn.experimental_get_tracing_count() == 1  # one static-shape trace for all steps


@pytest.mark.slow
def test_xla_train_step_matches_the_plain_step(tiny_data_dir, tmp_path):
    trainer = make_trainer(tiny_data_dir, tmp_path, "jit_compile=true", "train_steps=2", "dropout=0", "dropatt=0")
    trainer.train()
    eager = make_trainer(tiny_data_dir, tmp_path / "plain", "train_steps=2", "dropout=0", "dropatt=0")
    eager.train()
    xla, plain = ModelDirectory(tmp_path).step_losses(), ModelDirectory(tmp_path / "plain").step_losses()
    np.testing.assert_allclose([xla[1], xla[2]], [plain[1], plain[2]], rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_step_gives_a_finite_loss_near_float32(tiny_data_dir, tmp_path, precision):
    mixed = make_trainer(tiny_data_dir, tmp_path / "mixed", f"precision={precision}", "train_steps=2", "dropout=0",
                         "dropatt=0")
    mixed.train()
    full = make_trainer(tiny_data_dir, tmp_path / "full", "train_steps=2", "dropout=0", "dropatt=0")
    full.train()
    low, high = ModelDirectory(tmp_path / "mixed").step_losses(), ModelDirectory(tmp_path / "full").step_losses()
    assert math.isfinite(low[2])
    np.testing.assert_allclose(low[1], high[1], rtol=2e-2)


@pytest.mark.slow
def test_gradient_accumulation_sums_micro_steps_before_one_update(tiny_data_dir, tmp_path):
    trainer = make_trainer(tiny_data_dir, tmp_path, "accumulation_steps=2", "train_steps=2")
    trainer.train()
    assert int(trainer.optimizer.iterations.numpy()) == 2
    # each optimizer step consumed two records of every row
    batch = next(iter(trainer.task.reader("train", 4, start_step=2).dataset()))
    np.testing.assert_array_equal(batch["stream_pos"].numpy()[:, 0], [4, 5])


def test_init_checkpoint_starts_from_another_model_directory(tiny_data_dir, straight_run, tmp_path):
    source = straight_run
    from trainer.commands import train as task
    from trainer.launch.pretraining_run import build_pretraining

    parser = __import__("argparse").ArgumentParser()
    task.add_arguments(parser)
    args = parser.parse_args(train_command(tiny_data_dir, tmp_path / "target", "train_steps=2")[1:]
                             + ["--init-checkpoint", str(source)])
    trainer = build_pretraining(task.pretraining_run(args))
    assert int(trainer.step.numpy()) == 0
    saved = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(source / "checkpoints")))
    key = next(name for name, _ in tf.train.list_variables(str(source / "checkpoints"))
               if name.startswith("model/word_embedding"))
    np.testing.assert_array_equal(trainer.network.word_embedding.embeddings.numpy(), saved.get_tensor(key))


@pytest.mark.slow
def test_tiny_model_loss_falls_within_a_few_hundred_steps(tiny_data_dir, tmp_path):
    trainer = make_trainer(tiny_data_dir, tmp_path, "train_steps=300", "steps_per_loop=50", "learning_rate=2e-3",
                           "warmup_steps=30", "train_batch_size=8", "checkpoint_every=300", "eval_every=0")
    trainer.train()
    losses = ModelDirectory(tmp_path).step_losses()
    first, last = np.mean([losses[s] for s in range(1, 21)]), np.mean([losses[s] for s in range(281, 301)])
    assert last < first - 1.5, (first, last)


def flip_a_byte_in_every_record(path: Path, keep: frozenset[int] = frozenset()) -> None:
    """Corrupts the data of every record of a TFRecord file but those numbered in ``keep`` (the CRCs no
    longer match; the size stays)."""
    data = bytearray(path.read_bytes())
    offset, index = 0, 0
    while offset < len(data):
        length = int.from_bytes(data[offset:offset + 8], "little")
        if index not in keep:
            data[offset + 12 + length // 2] ^= 0xFF  # header: length (8) + its CRC (4); then the data
        offset, index = offset + 12 + length + 4, index + 1
    path.write_bytes(bytes(data))


def read_at_start_up(data: Path, name: str) -> frozenset[int]:
    """The records of shard ``name`` the start-up check reads: each stream's first and the last."""
    (shard,) = [shard for split in load_manifest(str(data)).splits.values() for shard in split.shards
                if shard.file == name]
    return frozenset([stream.first_record_index_in_file for stream in shard.streams] + [shard.records - 1])


def run_after_damage(tiny_data_dir, tmp_path: Path, capsys, split: str, *overrides: str) -> tuple[int, str, Path, Path]:
    """Trains 2 steps (ckpt-2) on a copy of the data, damages every record of ``split``'s shards past
    those the start-up check reads, then runs ``xlnet train`` again with ``overrides``; returns its
    exit status, its standard error, the data and the model directory."""
    import shutil

    data, model_dir = tmp_path / "data", tmp_path / "model"
    shutil.copytree(tiny_data_dir, data)
    assert xlnet_cli.main(train_command(data, model_dir, "train_steps=2", "checkpoint_every=2", "eval_every=0")) == 0
    for shard in sorted(data.glob(f"{split}-*.tfrecord")):
        flip_a_byte_in_every_record(shard, keep=read_at_start_up(data, shard.name))
    capsys.readouterr()
    code = xlnet_cli.main(train_command(data, model_dir, "checkpoint_every=2", *overrides))
    return code, capsys.readouterr().err, data, model_dir


@pytest.mark.slow  # about 20 s: a run that meets a damaged shard
def test_a_damaged_shard_met_mid_run_stops_with_status_3_naming_it_and_keeps_the_checkpoints(
        tiny_data_dir, tmp_path, capsys):
    code, err, data, model_dir = run_after_damage(tiny_data_dir, tmp_path, capsys, "train", "train_steps=6",
                                                  "eval_every=0")
    assert code == 3 and "Traceback" not in err
    assert "the training input could not be read after step 2" in err
    assert f"DAMAGED {data / 'train-00000-of-00004.tfrecord'}" in err and "first bad record 1:" in err
    assert f"xlnet inspect {data} --verify" in err and "latest: " in err and "ckpt-2" in err
    assert ModelDirectory(model_dir).latest_checkpoint().endswith("ckpt-2")
    assert sorted(ModelDirectory(model_dir).step_losses()) == [1, 2]


@pytest.mark.slow  # 20 s: a second run of the damaged-shard case above, on the valid split
def test_a_damaged_evaluation_shard_met_mid_run_stops_with_status_3_and_keeps_the_checkpoints(
        tiny_data_dir, tmp_path, capsys):
    code, err, _, model_dir = run_after_damage(tiny_data_dir, tmp_path, capsys, "valid", "train_steps=4",
                                               "eval_every=4")
    assert code == 3 and "Traceback" not in err, err[-3000:]
    assert "the evaluation input could not be read at step 4 (" in err and "--verify" in err
    assert "latest: " in err and "ckpt-4" in err
    assert ModelDirectory(model_dir).latest_checkpoint().endswith("ckpt-4")


def test_the_first_progress_line_comes_after_the_first_step_with_its_compile_time(tiny_data_dir, tmp_path):
    model, train = small_configs("train_steps=4", "steps_per_loop=4", "checkpoint_every=4", "eval_every=0")
    lines = []
    pretraining_controller(model, train, manifest=load_manifest(str(tiny_data_dir)), model_dir=str(tmp_path),
                           strategy=tf.distribute.get_strategy(), log=lines.append).train()
    progress = [line for line in lines if line.startswith("step ")]
    assert progress[0].startswith("step 1/4 loss ") and "the first step of this run: " in progress[0]
    assert "s with tracing and compilation" in progress[0]
    assert progress[1].startswith("step 4/4 loss ")  # then the loop of steps up to the next boundary
    assert " (mean of steps 2-4) lr " in progress[1]  # the loop's mean, as TensorBoard's, and it says so
