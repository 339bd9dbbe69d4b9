"""The checkpoint history is the truth on disk (trainer/runtime/checkpoint_history.py, used by
trainer/runtime/model_dir.py and the controller): a fallback keeps the checkpoints before it, a
missing or damaged checkpoints/checkpoint is rebuilt from the ckpt-N.index files present, a run
never starts over while a readable checkpoint is there, a checkpoint set aside twice under one name
keeps both, a name pointing outside checkpoints/ is refused before anything is touched, a full
disk during a save is an error that leaves no temporary files and a resumable run, and the last
checkpoint is written once.

The unit tests use real checkpoints of a two-variable tf.train.Checkpoint; the others run
`xlnet train` on the small bundled data directory."""
from __future__ import annotations

import os
import posixpath
import shutil
import subprocess

import pytest
import tensorflow as tf

import xlnet_cli
from tfrecords.errors import EXIT_DATA, exit_code
from trainer.runtime import checkpoint_history
from trainer.runtime.checkpoint_history import CheckpointNameError
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import SMALL_DATA_TRAINING

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "checkpoint_every=2",
         "keep_checkpoints=5", "eval_every=0"]


def train(data_dir: str, model_dir: str, steps: int, *extra: str) -> int:
    args = ["train", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny"]
    settings = SMALL + SMALL_DATA_TRAINING + [f"train_steps={steps}", *extra]
    return xlnet_cli.main(args + [arg for item in settings for arg in ("--set", item)])


def truncate(path: str) -> None:
    data = tf.io.gfile.GFile(path, "rb").read()
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(data[:len(data) // 2])


def damage(directory: ModelDirectory, step: int) -> None:
    [data] = tf.io.gfile.glob(posixpath.join(directory.checkpoints, f"ckpt-{step}.data-*"))
    truncate(data)


def names(prefixes) -> list[str]:
    return [posixpath.basename(prefix) for prefix in prefixes]


def listed(directory: ModelDirectory) -> list[str]:
    """The checkpoints checkpoints/checkpoint lists, as TensorFlow reads it."""
    state = tf.train.get_checkpoint_state(directory.checkpoints)
    return names(state.all_model_checkpoint_paths) if state else []


class Checkpoints:
    """Real checkpoints of a step and a value (value = step * scale) under DIR/checkpoints/."""

    def __init__(self, path: str, keep: int = 5):
        self.directory = ModelDirectory(path)
        self.step, self.value = tf.Variable(0, dtype=tf.int64), tf.Variable(0.0)
        self.checkpoint = tf.train.Checkpoint(step=self.step, value=self.value)
        self.keep = keep

    def manager(self) -> tf.train.CheckpointManager:
        return tf.train.CheckpointManager(self.checkpoint, self.directory.checkpoints, max_to_keep=self.keep,
                                          step_counter=self.step)

    def save(self, *steps: int, scale: float = 1.0) -> None:
        manager = self.manager()
        for step in steps:
            self.step.assign(step)
            self.value.assign(step * scale)
            manager.save(checkpoint_number=step)

    def value_of(self, prefix: str) -> float:
        return float(tf.train.load_checkpoint(prefix).get_tensor("value/.ATTRIBUTES/VARIABLE_VALUE"))


# ------------------------------------------------------------------------------------ defect 1
def test_a_fallback_keeps_every_checkpoint_before_it_in_the_list(tmp_path):
    checkpoints = Checkpoints(str(tmp_path))
    checkpoints.save(2, 4, 6)
    moved = checkpoints.directory.set_aside_checkpoint(posixpath.join(checkpoints.directory.checkpoints, "ckpt-6"))
    assert moved.endswith("damaged/ckpt-6")
    assert listed(checkpoints.directory) == ["ckpt-2", "ckpt-4"]
    # the manager a resumed run builds keeps them: its next saves add to the list, not replace it
    checkpoints.save(6, 8)
    assert listed(checkpoints.directory) == ["ckpt-2", "ckpt-4", "ckpt-6", "ckpt-8"]


@pytest.mark.parametrize("state", [None, b"\x00\xffnot a checkpoint state {{{", b""],
                         ids=["missing", "damaged", "empty"])
def test_a_missing_or_damaged_state_file_is_rebuilt_from_the_checkpoints_present(tmp_path, state):
    checkpoints = Checkpoints(str(tmp_path))
    checkpoints.save(2, 4, 6)
    path = posixpath.join(checkpoints.directory.checkpoints, "checkpoint")
    os.remove(path)
    if state is not None:
        with open(path, "wb") as handle:
            handle.write(state)
    history = checkpoints.directory.checkpoint_history()
    assert names(history.prefixes) == ["ckpt-2", "ckpt-4", "ckpt-6"] and history.rebuilt
    assert checkpoints.directory.latest_checkpoint().endswith("ckpt-6")
    checkpoint_history.write_history(history)
    assert listed(checkpoints.directory) == ["ckpt-2", "ckpt-4", "ckpt-6"]
    assert checkpoints.manager().latest_checkpoint.endswith("ckpt-6")


def test_a_list_that_forgot_older_checkpoints_is_completed_from_the_disk(tmp_path):
    checkpoints = Checkpoints(str(tmp_path))
    checkpoints.save(2, 4, 6)
    tf.compat.v1.train.update_checkpoint_state(checkpoints.directory.checkpoints, "ckpt-6", ["ckpt-6"])
    history = checkpoints.directory.checkpoint_history()
    assert names(history.prefixes) == ["ckpt-2", "ckpt-4", "ckpt-6"]
    assert "lacks ckpt-2, ckpt-4" in history.rebuilt


@pytest.mark.slow  # 20 s: three runs; the unit tests above and the next test cover the same code
def test_a_run_never_starts_over_while_a_readable_checkpoint_is_on_disk(small_data_dir, tmp_path, capsys):
    """Defect 1 of issue 29: after a fallback the list forgot ckpt-2; damaging the two newest then
    stopped the run (status 3) and removed the list, and the next run started at step 1."""
    model_dir = str(tmp_path / "model")
    directory = ModelDirectory(model_dir)
    assert train(small_data_dir, model_dir, 6) == 0  # ckpt-2, 4, 6
    damage(directory, 6)
    assert train(small_data_dir, model_dir, 8) == 0  # resumes from 4
    before = directory.step_losses()
    assert listed(directory) == ["ckpt-2", "ckpt-4", "ckpt-6", "ckpt-8"]
    damage(directory, 6)
    damage(directory, 8)
    capsys.readouterr()
    assert train(small_data_dir, model_dir, 8) == 0
    captured = capsys.readouterr()
    assert "resumed from " in captured.out and "ckpt-4 at step 4" in captured.out
    assert "ckpt-8 cannot be read" in captured.err and "ckpt-6 cannot be read" in captured.err
    assert [row["step"] for row in directory.step_rows()] == list(range(1, 9))  # each step once
    after = directory.step_losses()  # the same run, resumed from ckpt-4 again: the same losses
    assert all(abs(after[step] - before[step]) <= 1e-5 * abs(before[step]) for step in range(1, 9))
    assert listed(directory) == ["ckpt-2", "ckpt-4", "ckpt-6", "ckpt-8"]
    damaged = tf.io.gfile.listdir(posixpath.join(directory.checkpoints, "damaged"))
    assert sorted(damaged) == [f"{name}{suffix}" for name in ("ckpt-6", "ckpt-6_2", "ckpt-8")
                               for suffix in (".data-00000-of-00001", ".index")]  # the first ckpt-6 kept


@pytest.mark.slow  # two training runs (14 s); the state rebuild itself is unit-tested above
def test_without_its_state_file_a_run_resumes_from_the_newest_checkpoint_present(small_data_dir, tmp_path,
                                                                                 capsys):
    model_dir = str(tmp_path / "model")
    directory = ModelDirectory(model_dir)
    assert train(small_data_dir, model_dir, 4) == 0
    os.remove(posixpath.join(directory.checkpoints, "checkpoint"))
    capsys.readouterr()
    assert train(small_data_dir, model_dir, 6) == 0
    captured = capsys.readouterr()
    assert "ckpt-4 at step 4" in captured.out and "checkpoint is missing" in captured.err
    assert [row["step"] for row in directory.step_rows()] == list(range(1, 7))
    assert listed(directory) == ["ckpt-2", "ckpt-4", "ckpt-6"]


@pytest.mark.slow  # training runs (8-16 s)
def test_a_directory_whose_every_checkpoint_was_set_aside_does_not_start_over(small_data_dir, tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    directory = ModelDirectory(model_dir)
    assert train(small_data_dir, model_dir, 2) == 0
    damage(directory, 2)
    assert train(small_data_dir, model_dir, 4) == EXIT_DATA
    capsys.readouterr()
    assert train(small_data_dir, model_dir, 4) == EXIT_DATA  # again, not a new run at step 1
    err = capsys.readouterr().err
    assert "were set aside to " in err and "put a readable checkpoint back" in err and "Traceback" not in err
    assert [row["step"] for row in directory.step_rows()] == [1, 2]


# ------------------------------------------------------------------------------------ defect 2
def test_a_second_quarantine_of_the_same_name_keeps_the_first(tmp_path):
    checkpoints = Checkpoints(str(tmp_path))
    checkpoints.save(2, 4)
    prefix = posixpath.join(checkpoints.directory.checkpoints, "ckpt-4")
    first = checkpoints.directory.set_aside_checkpoint(prefix)
    checkpoints.save(4, scale=10.0)
    second = checkpoints.directory.set_aside_checkpoint(prefix)
    assert names([first, second]) == ["ckpt-4", "ckpt-4_2"]
    assert (checkpoints.value_of(first), checkpoints.value_of(second)) == (4.0, 40.0)  # both whole, both readable
    assert listed(checkpoints.directory) == ["ckpt-2"]


# ------------------------------------------------------------------------------------ defect 3
@pytest.mark.parametrize("name", ["../../victim/ckpt-99", "/elsewhere/ckpt-99", "gs://bucket/ckpt-99",
                                  "sub/../../ckpt-99", "damaged/ckpt-4", ""])
def test_a_checkpoint_name_outside_the_checkpoints_directory_is_a_data_error(tmp_path, name):
    checkpoints = Checkpoints(str(tmp_path))
    checkpoints.save(2, 4)
    state = posixpath.join(checkpoints.directory.checkpoints, "checkpoint")
    with open(state, "w") as handle:
        handle.write(f'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-2"\n'
                     f'all_model_checkpoint_paths: "{name}"\nall_model_checkpoint_paths: "ckpt-4"\n')
    with pytest.raises(CheckpointNameError) as raised:
        checkpoints.directory.checkpoint_history()
    assert exit_code(raised.value) == EXIT_DATA
    assert state in str(raised.value) and repr(name) in str(raised.value)


def test_names_inside_the_checkpoints_directory_are_accepted_however_written(tmp_path):
    checkpoints = Checkpoints(str(tmp_path))
    checkpoints.save(2, 4)
    absolute = posixpath.join(os.path.abspath(checkpoints.directory.checkpoints), "ckpt-2")
    tf.compat.v1.train.update_checkpoint_state(checkpoints.directory.checkpoints, "./ckpt-4", [absolute, "./ckpt-4"])
    assert names(checkpoints.directory.checkpoint_history().prefixes) == ["ckpt-2", "ckpt-4"]


def test_xlnet_train_moves_nothing_named_outside_its_directory(small_data_dir, tmp_path, capsys):
    """Defect 3 of issue 29: an unreadable victim/ckpt-99 named by ../../victim/ckpt-99 was moved out
    of victim/ into the model directory's damaged/."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for suffix in (".index", ".data-00000-of-00001"):
        (victim / f"ckpt-99{suffix}").write_bytes(b"not a checkpoint")
    checkpoints = tmp_path / "model" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "../../victim/ckpt-99"\n'
                                            'all_model_checkpoint_paths: "../../victim/ckpt-99"\n')
    capsys.readouterr()
    assert train(small_data_dir, str(tmp_path / "model"), 2) == EXIT_DATA
    err = capsys.readouterr().err
    assert str(checkpoints / "checkpoint") in err and "'../../victim/ckpt-99'" in err and "Traceback" not in err
    assert sorted(p.name for p in victim.iterdir()) == ["ckpt-99.data-00000-of-00001", "ckpt-99.index"]
    assert not (checkpoints / "damaged").exists()
    assert ModelDirectory(str(tmp_path / "model")).step_rows() == []


# ------------------------------------------------------------------------------------ defect 4
def test_the_last_checkpoint_is_written_once(small_data_dir, tmp_path):
    model_dir = str(tmp_path / "model")
    assert train(small_data_dir, model_dir, 4) == 0  # checkpoint_every=2: saves at 2 and 4, and no more
    latest = ModelDirectory(model_dir).latest_checkpoint()
    assert latest.endswith("ckpt-4")
    assert int(tf.train.load_checkpoint(latest).get_tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE")) == 2


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs mounted at tmp_path/disk (root only), unmounted afterwards; yields (path, resize)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")

    def resize(size: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)

    try:
        yield path, resize
    finally:
        subprocess.run(["umount", str(path)], check=False)


def used_bytes(path) -> int:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


@pytest.mark.slow  # 25 s: three short runs
def test_a_full_disk_during_a_save_stops_with_status_3_and_leaves_a_resumable_run(small_data_dir, small_disk,
                                                                                   capsys):
    disk, resize = small_disk
    model_dir = str(disk / "model")
    directory = ModelDirectory(model_dir)
    assert train(small_data_dir, model_dir, 2) == 0
    checkpoint = sum(os.path.getsize(p) for p in tf.io.gfile.glob(posixpath.join(directory.checkpoints, "ckpt-2.*")))
    resize(used_bytes(disk) + checkpoint // 2)  # room for the step log and events, not for ckpt-4
    capsys.readouterr()
    assert train(small_data_dir, model_dir, 4) == EXIT_DATA
    err = capsys.readouterr().err
    assert "cannot save checkpoint " in err and "ckpt-4" in err and "Free space under " in err
    assert "resumes from " in err and "ckpt-2" in err and "Traceback" not in err
    assert sorted(tf.io.gfile.listdir(directory.checkpoints)) == [
        "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]  # no ckpt-4_temp/, no partial ckpt-4
    resize(64 << 20)
    assert train(small_data_dir, model_dir, 4) == 0
    assert [row["step"] for row in directory.step_rows()] == [1, 2, 3, 4]
    assert directory.latest_checkpoint().endswith("ckpt-4")


def test_a_checkpoint_outside_the_directory_is_never_set_aside(tmp_path):
    checkpoints = Checkpoints(str(tmp_path / "model"))
    checkpoints.save(2)
    victim = Checkpoints(str(tmp_path / "victim"))
    victim.save(2)
    outside = posixpath.join(victim.directory.checkpoints, "ckpt-2")
    with pytest.raises(CheckpointNameError, match="is not inside"):
        checkpoint_history.set_aside(checkpoints.directory.checkpoints, outside)
    assert sorted(os.listdir(victim.directory.checkpoints)) == ["checkpoint", "ckpt-2.data-00000-of-00001",
                                                                "ckpt-2.index"]
    assert sorted(os.listdir(checkpoints.directory.checkpoints)) == ["checkpoint", "ckpt-2.data-00000-of-00001",
                                                                     "ckpt-2.index"]


def test_export_reads_no_checkpoint_named_outside_the_directory(tmp_path):
    from trainer.runtime.restore import checkpoint_to_read

    checkpoints = Checkpoints(str(tmp_path / "model"))
    checkpoints.save(2)
    victim = Checkpoints(str(tmp_path / "victim"))
    victim.save(7)
    tf.compat.v1.train.update_checkpoint_state(checkpoints.directory.checkpoints, "../../victim/checkpoints/ckpt-7")
    with pytest.raises(CheckpointNameError, match="'../../victim/checkpoints/ckpt-7', which is not inside"):
        checkpoint_to_read(checkpoints.directory)


@pytest.mark.slow  # a killed and a resumed run (7-17 s)
def test_a_run_killed_before_its_first_checkpoint_is_logged_once_when_started_again(small_data_dir, tmp_path,
                                                                                    capsys):
    directory = ModelDirectory(str(tmp_path / "model"))
    (tmp_path / "model").mkdir()
    directory.append_steps({"step": step, "loss": 7.0, "grad_norm": 1.0} for step in (1, 2, 3))  # what it logged
    assert train(small_data_dir, directory.path, 2) == 0
    assert [row["step"] for row in directory.step_rows()] == [1, 2]
    assert "the 3 steps " in capsys.readouterr().err
