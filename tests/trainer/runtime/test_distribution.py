"""tf.distribute: two replicas compute what one device computes; two worker processes agree; a worker
that loses the other says so in one line."""
from __future__ import annotations

import json
import re
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING
from support.distribution import assert_two_replicas_step_as_one_device
from support.processes import output_of, start_as_two_workers, wait_for
from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.controller import Controller
from trainer.runtime.distribution import lost_worker
from trainer.tasks.pretraining import STEP_LOG, pretraining_controller

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
         "eval_batch_size=8", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "dropout=0", "dropatt=0"]


def make_trainer(data_dir, model_dir, strategy) -> Controller:
    model, train, _ = resolve_configs("tiny", None, SMALL + SMALL_DATA_TRAINING + ["train_steps=3"])
    return pretraining_controller(model.replace(vocab_size=SMALL_DATA["vocab_size"]), train,
                                  manifest=load_manifest(str(data_dir)), model_dir=str(model_dir), strategy=strategy,
                                  log=lambda line: None)


@pytest.mark.slow  # about 15 s: two runs
def test_mirrored_over_two_devices_matches_one_device_with_the_same_global_batch(small_data_dir, tmp_path,
                                                                                   mirrored_strategy):
    # two steps: the second one runs on the memory the first one left on each replica
    assert_two_replicas_step_as_one_device(
        lambda strategy, name: make_trainer(small_data_dir, tmp_path / name, strategy), mirrored_strategy)


def start_two_workers(data_dir, model_dir, *overrides: str) -> list:
    """`python -m trainer.task --strategy multi-worker` as worker 0 (chief) and worker 1 on 127.0.0.1."""
    args = ["-m", "trainer.task", "--data", str(data_dir), "--model-dir", str(model_dir), "--preset", "tiny",
            "--strategy", "multi-worker"]
    for item in SMALL + SMALL_DATA_TRAINING + list(overrides):
        args += ["--set", item]
    return start_as_two_workers(args)


@pytest.mark.slow
def test_two_worker_processes_train_in_lockstep_and_agree(small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    processes = start_two_workers(small_data_dir, model_dir, "train_steps=4", "checkpoint_every=4", "eval_every=0")
    outputs = output_of(*processes)
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
def test_sigterm_to_one_worker_stops_every_worker_at_the_same_step(small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    processes = start_two_workers(small_data_dir, model_dir, "train_steps=100000", "checkpoint_every=100000",
                                  "eval_every=0")
    log = model_dir / "workers" / "worker-1" / STEP_LOG
    wait_for(lambda: log.exists() and log.read_text().count("\n") >= 2, *processes, what="two steps of worker 1")
    processes[1].send_signal(signal.SIGTERM)  # worker 1 only, as when one VM of a pool is preempted
    outputs = output_of(*processes)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    assert "another worker was signalled" in outputs[0]
    checkpoints = [tf.train.latest_checkpoint(str(directory / "checkpoints"))
                   for directory in (model_dir, model_dir / "workers" / "worker-1")]
    steps = {int(path.rsplit("-", 1)[1]) for path in checkpoints}
    assert len(steps) == 1 and steps.pop() % 2 == 0  # one loop boundary (steps_per_loop=2) for both


@pytest.mark.slow  # 60-100 s under load: two workers started, one killed
def test_a_lost_worker_stops_the_other_with_one_line_naming_it_and_the_checkpoint_to_resume_from(small_data_dir,
                                                                                               tmp_path):
    model_dir = tmp_path / "model"
    processes = start_two_workers(small_data_dir, model_dir, "train_steps=100000", "checkpoint_every=4",
                                  "eval_every=0")
    survivor_checkpoints = model_dir / "workers" / "worker-1" / "checkpoints"
    wait_for(lambda: tf.train.latest_checkpoint(str(survivor_checkpoints)), *processes, what="worker 1's ckpt-4")
    processes[0].kill()  # the chief, as when its VM goes away
    began = time.monotonic()
    (output,) = output_of(processes[1], timeout=180)  # it does not hang
    processes[0].communicate()
    assert processes[1].returncode == 3 and "Traceback" not in output, output[-3000:]
    assert time.monotonic() - began < 120
    lines = [line for line in output.splitlines() if "train: error:" in line]  # not TensorFlow's own C++ log
    assert len(lines) == 1, output[-3000:]
    assert re.search(r"error: worker 0 \(127\.0\.0\.1:\d+\) of the 2 workers in TF_CONFIG stopped answering .* "
                     r"Restart ALL workers with the same command: they resume from the last checkpoint all of them "
                     r"saved \((.+/ckpt-\d+) here\)$", lines[0]), lines[0]
    named = re.search(r"\((\S+/ckpt-\d+) here\)$", lines[0]).group(1)
    assert tf.io.gfile.exists(named + ".index")


def cluster_of(workers: list[str], me: int) -> SimpleNamespace:
    """What lost_worker reads of a multi-worker strategy: its cluster resolver (TF_CONFIG's cluster)."""
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": workers}), task_type="worker", task_id=me)
    return SimpleNamespace(cluster_resolver=resolver)


def test_a_lost_worker_is_named_as_tf_config_gives_it_from_what_the_failed_collective_says():
    three = cluster_of(["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"], me=0)
    unhealthy = tf.errors.UnavailableError(None, None, "Collective ops is aborted by: Error reported from "
                                           "/job:worker/task:0: The following tasks are unhealthy (stopped sending "
                                           "heartbeats):\n/job:worker/replica:0/task:2\nThe tasks have crashed.")
    assert lost_worker(unhealthy, three) == "worker 2 (10.0.0.3:2222)"
    reset = tf.errors.InternalError(None, None, "CollectiveReduceV2: failed to connect to 10.0.0.2:2222: "
                                    "Connection reset by peer")
    assert lost_worker(reset, three) == "worker 1 (10.0.0.2:2222)"
    anonymous = tf.errors.UnavailableError(None, None, "Socket closed")
    assert lost_worker(anonymous, three) == "another worker"
    assert lost_worker(anonymous, cluster_of(["10.0.0.1:2222", "10.0.0.2:2222"], me=1)) == "worker 0 (10.0.0.1:2222)"


def test_an_error_that_is_no_lost_peer_or_a_single_worker_run_names_no_worker():
    two = cluster_of(["10.0.0.1:2222", "10.0.0.2:2222"], me=0)
    assert lost_worker(tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [4] vs. [8]"), two) is None
    one = cluster_of(["10.0.0.1:2222"], me=0)
    assert lost_worker(tf.errors.UnavailableError(None, None, "Socket closed"), one) is None


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
