"""Resuming a run (trainer/runtime/controller.py, trainer/runtime/model_dir.py): a latest checkpoint
that cannot be read is set aside and the one before it resumes the run; the step log and the
TensorBoard events then hold each step once, as an uninterrupted run's. Locally and on gs://."""
from __future__ import annotations

import json
import posixpath

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import SMALL_DATA_TRAINING

# Small enough for seconds on two CPU cores; a checkpoint every 2 steps, two kept.
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "checkpoint_every=2",
         "keep_checkpoints=2", "eval_every=0"]


def train(data_dir: str, model_dir: str, steps: int) -> int:
    args = ["train", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny"]
    settings = SMALL + SMALL_DATA_TRAINING + [f"train_steps={steps}"]
    return xlnet_cli.main(args + [arg for item in settings for arg in ("--set", item)])


def truncate(path: str) -> None:
    data = tf.io.gfile.GFile(path, "rb").read()
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(data[:len(data) // 2])


def event_steps(directory: ModelDirectory, tag: str = "loss") -> list[int]:
    """Every step at which the train writer logged ``tag``, repeats included, in file order."""
    steps = []
    for path in sorted(tf.io.gfile.glob(posixpath.join(directory.tensorboard("train"), "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            steps += [int(event.step) for value in event.summary.value if value.tag == tag]
    return steps


@pytest.fixture(scope="module")
def straight(small_data_dir, tmp_path_factory) -> ModelDirectory:
    """An uninterrupted 6-step run."""
    path = str(tmp_path_factory.mktemp("straight") / "model")
    assert train(small_data_dir, path, 6) == 0
    return ModelDirectory(path)


def assert_resumed_past_a_damaged_checkpoint(small_data_dir: str, model_dir: str, straight: ModelDirectory,
                                             capsys) -> None:
    assert train(small_data_dir, model_dir, 4) == 0  # checkpoints 2 and 4; logs steps 1-4
    directory = ModelDirectory(model_dir)
    [data] = tf.io.gfile.glob(posixpath.join(directory.checkpoints, "ckpt-4.data-*"))
    truncate(data)
    capsys.readouterr()
    assert train(small_data_dir, model_dir, 6) == 0
    captured = capsys.readouterr()
    err = captured.err  # warnings on standard error; standard output keeps the progress lines
    assert "warning: checkpoint " in err and "ckpt-4 cannot be read" in err
    assert "resuming from " in err and "ckpt-2 (step 2) instead of " in err
    assert "cannot be read" not in captured.out and "resumed from " in captured.out
    damaged = posixpath.join(directory.checkpoints, ModelDirectory.DAMAGED_CHECKPOINTS)
    assert sorted(posixpath.basename(p) for p in tf.io.gfile.glob(damaged + "/*")) == [
        "ckpt-4.data-00000-of-00001", "ckpt-4.index"]  # set aside, not deleted
    assert [row["step"] for row in directory.step_rows()] == [1, 2, 3, 4, 5, 6]
    resumed, expected = directory.step_losses(), straight.step_losses()
    np.testing.assert_allclose([resumed[s] for s in range(1, 7)], [expected[s] for s in range(1, 7)], rtol=1e-5)
    assert sorted(event_steps(directory)) == sorted(set(event_steps(directory)))  # no step twice
    assert directory.latest_checkpoint().endswith("ckpt-6")


def test_a_damaged_latest_checkpoint_is_set_aside_and_the_one_before_resumes(small_data_dir, straight, tmp_path,
                                                                            capsys):
    assert_resumed_past_a_damaged_checkpoint(small_data_dir, str(tmp_path / "model"), straight, capsys)


@pytest.mark.slow  # 25 s; the local test runs the same code, through tf.io.gfile
def test_on_gcs_a_damaged_latest_checkpoint_is_set_aside_too(small_data_dir, straight, gcs_prefix, capsys):
    assert_resumed_past_a_damaged_checkpoint(small_data_dir, gcs_prefix + "model", straight, capsys)


def test_without_any_readable_checkpoint_the_run_stops_with_status_3(small_data_dir, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    assert train(small_data_dir, model_dir, 4) == 0
    for path in tf.io.gfile.glob(str(tmp_path / "model" / "checkpoints" / "ckpt-*.data-*")):
        truncate(path)
    capsys.readouterr()
    assert train(small_data_dir, model_dir, 6) == 3
    err = capsys.readouterr().err
    assert "no checkpoint under" in err and "ckpt-4" in err and "ckpt-2" in err and "Traceback" not in err
    assert len(tf.io.gfile.glob(str(tmp_path / "model" / "checkpoints" / "damaged" / "*"))) == 4
    assert ModelDirectory(model_dir).latest_checkpoint() is None


def test_forgetting_steps_after_a_resume_point_keeps_earlier_rows_and_events(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    directory.append_steps({"step": step, "loss": 10.0 - step, "grad_norm": 1.0} for step in range(1, 7))
    writer = tf.summary.create_file_writer(directory.tensorboard("train"))
    with writer.as_default():
        for step in range(2, 8, 2):
            tf.summary.scalar("loss", 10.0 - step, step=step)
    writer.close()
    assert directory.forget_steps_after(4) == 2
    assert [row["step"] for row in directory.step_rows()] == [1, 2, 3, 4]
    assert directory.scalars("train", "loss") == {2: 8.0, 4: 6.0}


@pytest.mark.slow  # 18 s: two training runs
def test_resuming_with_other_training_settings_prints_them_and_saves_them_after_a_checkpoint(
        small_data_dir, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    assert train(small_data_dir, model_dir, 2) == 0
    directory = ModelDirectory(model_dir)
    saved = directory.join(ModelDirectory.TRAIN_CONFIG)
    capsys.readouterr()
    # a learning rate that diverges: the run stops before its first checkpoint, and the settings of
    # the directory's checkpoints stay those saved
    diverging = ["--set", "learning_rate=1e30", "--set", "checkpoint_every=4"]
    assert xlnet_cli.main(["train", "--data", small_data_dir, "--model-dir", model_dir, "--preset", "tiny"]
                          + [arg for item in SMALL + SMALL_DATA_TRAINING + ["train_steps=8"] for arg in ("--set", item)]
                          + diverging) == 3
    out = capsys.readouterr().out
    assert "resuming with other settings than " in out and "learning_rate: 0.001 -> 1e+30" in out
    assert "train_steps: 2 -> 8" in out
    assert json.loads(tf.io.gfile.GFile(saved).read())["learning_rate"] == 1e-3
    assert train(small_data_dir, model_dir, 4) == 0
    assert json.loads(tf.io.gfile.GFile(saved).read())["train_steps"] == 4
    earlier = json.loads(tf.io.gfile.GFile(directory.join("train_config.step-2.json")).read())
    assert (earlier["train_steps"], earlier["learning_rate"]) == (2, 1e-3)


@pytest.mark.slow  # 20 s; the controller is the one pretraining's tests cover
def test_fine_tuning_sets_a_damaged_latest_checkpoint_aside_by_the_same_rule(spm_model, tmp_path, capsys):
    from support.bundled_data import ROTTEN

    model_dir = str(tmp_path / "classifier")

    def finetune(steps: int) -> int:
        args = ["finetune", "--task", "classification", "--train", str(ROTTEN / "train.tsv"), "--eval",
                str(ROTTEN / "dev.tsv"), "--vocab", spm_model, "--preset", "tiny", "--model-dir", model_dir,
                "--max-seq-length", "32"]
        small = [item for item in SMALL if not item.startswith(("mem_len", "eval_steps"))]
        return xlnet_cli.main(args + [arg for item in small + [f"train_steps={steps}"] for arg in ("--set", item)])

    assert finetune(4) == 0
    [data] = tf.io.gfile.glob(posixpath.join(model_dir, "checkpoints", "ckpt-4.data-*"))
    truncate(data)
    capsys.readouterr()
    assert finetune(6) == 0
    err = capsys.readouterr().err
    assert "ckpt-4 cannot be read" in err and "ckpt-2 (step 2) instead of " in err
    assert [row["step"] for row in ModelDirectory(model_dir).step_rows()] == [1, 2, 3, 4, 5, 6]
