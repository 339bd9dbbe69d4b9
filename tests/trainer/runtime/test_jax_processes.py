"""Several processes of one JAX run (trainer/runtime/jax_processes.py): Keras's variables checked, and
(slow) two CPU processes on 127.0.0.1 log the losses of one process with the same global batch, each
reading its own streams, the chief writing the model directory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING
from support.processes import free_ports, output_of, start
from tfrecords.errors import UsageError, exit_code
from trainer.runtime.jax_processes import (JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID, ProcessSettings, lost_process,
                                           requested_processes)
from trainer.runtime.training_stops import WorkerLostError, peer_lost_stopped

# test_jax_engine.py's small network, dropout off: two processes hold the same rows in another order
# (replica by replica: each one's forward rows, then their backward ones) and a row's dropout bits
# follow its place in the batch, so only the arithmetic is compared.
SETTINGS = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
            "eval_batch_size=8", "warmup_steps=2", f"vocab_size={SMALL_DATA['vocab_size']}", "steps_per_loop=2",
            "eval_steps=2", *SMALL_DATA_TRAINING, "train_steps=4", "checkpoint_every=2", "eval_every=4", "dropout=0",
            "dropatt=0"]


def step_rows(model_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (model_dir / "train_steps.jsonl").read_text().splitlines()]


def test_without_the_variables_a_run_is_one_process():
    assert requested_processes({}) is None


def test_the_three_variables_name_the_coordinator_the_count_and_the_index():
    environ = {JOB_ADDRESSES: "10.0.0.1:1234,10.0.0.2:2345", NUM_PROCESSES: "2", PROCESS_ID: "1"}
    assert requested_processes(environ) == ProcessSettings("10.0.0.1:1234", 2, 1)


def test_on_a_tpu_pod_slice_the_count_alone_lets_jax_find_the_rest():
    assert requested_processes({NUM_PROCESSES: "4"}) == ProcessSettings(None, 4, None)


@pytest.mark.parametrize("environ,named", [
    ({NUM_PROCESSES: "two"}, NUM_PROCESSES),
    ({NUM_PROCESSES: "0"}, NUM_PROCESSES),
    ({JOB_ADDRESSES: "10.0.0.1", NUM_PROCESSES: "2", PROCESS_ID: "0"}, JOB_ADDRESSES),
    ({JOB_ADDRESSES: "10.0.0.1:99999", NUM_PROCESSES: "2", PROCESS_ID: "0"}, JOB_ADDRESSES),
    ({JOB_ADDRESSES: "a:1,b:2,c:3", NUM_PROCESSES: "2", PROCESS_ID: "0"}, "names 3 processes"),
    ({JOB_ADDRESSES: "a:1", NUM_PROCESSES: "2", PROCESS_ID: "2"}, PROCESS_ID),
    ({JOB_ADDRESSES: "a:1", NUM_PROCESSES: "2", PROCESS_ID: "-1"}, PROCESS_ID),
    ({JOB_ADDRESSES: "a:1", NUM_PROCESSES: "2"}, "together"),
    ({PROCESS_ID: "0"}, "together"),
])
def test_a_bad_variable_is_a_usage_error_naming_it(environ, named):
    with pytest.raises(UsageError, match=named):
        requested_processes(environ)


def jax_train(data: str, model_dir: Path, env: dict[str, str] | None = None, settings: list[str] | None = None):
    sets = [arg for item in SETTINGS + (settings or []) for arg in ("--set", item)]
    return start(["-m", "xlnet_cli", "train", "--backend", "jax", "--data", data, "--model-dir", str(model_dir), *sets],
                 env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu", **(env or {})})


@pytest.fixture(scope="module")
def one_and_two_processes(small_data_dir, tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """The same run as one process and as two on 127.0.0.1 (one CPU device each), side by side."""
    base = tmp_path_factory.mktemp("jax-processes")
    (port,) = free_ports(1)
    cluster = {JOB_ADDRESSES: f"127.0.0.1:{port}", NUM_PROCESSES: "2"}
    processes = [jax_train(small_data_dir, base / "one")] + [
        jax_train(small_data_dir, base / "two", {**cluster, PROCESS_ID: str(index)}) for index in (0, 1)]
    outputs = output_of(*processes, timeout=600)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    return base / "one", base / "two", outputs


@pytest.mark.slow  # about 90 s: three JAX processes at once
def test_two_processes_log_the_losses_and_gradient_norms_of_one(one_and_two_processes):
    one, two, _ = one_and_two_processes
    reference, chief, other = step_rows(one), step_rows(two), step_rows(two / "workers" / "worker-1")
    assert [row["step"] for row in chief] == [row["step"] for row in other] == [1, 2, 3, 4]
    assert [row["loss"] for row in chief] == pytest.approx([row["loss"] for row in reference], rel=1e-5)
    assert [row["grad_norm"] for row in chief] == pytest.approx([row["grad_norm"] for row in reference], rel=1e-4)
    assert [row["loss"] for row in other] == [row["loss"] for row in chief]  # one global step, logged twice


@pytest.mark.slow  # shares the runs above
def test_the_chief_writes_the_model_directory_and_both_write_one_set_of_checkpoints(one_and_two_processes):
    _, two, outputs = one_and_two_processes
    assert sorted(path.name for path in (two / "checkpoints").iterdir()) == ["2", "4"]
    assert sorted(path.name for path in (two / "workers").iterdir()) == ["worker-1"]
    assert sorted(path.name for path in (two / "workers" / "worker-1").iterdir()) == ["train_steps.jsonl"]
    assert json.loads((two / "goodput.json").read_text())["runs"] == 1
    assert "goodput of " in outputs[1] and "goodput of " not in outputs[2]


@pytest.mark.slow  # shares the runs above
def test_each_process_evaluates_the_whole_batch_as_one_process_does(one_and_two_processes):
    _, _, (single, chief, other) = one_and_two_processes

    def eval_line(output: str) -> dict:
        return json.loads(output.strip().splitlines()[-1])["eval"]

    assert eval_line(chief)["loss"] == pytest.approx(eval_line(single)["loss"], rel=1e-5)
    assert eval_line(other) == eval_line(chief)


@pytest.mark.slow  # about 70 s: two JAX processes, one of them signalled mid-run
def test_sigterm_to_one_process_stops_both_at_the_same_step_after_a_checkpoint(small_data_dir, tmp_path):
    import signal

    from support.processes import wait_for

    (port,) = free_ports(1)
    cluster = {JOB_ADDRESSES: f"127.0.0.1:{port}", NUM_PROCESSES: "2"}
    model_dir = tmp_path / "model"
    long_run = ["train_steps=400", "checkpoint_every=200", "eval_every=0"]
    processes = [jax_train(small_data_dir, model_dir, {**cluster, PROCESS_ID: str(index)}, long_run)
                 for index in (0, 1)]
    log = model_dir / "workers" / "worker-1" / "train_steps.jsonl"
    wait_for(lambda: log.is_file() and len(log.read_text().splitlines()) >= 4, *processes, timeout=400,
             what="step 4 of process 1")
    processes[1].send_signal(signal.SIGTERM)
    outputs = output_of(*processes, timeout=300)
    assert [process.returncode for process in processes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    last = [rows[-1]["step"] for rows in (step_rows(model_dir), step_rows(model_dir / "workers" / "worker-1"))]
    assert last[0] == last[1] < 400
    assert sorted(path.name for path in (model_dir / "checkpoints").iterdir()) == [str(last[0])]
    assert f"saved checkpoint at step {last[0]}, exiting" in outputs[0]


GLOO_PEER_GONE = ValueError("UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/pair.cc:538] "
                            "Read error [127.0.0.1]:11179: Connection reset by peer")


def test_of_two_processes_a_collective_that_lost_its_peer_names_the_other():
    assert lost_process(GLOO_PEER_GONE, 0, 2) == "process 1"
    assert lost_process(GLOO_PEER_GONE, 1, 2) == "process 0"


def test_of_more_processes_the_lost_one_is_another_process_gloo_naming_only_an_address():
    assert lost_process(GLOO_PEER_GONE, 2, 4) == "another process"


def test_other_errors_and_a_run_of_one_process_lose_no_process():
    assert lost_process(ValueError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"), 0, 2) is None
    assert lost_process(GLOO_PEER_GONE, 0, 1) is None


def test_a_lost_process_is_one_sentence_naming_it_and_where_every_process_resumes():
    error = peer_lost_stopped("process 1", 2, "processes of this run", "this process (0)", "M/checkpoints/8")
    assert isinstance(error, WorkerLostError) and exit_code(error) == 3
    assert str(error) == ("process 1 of the 2 processes of this run stopped answering (killed, or its machine or "
                          "network went down) and this process (0) cannot train without it. Restart ALL processes "
                          "with the same command: they resume from the last checkpoint all of them saved "
                          "(M/checkpoints/8 here)")


def test_a_process_that_lost_another_ends_with_the_errors_status_before_jaxs_own_exit_steps(tmp_path):
    import subprocess
    import sys

    script = ("import atexit, sys\n"
              "atexit.register(lambda: print('the shutdown barrier', flush=True))  # as jax registers its clean-up\n"
              "from trainer.runtime.jax_processes import end_without_the_lost\n"
              "end_without_the_lost(3)\n"
              "print('the error told', end='')\n"
              "sys.exit(1)\n")
    ended = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           cwd=str(Path(__file__).resolve().parents[3]))
    assert (ended.returncode, ended.stdout) == (3, "the error told"), ended.stderr


@pytest.mark.slow  # about 60 s: two JAX processes, one killed, then both again
def test_a_killed_process_stops_the_other_at_once_in_one_line_and_both_resume_from_the_checkpoint(small_data_dir,
                                                                                                   tmp_path):
    import signal
    import time

    from support.processes import wait_for

    model_dir = tmp_path / "model"
    run = ["train_steps=24", "checkpoint_every=4", "eval_every=0"]

    def both(port: int):
        cluster = {JOB_ADDRESSES: f"127.0.0.1:{port}", NUM_PROCESSES: "2"}
        return [jax_train(small_data_dir, model_dir, {**cluster, PROCESS_ID: str(index)}, run) for index in (0, 1)]

    processes = both(*free_ports(1))
    log = model_dir / "train_steps.jsonl"  # its rows counted whole (one being written is not parsed)
    wait_for(lambda: log.is_file() and log.read_text().count("\n") >= 6, *processes, timeout=400,
             what="step 6 of process 0")
    processes[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    output = output_of(processes[0], timeout=300)[0]
    took = time.monotonic() - killed
    assert processes[0].returncode == 3, output[-3000:]
    assert took < 30, took  # JAX's own exit waited 60 s for the lost process, then aborted (-6)
    saved = sorted(int(path.name) for path in (model_dir / "checkpoints").iterdir() if path.name.isdigit())
    assert (f"xlnet train: error: process 1 of the 2 processes of this run stopped answering (killed, or its machine "
            f"or network went down) and this process (0) cannot train without it. Restart ALL processes with the "
            f"same command: they resume from the last checkpoint all of them saved "
            f"({model_dir / 'checkpoints' / str(saved[-1])} here)") in output, output[-3000:]
    assert "Traceback" not in output and "Fatal Python error" not in output, output
    processes = both(*free_ports(1))
    outputs = output_of(*processes, timeout=400)
    assert [process.returncode for process in processes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    for output in outputs:  # every process names the one set of checkpoints, the chief's and the others'
        assert f"resumed from {model_dir / 'checkpoints' / str(saved[-1])} at step {saved[-1]}" in output, output
    assert step_rows(model_dir)[-1]["step"] == 24
