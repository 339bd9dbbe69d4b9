"""Four worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy from TF_CONFIG), each with its own
input pipeline, on small_data_dir: 4 forward streams in 2 train shards, so fewer shard files than hosts
(docs/training.md, "Shards, streams and hosts"). With train_batch_size 8 and bi_data every worker's
replica has one forward row and its backward partner.

- the workers read disjoint streams, and their global batches are one process's;
- their per-step losses are one process's with the same global batch;
- a SIGKILL of one worker, then a restart of all four, logs the losses of an uninterrupted run.

Slow (four TensorFlow processes on two cores); every process has a deadline and is killed on any failure.
"""
from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING
from support.processes import output_of, start_as_workers, stopped, wait_for

import xlnet_cli
from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.distribution import input_pipelines
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import PretrainingTask

WORKERS = 4
# Forward stream 2 holds 45 records: its row starts a second epoch at step 46, which every run, and
# every resume from the checkpoint of step 16, still crosses with 48 steps (60 before: 12 steps more per run).
STEPS = 48
CHECKPOINT_EVERY = 16
SETTINGS = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
            "eval_batch_size=8", "steps_per_loop=2", "warmup_steps=2", "dropout=0", "dropatt=0", "eval_every=0",
            f"vocab_size={SMALL_DATA['vocab_size']}", f"train_steps={STEPS}",
            f"checkpoint_every={CHECKPOINT_EVERY}"] + SMALL_DATA_TRAINING
DEADLINE = 240.0  # seconds any group of processes may take


def train_args(data_dir, model_dir, strategy: str = "multi-worker") -> list[str]:
    args = ["train", "--data", str(data_dir), "--model-dir", str(model_dir), "--preset", "tiny", "--strategy", strategy]
    for item in SETTINGS:
        args += ["--set", item]
    return args


@contextlib.contextmanager
def four_workers(args: list[str]):
    """``python ARGS`` as the four workers of one cluster, each killed on leaving the block if it still runs."""
    processes = start_as_workers(args, WORKERS)
    with contextlib.ExitStack() as stack:
        for process in processes:
            stack.enter_context(stopped(process))
        yield processes


def run_to_the_end(processes) -> None:
    outputs = output_of(*processes, timeout=DEADLINE)
    for index, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"worker {index}:\n{output[-3000:]}"


def step_losses(model_dir: Path, worker: int = 0) -> list[float]:
    directory = ModelDirectory(str(model_dir)) if worker == 0 else ModelDirectory(str(model_dir)).worker(worker)
    return [row["loss"] for row in directory.step_rows()]


@pytest.fixture(scope="module")
def uninterrupted(small_data_dir, tmp_path_factory) -> Path:
    """The model directory of a 48-step `xlnet train` by four workers, uninterrupted."""
    model_dir = tmp_path_factory.mktemp("four_workers") / "model"
    with four_workers(["-m", "xlnet_cli", *train_args(small_data_dir, model_dir)]) as processes:
        run_to_the_end(processes)
    return model_dir


def test_one_machine_runs_one_input_pipeline(mirrored_strategy):
    assert input_pipelines(mirrored_strategy) == 1
    assert input_pipelines(tf.distribute.get_strategy()) == 1


@pytest.mark.slow
def test_each_worker_reads_its_own_streams_and_together_one_processs_global_batches(small_data_dir, tmp_path):
    script = str(Path(__file__).parents[2] / "support" / "worker_batches.py")
    with four_workers([script, str(small_data_dir), str(tmp_path), str(STEPS), *SETTINGS]) as processes:
        run_to_the_end(processes)
    parts = [np.load(tmp_path / f"worker-{index}.npz") for index in range(WORKERS)]
    for index, part in enumerate(parts):  # one pipeline per worker, as the start-up check counts them
        assert (int(part["input_pipeline_id"]), int(part["num_input_pipelines"]), int(part["input_pipelines"]),
                int(part["num_replicas_in_sync"])) == (index, WORKERS, WORKERS, WORKERS)
    streams = [set(np.unique(part["stream_id"]).tolist()) for part in parts]
    assert streams == [{0, 4}, {1, 5}, {2, 6}, {3, 7}]  # forward stream w and its reversed copy w + 4

    model, train, _ = resolve_configs("tiny", None, SETTINGS)
    reader = PretrainingTask(model, train, load_manifest(str(small_data_dir))).reader("train", train.train_batch_size)
    one = [next(iterator) for iterator in [iter(reader.dataset())] for _ in range(STEPS)]
    forward_rows = train.train_batch_size // 2
    for name in ("stream_id", "stream_pos", "input_ids"):
        alone = np.stack([step[name].numpy() for step in one])  # [steps, 1, 8, ...]: forward rows, then backward
        for worker, part in enumerate(parts):  # worker w: [forward row w, its backward partner]
            np.testing.assert_array_equal(part[name], alone[:, :, [worker, forward_rows + worker]], err_msg=name)
    assert int(np.max(parts[2]["stream_pos"][:, 0, 0])) == 44 and parts[2]["stream_pos"][-1, 0, 0] < 44  # wrapped


