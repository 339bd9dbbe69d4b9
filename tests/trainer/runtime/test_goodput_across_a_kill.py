"""goodput.json across a kill (trainer/runtime/goodput.py through `xlnet train`): a run killed with
SIGKILL after training past its last checkpoint still counts its time, from its process's start; the
run resuming from that checkpoint counts as another run and moves the killed run's work after the
checkpoint, which it trains again, from "productive" to "lost", and adds to "lost" the time the killed
run lived after its last record, up to its run lock's last heartbeat."""
from __future__ import annotations

import json
import signal
import time

import pytest

import xlnet_cli
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.run_lock import RunLock

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import signal_and_wait, start, stopped, wait_for

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "keep_checkpoints=2",
         "eval_every=0"]


def train_args(data_dir: str, model_dir: str, *settings: str) -> list[str]:
    args = ["--data", data_dir, "--model-dir", model_dir, "--preset", "tiny"]
    return args + [a for item in SMALL + SMALL_DATA_TRAINING + list(settings) for a in ("--set", item)]


def record(model_dir) -> dict:
    return json.loads((model_dir / ModelDirectory.GOODPUT).read_text())


def heartbeat_of(lock) -> float:
    """The run lock's heartbeat; 0 while the file is being rewritten (empty or cut short)."""
    try:
        return float(json.loads(lock.read_text())["heartbeat"])
    except (ValueError, KeyError):
        return 0.0


@pytest.mark.slow  # about 40 s: three runs, one in a child process
def test_a_killed_runs_time_counts_and_its_work_after_the_checkpoint_is_lost_when_the_next_run_replays_it(
        small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    # run 1: four steps, checkpoint 4
    assert xlnet_cli.main(["train", *train_args(small_data_dir, str(model_dir), "train_steps=4",
                                                "checkpoint_every=4")]) == 0
    first = record(model_dir)
    assert first["runs"] == 1 and first["unsaved"]["checkpoint_step"] == 4
    # run 2: resumes at 4 and saves nothing more before step 1000; killed once it has trained past step 8
    launched = time.time()
    with stopped(start(["-m", "trainer.task", *train_args(small_data_dir, str(model_dir), "train_steps=1000",
                                                          "checkpoint_every=1000")])) as process:
        wait_for(lambda: (model_dir / ModelDirectory.GOODPUT).exists() and record(model_dir)["runs"] == 2
                 and record(model_dir)["unsaved"]["last_step"] >= 8, process, what="step 8 in goodput.json")
        seen = time.time()
        signal_and_wait(process, signal.SIGKILL)
        killed_at = time.time()
    killed = record(model_dir)
    unsaved = killed["unsaved"]
    assert unsaved["checkpoint_step"] == 4 and unsaved["productive_steps"] == unsaved["last_step"] - 5  # 5: compiled
    assert unsaved["productive_seconds"] > 0
    counted = killed["total_seconds"] - first["total_seconds"]  # the killed run's seconds, start-up included
    assert seen - launched - 1.0 <= counted <= killed_at - launched + 0.1
    assert killed["seconds"]["startup"] - first["seconds"]["startup"] > 1.0  # TensorFlow's import, at least
    # run 3: resumes at 4 again and trains to 12
    assert xlnet_cli.main(["train", *train_args(small_data_dir, str(model_dir), "train_steps=12",
                                                "checkpoint_every=4")]) == 0
    final = record(model_dir)
    seconds = final["seconds"]
    assert final["runs"] == 3
    assert seconds["lost"] == pytest.approx(unsaved["productive_seconds"], abs=1e-9)  # > 0: checked above
    assert final["total_seconds"] == pytest.approx(sum(seconds.values()), abs=1e-6)
    assert final["goodput"] == pytest.approx(seconds["productive"] / final["total_seconds"])
    # steps 2-4 (run 1), 6-12 (run 3): the killed run's productive steps were all replayed
    assert final["productive_steps"] == 3 + 7


@pytest.mark.slow  # 160-170 s measured under load: a run killed once its lock beat (every 30 s) after its last record
def test_a_run_killed_in_the_middle_of_a_loop_loses_its_time_from_its_last_record_to_its_last_heartbeat(
        small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    lock = model_dir / RunLock.FILE
    # one step that compiles (recorded), then a loop of 100000 steps, never recorded: killed in its middle
    long_loop = train_args(small_data_dir, str(model_dir), "train_steps=100000", "steps_per_loop=100000",
                           "checkpoint_every=100000")
    with stopped(start(["-m", "trainer.task", *long_loop])) as process:
        wait_for(lambda: (model_dir / ModelDirectory.GOODPUT).exists() and lock.exists()
                 and record(model_dir)["unsaved"]["last_step"] == 1
                 and heartbeat_of(lock) > record(model_dir)["written_at"],
                 process, timeout=300, what="a heartbeat after the record of step 1")
        signal_and_wait(process, signal.SIGKILL)
    killed, heartbeat = record(model_dir), heartbeat_of(lock)
    assert killed["runs"] == 1 and killed["unsaved"]["last_step"] == 1  # the loop it was killed in is in no record
    assert xlnet_cli.main(["train", *train_args(small_data_dir, str(model_dir), "train_steps=2")]) == 0
    final = record(model_dir)
    assert final["runs"] == 2
    assert heartbeat > killed["written_at"]  # so the killed run's last, unrecorded loop is lost, not free
    assert final["seconds"]["lost"] == pytest.approx(heartbeat - killed["written_at"], abs=1e-6)
    assert final["total_seconds"] == pytest.approx(sum(final["seconds"].values()), abs=1e-6)
