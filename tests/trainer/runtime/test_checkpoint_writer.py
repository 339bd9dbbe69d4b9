"""Asynchronous checkpoints (trainer/runtime/checkpoint_writer.py, ``--set async_checkpoint=true``).

The unit tests save a small Keras model and its AdamW state (Keras 3 variables, as the trainer's)
through a tf.train.CheckpointManager: a snapshot keeps the values of its step while later steps
change the variables, a background write holds what a synchronous save holds and is listed only
once complete, and a failed write is raised by the next wait with its checkpoint named.

The others run `xlnet train` on the small bundled data directory, in child processes where a
process is signalled: a SIGKILL during a background write leaves the checkpoint before it to
resume from and the resumed run has the losses of an uninterrupted one; SIGTERM waits for the
write in flight and for the last checkpoint; train returns with its last checkpoint complete; a
full disk during a background write stops the run with the synchronous mode's sentence; gs:// with
the emulator's faults gives the local losses; two worker processes write the same weights. The
model of the signal tests has a 117 MB checkpoint, so that a write lasts long enough to be caught
in flight.
"""
from __future__ import annotations

import os
import posixpath
import signal
import subprocess
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from tfrecords.errors import EXIT_DATA
from trainer.runtime import checkpoint_history
from trainer.runtime.checkpoint_writer import BackgroundWrites, SaveFailed, snapshot
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import output_of, signal_and_wait, start, start_as_two_workers, wait_for
from support.small_disk import resize, small_tmpfs

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "checkpoint_every=2",
         "keep_checkpoints=3", "eval_every=0"]
# 9.7M weights: with AdamW's slots a 117 MB checkpoint, a write of a good part of a second here
BIG = [*SMALL, "n_layer=4", "d_model=256", "n_head=4", "d_head=64", "d_inner=4096"]
ASYNC = "async_checkpoint=true"


# ------------------------------------------------------------------------------ unit tests
class KerasRun:
    """A two-layer Keras model trained by AdamW (Keras 3 variables, as the trainer's), checkpointed
    with its optimizer and a step counter."""

    def __init__(self):
        keras.utils.set_random_seed(0)
        self.model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
        self.optimizer = keras.optimizers.AdamW(learning_rate=0.01)
        self.step = tf.Variable(0, dtype=tf.int64)
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=self.step)
        self.batch = tf.random.stateless_normal([4, 8], seed=[1, 2])
        self._train = tf.function(self._train_step)
        self.optimizer.build(self.model.trainable_variables)  # its slots, saved from the first checkpoint on

    def _train_step(self):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(self.batch) - 1.0))
        variables = self.model.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        self.step.assign_add(1)

    def steps(self, count: int) -> None:
        for _ in range(count):
            self._train()

    def variables(self) -> list:
        return [*self.model.variables, *self.optimizer.variables, self.step]

    def manager(self, directory: str, background: bool, keep: int = 2) -> tf.train.CheckpointManager:
        target = BackgroundWrites(self.checkpoint) if background else self.checkpoint
        return tf.train.CheckpointManager(target, directory, max_to_keep=keep)