@pytest.mark.slow
def test_four_workers_log_the_losses_of_one_process_with_the_same_global_batch(uninterrupted, small_data_dir,
                                                                                tmp_path):
    assert xlnet_cli.main(train_args(small_data_dir, tmp_path / "one", strategy="cpu")) == 0
    alone = step_losses(tmp_path / "one")
    assert len(alone) == STEPS
    for worker in range(WORKERS):  # every worker logs the global loss
        np.testing.assert_allclose(step_losses(uninterrupted, worker), alone, rtol=1e-5, err_msg=f"worker {worker}")


@pytest.mark.slow
def test_sigkill_of_one_worker_then_a_restart_of_all_resumes_exactly(uninterrupted, small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    args = ["-m", "xlnet_cli", *train_args(small_data_dir, model_dir)]
    directories = [model_dir] + [model_dir / "workers" / f"worker-{index}" for index in range(1, WORKERS)]

    def saved_by_all() -> bool:
        return all(tf.train.latest_checkpoint(str(directory / "checkpoints")) for directory in directories)

    with four_workers(args) as processes:
        wait_for(saved_by_all, *processes, timeout=DEADLINE, interval=0.05,
                 what=f"the checkpoint of step {CHECKPOINT_EVERY} of every worker")
        processes[2].kill()
        processes[2].communicate(timeout=60)
    saved = {tf.train.latest_checkpoint(str(directory / "checkpoints")).rsplit("-", 1)[1] for directory in directories}
    assert saved != {str(STEPS)}, "the run ended before the kill"
    with four_workers(args) as processes:
        run_to_the_end(processes)
    for worker in range(WORKERS):  # each step logged once, with the uninterrupted run's loss
        np.testing.assert_allclose(step_losses(model_dir, worker), step_losses(uninterrupted, worker), rtol=1e-6,
                                   err_msg=f"worker {worker}")
    rows = [json.loads(line)["step"] for line in (model_dir / "train_steps.jsonl").read_text().splitlines()]
    assert rows == list(range(1, STEPS + 1))


def keep_checkpoints_up_to(directory: Path, step: int) -> None:
    """Leaves ``directory``'s checkpoints as a kill while it wrote the one after ``step`` would: the later
    ones gone, the checkpoint list naming the ones before."""
    checkpoints = directory / "checkpoints"
    for path in checkpoints.glob("ckpt-*"):
        if int(path.name.split(".")[0].split("-")[1]) > step:
            path.unlink()
    kept = sorted((str(checkpoints / path.name[:-len(".index")]) for path in checkpoints.glob("ckpt-*.index")),
                  key=lambda name: int(name.rsplit("-", 1)[1]))
    tf.compat.v1.train.update_checkpoint_state(str(checkpoints), kept[-1], all_model_checkpoint_paths=kept)


@pytest.mark.slow
def test_workers_whose_newest_checkpoints_differ_resume_together_from_the_newest_step_all_have(
        uninterrupted, small_data_dir, tmp_path):
    # as when worker 2 is killed while writing its checkpoint of step 32, after the others wrote theirs
    model_dir = tmp_path / "model"
    shutil.copytree(uninterrupted, model_dir)
    directories = [model_dir] + [model_dir / "workers" / f"worker-{index}" for index in range(1, WORKERS)]
    for index, directory in enumerate(directories):
        keep_checkpoints_up_to(directory, CHECKPOINT_EVERY if index == 2 else 2 * CHECKPOINT_EVERY)
    with four_workers(["-m", "xlnet_cli", *train_args(small_data_dir, model_dir)]) as processes:
        outputs = output_of(*processes, timeout=DEADLINE)
    for index, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"worker {index}:\n{output[-3000:]}"
        assert f"at step {CHECKPOINT_EVERY}" in output, output[-3000:]
    for worker in range(WORKERS):
        np.testing.assert_allclose(step_losses(model_dir, worker), step_losses(uninterrupted, worker), rtol=1e-6,
                                   err_msg=f"worker {worker}")
