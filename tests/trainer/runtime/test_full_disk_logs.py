"""A full disk while a run writes its logs (train_steps.jsonl, the TensorBoard events):
exit status 3 with one sentence naming the file and what to do, no traceback, and the same
command resumes once space is freed, logging each step once (trainer/runtime/event_files.py).

The log is put on a one-page tmpfs through a symbolic link, so that the disk fills at a log
write and not at a checkpoint save (which has its own error: test_checkpoint_history.py). Real
`xlnet train` processes on the small bundled data directory; mounting needs root (else skipped).
"""
from __future__ import annotations

import os
import subprocess

import pytest
import tensorflow as tf
from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import start
from support.small_disk import resize, small_tmpfs

from tfrecords.errors import EXIT_DATA
from trainer.runtime import event_files
from trainer.runtime.event_files import LogWriteError, append_text, full_disk_stops_the_run
from trainer.runtime.model_dir import ModelDirectory

PAGE = 4096
SMALL = ["n_layer=1", "d_model=32", "n_head=2", "d_head=16", "d_inner=64", "mem_len=16", "train_batch_size=2",
         "eval_batch_size=2", "steps_per_loop=2", "warmup_steps=2", "checkpoint_every=4", "keep_checkpoints=50",
         "eval_every=0"]


def train(data_dir: str, model_dir: str, steps: int) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `xlnet train` to ``steps`` in its own process."""
    settings = SMALL + SMALL_DATA_TRAINING + [f"train_steps={steps}"]
    process = start(["-m", "xlnet_cli", "train", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny",
                     *[arg for item in settings for arg in ("--set", item)]], stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=300)
    return process.returncode, out, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("xlnet train: error:")]


# ---------------------------------------------------------------------------- the writing functions
def test_an_append_cut_short_by_a_full_disk_leaves_the_file_as_it_was(tmp_path):
    with small_tmpfs(tmp_path / "disk", PAGE) as disk:
        path = str(disk / "train_steps.jsonl")
        append_text(path, '{"step": 1}\n')
        with pytest.raises(tf.errors.ResourceExhaustedError):
            append_text(path, '{"step": 2}\n' * 1000)
        assert open(path).read() == '{"step": 1}\n'


def test_a_full_disk_is_a_sentence_naming_the_file_and_the_checkpoint_to_resume_from(tmp_path):
    with small_tmpfs(tmp_path / "disk", PAGE) as disk:
        path = str(disk / "train_steps.jsonl")
        with pytest.raises(LogWriteError) as raised:
            with full_disk_stops_the_run(path, str(disk), lambda: "/m/checkpoints/ckpt-8"):
                append_text(path, "x" * (2 * PAGE))
    assert str(raised.value) == (
        f"cannot write {path}: no space left on the device. Free space under {disk} and run the same command "
        "again: the run resumes from /m/checkpoints/ckpt-8 and logs the steps after it again")


def test_memory_exhausted_is_not_taken_for_a_full_disk():
    error = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor with shape[64,512]")
    assert not event_files.is_full_disk(error)
    with pytest.raises(tf.errors.ResourceExhaustedError):
        with full_disk_stops_the_run("/m/train_steps.jsonl", "/m", lambda: None):
            raise error


def test_tensorstores_no_space_left_is_a_full_disk_and_its_other_exhaustions_are_not():
    # How tensorstore (Orbax's writes on the JAX engine) tells them: a ValueError.
    full = ValueError('RESOURCE_EXHAUSTED: Error writing "optimizer.16/0" in OCDBT database at local file "/m/": '
                      "Failed to write 86910 bytes to file 27: No space left on device [os_error_code='28']")
    other = ValueError("RESOURCE_EXHAUSTED: Out of memory while allocating 4294967296 bytes")
    assert event_files.is_full_disk(full) and not event_files.is_full_disk(other)
    assert not event_files.is_full_disk(ValueError("No space left on device, said a user's text"))


# ------------------------------------------------------------------------------- xlnet train, end to end
@pytest.mark.slow  # two training processes, 40 s
@pytest.mark.parametrize("log", ["train_steps.jsonl", "tensorboard/train"])
def test_a_full_disk_under_a_log_stops_with_status_3_and_the_run_resumes_once_space_is_freed(
        small_data_dir, tmp_path, log):
    steps = 60  # a one-page disk fills before: a step-log row is about 90 bytes, a loop's events about 430
    model_dir = tmp_path / "model"
    (model_dir / "tensorboard").mkdir(parents=True)
    with small_tmpfs(tmp_path / "disk", PAGE) as disk:
        os.symlink(disk / "log", model_dir / log)  # the log alone on the small disk
        if log.startswith("tensorboard"):
            (disk / "log").mkdir()

        status, _, err = train(small_data_dir, str(model_dir), steps)
        assert status == EXIT_DATA, err
        assert "Traceback" not in err
        directory = ModelDirectory(str(model_dir))
        latest = directory.latest_checkpoint()
        [line] = error_lines(err)
        assert line.startswith(f"xlnet train: error: cannot write {model_dir / log}")
        assert line.endswith(f": no space left on the device. Free space under {model_dir} and run the same "
                             f"command again: the run resumes from {latest} and logs the steps after it again")
        stopped_at = int(latest.rsplit("-", 1)[1])
        assert 0 < stopped_at < steps  # the disk filled mid-run
        logged = [row["step"] for row in directory.step_rows()]
        assert logged == list(range(1, len(logged) + 1))  # whole rows, no torn line

        resize(disk, 64 * PAGE)  # space freed
        status, out, err = train(small_data_dir, str(model_dir), steps)
        assert status == 0, err
        assert f"resumed from {latest} at step {stopped_at}" in out
        assert [row["step"] for row in directory.step_rows()] == list(range(1, steps + 1))
        # the first loop of a process is one step, the others end on even steps
        assert sorted(directory.scalars("train", "loss")) == sorted({1, stopped_at + 1, *range(2, steps + 1, 2)})