def tensors_of(prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_a_snapshot_keeps_the_values_of_its_step_while_the_steps_after_it_change_the_variables():
    run = KerasRun()
    run.steps(1)
    before = {id(variable): np.array(variable.numpy()) for variable in run.variables()}
    taken, registered = snapshot(run.checkpoint)
    run.steps(2)
    assert all(not np.array_equal(v.numpy(), before[id(v)]) for v in run.model.trainable_variables)  # updated
    saved = {id(trackable): spec.tensor.numpy() for trackable, specs in taken.items() if id(trackable) in before
             for spec in specs.values()}
    assert saved.keys() == before.keys() and not registered  # every variable, nothing saved another way
    for key, value in before.items():
        np.testing.assert_array_equal(saved[key], value)


def test_a_background_write_holds_what_a_synchronous_save_holds_and_is_listed_once_complete(tmp_path):
    run, twin = KerasRun(), KerasRun()  # the same seed: the same values step by step
    synchronous = twin.manager(str(tmp_path / "sync"), background=False)
    background = run.manager(str(tmp_path / "async"), background=True)
    for step in (2, 4, 6):
        run.steps(2)
        twin.steps(2)
        synchronous.save(checkpoint_number=step)
        background.save(checkpoint_number=step)  # returns with the write in flight; the next one waits for it
    run.steps(2)  # beside the write of ckpt-6
    background.sync()
    assert not background.checkpoint.writing
    for step in (4, 6):
        expected, written = tensors_of(str(tmp_path / "sync" / f"ckpt-{step}")), \
            tensors_of(str(tmp_path / "async" / f"ckpt-{step}"))
        assert expected.keys() == written.keys()
        for name, value in expected.items():
            if name == "_CHECKPOINTABLE_OBJECT_GRAPH":  # names the twin's variables (sequential_1/...)
                continue
            np.testing.assert_array_equal(written[name], value, err_msg=name)
    state = tf.train.get_checkpoint_state(str(tmp_path / "async"))
    assert [posixpath.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-4", "ckpt-6"]
    assert sorted(os.listdir(tmp_path / "async")) == sorted(os.listdir(tmp_path / "sync"))  # ckpt-2 gone, no temp
    assert background.latest_checkpoint == str(tmp_path / "async" / "ckpt-6")
    run.checkpoint.restore(background.latest_checkpoint).assert_existing_objects_matched()
    assert int(run.step.numpy()) == 6


def test_a_failed_background_write_is_raised_by_the_next_wait_naming_its_checkpoint(tmp_path):
    run = KerasRun()
    directory = tmp_path / "checkpoints"
    manager = run.manager(str(directory), background=True)
    manager.save(checkpoint_number=2)
    manager.sync()
    (directory / "ckpt-4_temp").write_text("a file where the write's temporary directory goes")
    manager.save(checkpoint_number=4)  # returns: the write fails in the background
    run.steps(1)
    with pytest.raises(SaveFailed) as raised:
        manager.sync()
    assert raised.value.prefix == str(directory / "ckpt-4")
    assert isinstance(raised.value.error, tf.errors.OpError)
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-2")  # the state file was not touched
    manager.sync()  # raised once
    assert not manager.checkpoint.writing


def test_what_unfinished_writes_left_is_found_and_nothing_else(tmp_path):
    run = KerasRun()
    directory = tmp_path / "checkpoints"
    run.manager(str(directory), background=False, keep=5).save(checkpoint_number=2)
    (directory / "ckpt-4_temp").mkdir()  # a write killed before its merge
    (directory / "ckpt-4_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"partial")
    (directory / "ckpt-6.data-00000-of-00001").write_bytes(b"renamed, its index never was")
    (directory / "ckpt-8.index").write_bytes(b"")  # a checkpoint of its own (damaged or not): not a write's leftover
    assert checkpoint_history.unfinished_saves(str(directory)) == [str(directory / "ckpt-4"), str(directory / "ckpt-6")]
    for prefix in checkpoint_history.unfinished_saves(str(directory)):
        checkpoint_history.remove_unfinished_save(str(directory), prefix)
    assert sorted(os.listdir(directory)) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index",
                                             "ckpt-8.index"]


# -------------------------------------------------------------------------- xlnet train runs
def settings(steps: int, *extra: str, base: list[str] = SMALL) -> list[str]:
    items = [*base, *SMALL_DATA_TRAINING, f"train_steps={steps}", *extra]
    return [arg for item in items for arg in ("--set", item)]


def train(data_dir: str, model_dir: str, steps: int, *extra: str, base: list[str] = SMALL) -> int:
    return xlnet_cli.main(["train", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny",
                           *settings(steps, *extra, base=base)])


def start_training(data_dir: str, model_dir: str, steps: int, *extra: str) -> subprocess.Popen:
    """`xlnet train` (BIG, asynchronous checkpoints) as `python -m trainer.task` in a child process."""
    return start(["-m", "trainer.task", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny",
                  *settings(steps, ASYNC, *extra, base=BIG)])


def writing(checkpoints: Path, step: int) -> bool:
    """Whether the write of ckpt-STEP is in flight: its temporary directory is there."""
    return (checkpoints / f"ckpt-{step}_temp").is_dir()


def saved_step(prefix: str) -> int:
    """The training step checkpoint ``prefix`` holds (it reads)."""
    return int(tf.train.load_checkpoint(prefix).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.fixture(scope="module")
def big_straight(small_data_dir, tmp_path_factory) -> ModelDirectory:
    """An uninterrupted 6-step run of BIG with synchronous checkpoints (ckpt-2, 4, 6: the one the kill
    below interrupts and one after it)."""
    path = str(tmp_path_factory.mktemp("big-straight") / "model")
    assert train(small_data_dir, path, 6, base=BIG) == 0
    return ModelDirectory(path)


@pytest.mark.slow  # 40 s: a straight run, a killed child, a resumed run (BIG)
def test_a_sigkill_during_a_background_write_resumes_exactly_from_the_checkpoint_before(small_data_dir,
                                                                                       big_straight, tmp_path, capsys):
    model_dir = tmp_path / "killed"
    checkpoints = model_dir / "checkpoints"
    process = start_training(small_data_dir, str(model_dir), 6)
    wait_for(lambda: (checkpoints / "ckpt-2.index").exists() and writing(checkpoints, 4), process,
             interval=0.002, what="the write of ckpt-4")
    signal_and_wait(process, signal.SIGKILL)
    assert writing(checkpoints, 4) and not (checkpoints / "ckpt-4.index").exists()  # killed mid-write
    assert tf.train.latest_checkpoint(str(checkpoints)) == str(checkpoints / "ckpt-2")
    capsys.readouterr()
    assert train(small_data_dir, str(model_dir), 6, ASYNC, base=BIG) == 0
    assert "warning: removed ckpt-4_temp under " in capsys.readouterr().err
    resumed, expected = ModelDirectory(str(model_dir)).step_losses(), big_straight.step_losses()
    assert sorted(resumed) == list(range(1, 7))
    np.testing.assert_allclose([resumed[s] for s in range(1, 7)], [expected[s] for s in range(1, 7)], rtol=1e-5)
    assert [row["step"] for row in ModelDirectory(str(model_dir)).step_rows()] == list(range(1, 7))
    assert not any(name.endswith("_temp") for name in os.listdir(checkpoints))  # ckpt-4 written again
    written, expected = tensors_of(str(checkpoints / "ckpt-6")), tensors_of(big_straight.latest_checkpoint())
    assert written.keys() == expected.keys()
    # Not bitwise: threaded float sums (deterministic=false) differ run to run by a few float32 ulps of
    # values near 1 (3.6e-7 measured on a memory state); a wrong resume differs by far more.
    for name in written.keys() - {"_CHECKPOINTABLE_OBJECT_GRAPH"}:
        np.testing.assert_allclose(written[name], expected[name], rtol=1e-4, atol=2e-6, err_msg=name)


@pytest.mark.slow  # 25 s: one child run of BIG, stopped with SIGTERM during a write
def test_sigterm_during_a_background_write_waits_for_it_and_for_the_last_checkpoint(small_data_dir, tmp_path):
    model_dir = tmp_path / "preempted"
    checkpoints = model_dir / "checkpoints"
    process = start_training(small_data_dir, str(model_dir), 100000)
    wait_for(lambda: (checkpoints / "ckpt-2.index").exists() and writing(checkpoints, 4), process,
             interval=0.002, what="the write of ckpt-4")
    output = signal_and_wait(process, signal.SIGTERM, timeout=120)
    assert process.returncode == 0, output
    last = max(ModelDirectory(str(model_dir)).step_losses())
    assert f"saved checkpoint at step {last}, exiting" in output and '"stopped": "preempted"' in output
    # 6: the signal came while the loop beside the write of ckpt-4 ran; it ran to its end, saved ckpt-6 and
    # the run stopped. 4: it came before that loop began (on a loaded machine the background write can
    # start first, seen in CI); the run stopped once the write was done. Either way every write completed.
    assert last in (4, 6)
    assert not any(name.endswith("_temp") for name in os.listdir(checkpoints))
    names = [posixpath.basename(p) for p in tf.train.get_checkpoint_state(str(checkpoints)).all_model_checkpoint_paths]
    assert names == [f"ckpt-{step}" for step in range(2, last + 1, 2)]
    assert all(saved_step(str(checkpoints / name)) == int(name.split("-")[1]) for name in names)


@pytest.mark.slow  # 15 s: one in-process run of BIG
def test_train_returns_with_its_last_checkpoint_complete_and_written_once(small_data_dir, tmp_path):
    from tfrecords.manifest import load_manifest
    from trainer.configs.overrides import resolve_configs
    from trainer.tasks.pretraining import pretraining_controller

    model, config, _ = resolve_configs("tiny", None, [*BIG, *SMALL_DATA_TRAINING, "train_steps=4", ASYNC])
    seen = []  # what the command's after_first_save (it saves changed settings) finds on disk when called
    controller = pretraining_controller(
        model.replace(vocab_size=1000), config, manifest=load_manifest(small_data_dir), model_dir=str(tmp_path),
        strategy=tf.distribute.get_strategy(), log=lambda line: None,
        after_first_save=lambda start: seen.append((start, tf.train.latest_checkpoint(str(tmp_path / "checkpoints")))))
    result = controller.train()
    assert not controller.manager.checkpoint.writing  # complete when train returns, not after
    assert seen == [(0, str(tmp_path / "checkpoints" / "ckpt-2"))]  # called once ckpt-2 was complete
    latest = controller.manager.latest_checkpoint
    assert result.step == 4 and latest == tf.train.latest_checkpoint(str(tmp_path / "checkpoints"))
    assert latest.endswith("ckpt-4") and saved_step(latest) == 4
    assert int(tf.train.load_checkpoint(latest).get_tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE")) == 2


@pytest.mark.slow  # 25 s: three short runs on a tmpfs
def test_a_full_disk_during_a_background_write_stops_with_status_3_naming_that_checkpoint(small_data_dir, tmp_path,
                                                                                          capsys):
    disk = tmp_path / "disk"
    with small_tmpfs(disk, 64 << 20):
        model_dir = str(disk / "model")
        directory = ModelDirectory(model_dir)
        assert train(small_data_dir, model_dir, 2, ASYNC) == 0
        checkpoint = sum(os.path.getsize(p) for p in (disk / "model" / "checkpoints").glob("ckpt-2.*"))
        stat = os.statvfs(disk)
        # room for the step log and events, not for ckpt-4
        resize(disk, (stat.f_blocks - stat.f_bfree) * stat.f_frsize + checkpoint // 2)
        capsys.readouterr()
        assert train(small_data_dir, model_dir, 6, ASYNC) == EXIT_DATA  # raised at the save of step 6
        err = capsys.readouterr().err
        assert "cannot save checkpoint " in err and "ckpt-4: no space left on the device" in err
        assert "Free space under " in err and "resumes from " in err and "ckpt-2" in err and "Traceback" not in err
        assert "its partial files were removed (ckpt-4_temp" in err
        assert sorted(tf.io.gfile.listdir(directory.checkpoints)) == [
            "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
        resize(disk, 64 << 20)
        assert train(small_data_dir, model_dir, 6, ASYNC) == 0
        assert [row["step"] for row in directory.step_rows()] == list(range(1, 7))
        assert directory.latest_checkpoint().endswith("ckpt-6")


@pytest.mark.slow  # 60-120 s: two local runs, then the same two on the emulator with 10% of requests failing
def test_on_gcs_with_injected_faults_background_writes_resume_with_the_local_losses(small_data_dir, gcs, gcs_prefix,
                                                                                    tmp_path):
    local = str(tmp_path / "local")  # the same two runs, synchronous checkpoints on the local disk
    assert train(small_data_dir, local, 4) == 0 and train(small_data_dir, local, 8) == 0
    model_dir = posixpath.join(gcs_prefix, "model")
    gcs.set_faults(fail_share=0.1, drop_upload_share=0.1, seed=3)
    try:
        assert train(small_data_dir, model_dir, 4, ASYNC) == 0
        assert train(small_data_dir, model_dir, 8, ASYNC) == 0
        counts = gcs.fault_counts()
    finally:
        gcs.set_faults()
    assert counts["unavailable"] > 0 and counts["dropped_uploads"] > 0, counts
    directory = ModelDirectory(model_dir)
    expected, resumed = ModelDirectory(local).step_losses(), directory.step_losses()
    assert sorted(resumed) == list(range(1, 9))
    np.testing.assert_allclose([resumed[s] for s in range(1, 9)], [expected[s] for s in range(1, 9)], rtol=1e-5)
    assert [posixpath.basename(p) for p in checkpoint_history.read_history(directory.checkpoints).prefixes] == [
        "ckpt-4", "ckpt-6", "ckpt-8"]
    assert not tf.io.gfile.glob(posixpath.join(directory.checkpoints, "*_temp*"))


@pytest.mark.slow  # 40 s: two worker processes
def test_two_workers_write_their_checkpoints_in_the_background_with_the_same_weights(small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    args = ["-m", "trainer.task", "--data", small_data_dir, "--model-dir", str(model_dir), "--preset", "tiny",
            "--strategy", "multi-worker", *settings(6, ASYNC, "train_batch_size=8", "eval_batch_size=8")]
    processes = start_as_two_workers(args)
    for process, output in zip(processes, output_of(*processes)):
        assert process.returncode == 0, output
    directories = [model_dir / "checkpoints", model_dir / "workers" / "worker-1" / "checkpoints"]
    for directory in directories:
        state = tf.train.get_checkpoint_state(str(directory))
        names = [posixpath.basename(p) for p in state.all_model_checkpoint_paths]
        assert names == ["ckpt-2", "ckpt-4", "ckpt-6"] and not any(n.endswith("_temp") for n in os.listdir(directory))
    chief, worker = (tensors_of(str(directory / "ckpt-6")) for directory in directories)
    weights = [name for name in chief if name.startswith("model/")]
    assert weights and all(np.array_equal(worker[name], chief[name]) for name in weights)
