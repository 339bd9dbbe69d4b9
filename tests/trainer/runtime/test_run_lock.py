"""One run per model directory (trainer/runtime/run_lock.py): the lock, its owner in the message, taking
over a dead owner's lock, and two real `xlnet train` processes on one directory."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

import xlnet_cli
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.run_lock import RunLock, RunLockError
from trainer.runtime.storage import StorageError

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import exited_pid, start, wait_for
from support.read_only_mount import read_only_directory

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "eval_every=0"]


def write_lock(directory: ModelDirectory, **record) -> None:
    now = time.time()
    values = {"host": socket.gethostname(), "pid": os.getpid(), "started": now, "heartbeat": now, "token": "x"}
    (open(directory.join(RunLock.FILE), "w")).write(json.dumps({**values, **record}))


def test_a_second_lock_on_the_directory_is_refused_naming_the_owner(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    with RunLock(directory):
        with pytest.raises(RunLockError, match=f"in use by another run: host {socket.gethostname()}, "
                                               f"pid {os.getpid()}, started .* UTC, last heartbeat"):
            RunLock(directory).acquire()
    assert not (tmp_path / RunLock.FILE).exists()  # released
    with RunLock(directory):
        pass


def test_the_lock_of_a_process_gone_from_this_host_is_taken_over_with_a_warning(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    pid = exited_pid()
    write_lock(directory, pid=pid)
    said = []
    with RunLock(directory, log=said.append):
        assert json.loads((tmp_path / RunLock.FILE).read_text())["pid"] == os.getpid()
    assert said and f"no process {pid} on this host" in said[0] and f"pid {pid}" in said[0]


def test_another_hosts_lock_is_kept_while_its_heartbeat_is_fresh_and_taken_over_when_old(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    write_lock(directory, host="tpu-worker-7", pid=1)
    with pytest.raises(RunLockError, match="host tpu-worker-7, pid 1"):
        RunLock(directory).acquire()
    write_lock(directory, host="tpu-worker-7", pid=1, heartbeat=time.time() - 3600)
    said = []
    with RunLock(directory, log=said.append):
        pass
    assert "no heartbeat for 3600s" in said[0]


def test_the_heartbeat_is_refreshed_while_the_lock_is_held(tmp_path):
    directory = ModelDirectory(str(tmp_path))

    def heartbeat() -> float:
        """The lock's heartbeat; 0 when read while a beat rewrites the file (as RunLock's own reads allow)."""
        try:
            return json.loads((tmp_path / RunLock.FILE).read_text())["heartbeat"]
        except json.JSONDecodeError:  # seen once under load: an empty file, mid-rewrite
            return 0.0

    with RunLock(directory, heartbeat_seconds=0.1) as lock:
        first = lock.record["started"]
        deadline = time.monotonic() + 30  # a refresh is due every 0.1 s; the deadline only bounds a failure
        while heartbeat() <= first:
            assert time.monotonic() < deadline, "the heartbeat was not refreshed in 30 s"
            time.sleep(0.02)


def test_the_heartbeat_file_holds_the_locks_record_until_the_run_releases_it(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    with RunLock(directory, heartbeat_seconds=60) as lock:  # no beat during the test: the record stays as written
        assert json.loads((tmp_path / RunLock.HEARTBEAT_FILE).read_text()) == lock.record
        (tmp_path / RunLock.FILE).unlink()  # removed by hand: the heartbeat file stays for the next run
        assert (tmp_path / RunLock.HEARTBEAT_FILE).exists()
    assert not (tmp_path / RunLock.HEARTBEAT_FILE).exists()


def test_on_gcs_a_second_lock_is_refused_too(gcs_prefix):
    directory = ModelDirectory(gcs_prefix + "model")
    with RunLock(directory):
        with pytest.raises(RunLockError, match="in use by another run"):
            RunLock(directory).acquire()


def test_a_second_xlnet_train_on_a_directory_in_use_exits_2_and_names_the_first(small_data_dir, tmp_path, capsys):
    model_dir = tmp_path / "model"
    args = ["train", "--data", small_data_dir, "--model-dir", str(model_dir), "--preset", "tiny"]
    settings = SMALL + SMALL_DATA_TRAINING + ["train_steps=100000", "checkpoint_every=100000"]
    args += [arg for item in settings for arg in ("--set", item)]
    first = start(["xlnet_cli.py", *args])
    try:
        wait_for((model_dir / ModelDirectory.STEP_LOG).exists, first, what="its first step")  # it holds the lock
        assert xlnet_cli.main(args) == 2
        err = capsys.readouterr().err
        assert f"is in use by another run: host {socket.gethostname()}, pid {first.pid}" in err
        assert "Traceback" not in err
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=240) == 0
    assert not (model_dir / RunLock.FILE).exists()  # released at exit


def age_lock(directory: ModelDirectory, seconds: float) -> None:
    """Sets the lock file's modification time ``seconds`` in the past (negative: the future)."""
    when = time.time() - seconds
    os.utime(directory.join(RunLock.FILE), (when, when))


