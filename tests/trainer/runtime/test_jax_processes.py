"""Several processes of one JAX run (trainer/runtime/jax_processes.py): Keras's variables checked, and
(slow) two CPU processes on 127.0.0.1 log the losses of one process with the same global batch, each
reading its own streams, the chief writing the model directory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING
from support.processes import free_ports, output_of, start
from tfrecords.errors import UsageError
from trainer.runtime.jax_processes import (JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID, ProcessSettings,
                                           requested_processes)

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
