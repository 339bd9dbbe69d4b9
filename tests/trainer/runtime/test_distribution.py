"""tf.distribute: two replicas compute what one device computes; two worker processes agree."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from support.distribution import assert_two_replicas_step_as_one_device
from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.controller import Controller
from trainer.tasks.pretraining import STEP_LOG, pretraining_controller

REPO = Path(__file__).resolve().parents[3]
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
         "eval_batch_size=8", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "dropout=0", "dropatt=0"]


def make_trainer(data_dir, model_dir, strategy) -> Controller:
    model, train, _ = resolve_configs("tiny", None, SMALL + ["train_steps=3"])
    return pretraining_controller(model.replace(vocab_size=8000), train, manifest=load_manifest(str(data_dir)),
                   model_dir=str(model_dir), strategy=strategy, log=lambda line: None)


def test_mirrored_over_two_devices_matches_one_device_with_the_same_global_batch(tiny_data_dir, tmp_path,
                                                                                   mirrored_strategy):
    # two steps: the second one runs on the memory the first one left on each replica
    assert_two_replicas_step_as_one_device(
        lambda strategy, name: make_trainer(tiny_data_dir, tmp_path / name, strategy), mirrored_strategy)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_two_workers(data_dir, model_dir, *overrides: str) -> list[subprocess.Popen]:
    """`python -m trainer.task --strategy multi-worker` as worker 0 (chief) and worker 1 on 127.0.0.1."""
    args = [sys.executable, "-m", "trainer.task", "--data", str(data_dir), "--model-dir", str(model_dir),
            "--preset", "tiny", "--strategy", "multi-worker"]
    for item in SMALL + list(overrides):
        args += ["--set", item]
    return start_as_two_workers(args)


def start_as_two_workers(args: list[str]) -> list[subprocess.Popen]:
    """The command ``args`` as worker 0 (chief) and worker 1 of one TF_CONFIG cluster on 127.0.0.1."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        processes.append(subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    return processes


def outputs_of(processes: list[subprocess.Popen], timeout: float = 300) -> list[str]:
    """Each process's output once it exits; kills them all if one takes longer than ``timeout``."""
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for p in processes:
                p.kill()
            raise
    return outputs


@pytest.mark.slow
def test_two_worker_processes_train_in_lockstep_and_agree(tiny_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    processes = start_two_workers(tiny_data_dir, model_dir, "train_steps=4", "checkpoint_every=4", "eval_every=0")
    outputs = outputs_of(processes)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    logs = [model_dir / STEP_LOG, model_dir / "workers" / "worker-1" / STEP_LOG]
    losses = [[json.loads(line)["loss"] for line in log.read_text().splitlines()] for log in logs]
    assert len(losses[0]) == 4
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
    checkpoints = [tf.train.latest_checkpoint(str(log.parent / "checkpoints")) for log in logs]
    assert all(path.endswith("ckpt-4") for path in checkpoints)
    readers = [tf.train.load_checkpoint(path) for path in checkpoints]
    for name, _ in tf.train.list_variables(checkpoints[0]):
        if name.startswith("model/"):
            np.testing.assert_array_equal(readers[1].get_tensor(name), readers[0].get_tensor(name), err_msg=name)


@pytest.mark.slow
def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step(tiny_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    processes = start_two_workers(tiny_data_dir, model_dir, "train_steps=100000", "checkpoint_every=100000",
                                  "eval_every=0")
    log = model_dir / "workers" / "worker-1" / STEP_LOG
    deadline = time.time() + 240
    while not (log.exists() and log.read_text().count("\n") >= 2):
        assert time.time() < deadline and all(p.poll() is None for p in processes), "workers did not start"
        time.sleep(0.2)
    processes[1].send_signal(signal.SIGTERM)  # worker 1 only, as when one VM of a pool is preempted
    outputs = outputs_of(processes)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    assert "another worker was signalled" in outputs[0]
    checkpoints = [tf.train.latest_checkpoint(str(directory / "checkpoints"))
                   for directory in (model_dir, model_dir / "workers" / "worker-1")]
    steps = {int(path.rsplit("-", 1)[1]) for path in checkpoints}
    assert len(steps) == 1 and steps.pop() % 2 == 0  # one loop boundary (steps_per_loop=2) for both


def test_strategy_flag_selects_the_strategy_and_refuses_what_cannot_run(monkeypatch):
    from trainer.runtime.distribution import create_strategy

    assert isinstance(create_strategy("cpu"), tf.distribute.OneDeviceStrategy)
    assert create_strategy("mirrored").num_replicas_in_sync == 2  # the two logical CPUs of conftest
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        create_strategy("multi-worker")
    with pytest.raises(ValueError, match="no GPU"):
        create_strategy("gpu")
    with pytest.raises(ValueError, match="--strategy"):
        create_strategy("fast")