def test_an_empty_lock_is_held_as_one_being_written_until_it_is_older_than_the_takeover_timeout(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    (tmp_path / RunLock.FILE).write_text("")  # a lock being written is empty for a moment
    with pytest.raises(RunLockError, match=r"is in use by another run: unknown owner \(the lock file is empty or "
                                           r"cannot be read: being written, or cut short\); wait for it to finish"):
        RunLock(directory, stale_seconds=600).acquire()
    assert (tmp_path / RunLock.FILE).read_text() == ""  # left to its writer
    age_lock(directory, 601)
    said = []
    with RunLock(directory, log=said.append, stale_seconds=600):
        assert json.loads((tmp_path / RunLock.FILE).read_text())["pid"] == os.getpid()
    assert said and re.search(r"\(its lock file cannot be read and it was last modified 60\ds ago\)", said[0])


def test_a_lock_cut_short_is_held_until_older_than_the_takeover_timeout(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    (tmp_path / RunLock.FILE).write_text('{"host": "tpu-worker-7", "pi')
    with pytest.raises(RunLockError, match="in use by another run: unknown owner"):
        RunLock(directory).acquire()
    age_lock(directory, 3600)
    with RunLock(directory, log=lambda line: None):
        pass


def test_a_heartbeat_in_the_future_is_judged_by_the_lock_files_modification_time(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    write_lock(directory, host="tpu-worker-7", pid=1, heartbeat=time.time() + 98204395020)
    with pytest.raises(RunLockError, match=r"host tpu-worker-7, pid 1, started .* UTC, last heartbeat "
                                           r"98204395\d\d\ds in the future \(a clock set wrong\); wait"):
        RunLock(directory).acquire()  # written a moment ago: its run may be alive
    age_lock(directory, 3600)
    said = []
    with RunLock(directory, log=said.append):
        pass
    assert re.search(r"\(its heartbeat is in the future and it was last modified 360\ds ago\)", said[0])


def test_a_lock_modified_far_in_the_future_is_refused_naming_the_file_to_remove(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    write_lock(directory, host="tpu-worker-7", pid=1, heartbeat=time.time() + 86400)
    age_lock(directory, -86400)
    lock = directory.join(RunLock.FILE)
    with pytest.raises(RunLockError) as raised:
        RunLock(directory).acquire()
    assert re.fullmatch(re.escape(f"--model-dir {tmp_path}: {lock} was modified ") + r"86[34]\d\d" + re.escape(
        f"s in the future and its heartbeat is in the future, so whether its run is alive cannot be told; remove "
        f"{lock} if no run is using the directory, and check this host's clock"), str(raised.value))
    assert raised.value.exit_code == 2


def test_a_model_dir_that_is_a_file_is_a_usage_error_naming_the_flag(tmp_path):
    (tmp_path / "model").write_text("not a directory")
    with pytest.raises(StorageError) as raised:
        RunLock(ModelDirectory(str(tmp_path / "model"))).acquire()
    assert str(raised.value) == f"--model-dir {tmp_path}/model cannot be written: is not a directory"
    assert raised.value.exit_code == 2


def test_a_read_only_model_dir_is_a_usage_error_naming_the_flag(read_only_dir):
    directory = ModelDirectory(str(read_only_dir / "model"))
    with pytest.raises(StorageError) as raised:
        RunLock(directory).acquire()
    assert str(raised.value) == (f"--model-dir {read_only_dir}/model cannot be written: "
                                 f"{read_only_dir}/model/run.lock: Read-only file system")
    assert not (read_only_dir / "model" / RunLock.FILE).exists()


def test_a_model_dir_that_cannot_be_created_on_a_read_only_filesystem_names_the_flag(read_only_dir):
    with pytest.raises(StorageError) as raised:
        RunLock(ModelDirectory(str(read_only_dir / "new"))).acquire()
    assert str(raised.value) == f"--model-dir {read_only_dir}/new cannot be written: Read-only file system"


def test_xlnet_train_on_a_read_only_model_dir_exits_2_with_one_line(small_data_dir, read_only_dir, capsys):
    args = ["train", "--data", small_data_dir, "--model-dir", str(read_only_dir / "model"), "--preset", "tiny"]
    args += [arg for item in SMALL + SMALL_DATA_TRAINING for arg in ("--set", item)]
    assert xlnet_cli.main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"xlnet train: error: --model-dir {read_only_dir}/model cannot be written: "
                   f"{read_only_dir}/model/run.lock: Read-only file system\n")


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[Path]:
    """A read-only directory (a read-only bind mount: root writes through permission bits) holding
    an empty directory ``model``."""
    with read_only_directory(tmp_path) as view:
        yield view
