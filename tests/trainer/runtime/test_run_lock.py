"""One run per model directory (trainer/runtime/run_lock.py): the lock, its owner in the message, taking
over a dead owner's lock, and two real `xlnet train` processes on one directory."""
from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

import xlnet_cli
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.run_lock import RunLock, RunLockError

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import exited_pid, start, wait_for

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
    heartbeat = lambda: json.loads((tmp_path / RunLock.FILE).read_text())["heartbeat"]
    with RunLock(directory, heartbeat_seconds=0.1) as lock:
        first = heartbeat()
        assert first == lock.record["started"]
        deadline = time.monotonic() + 30  # a refresh is due every 0.1 s; the deadline only bounds a failure
        while heartbeat() <= first:
            assert time.monotonic() < deadline, "the heartbeat was not refreshed in 30 s"
            time.sleep(0.02)


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
