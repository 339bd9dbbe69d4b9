"""benchmarks/accelerator_step.py (the JAX step on an accelerator, transformers' XLNet beside it) on the CPU.

The smoke run (slow) runs the script as a user runs it, at tiny shapes, with the micro-batch the planner
fits in a given memory: one consistent JSON line per setting, MFU at most 1, no TensorFlow in any of its
processes, and the peer's line: measured when some venv has torch and transformers (.venv-interop, or
benchmarks/peers/setup_transformers.sh's), else the line saying it was skipped. The rest checks the
synthetic batch, the device table's match, a shape that does not fit and the retry after running out
of memory without compiling anything.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "accelerator_step.py"
# Two layers of the tiny preset, a 1000-piece vocabulary, seq 64 with memory 32 and 10 targets.
TINY = ["--presets", "tiny", "--set", "n_layer=2", "--set", "vocab_size=1000", "--seq-len", "64", "--mem-len", "32",
        "--num-predict", "10", "--steps", "2", "--warmup", "1"]
# The planner fits a micro-batch of a few rows of TINY in this (about 12 MB for 2 rows).
PLANNED_MEMORY = 24_000_000


def run_script(*args: str, status: int = 0) -> list[dict]:
    """The JSON lines the script prints (its exit status must be ``status``)."""
    result = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == status, result.stderr[-4000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


# Each flag no setting can run with, and the one line that refuses it before any setting runs.
BAD_FLAGS = {
    "--presets bogus": "--presets: 'bogus' is not one of tiny, base, large",
    "--remat bogus": "--remat: 'bogus' is not one of none, attention, full",
    "--seq-len 0": "--seq-len must be at least 1, got 0",
    "--batch -1": "--batch must be at least 0, got -1",
    "--num-predict 100 --seq-len 64": "--num-predict 100 is longer than --seq-len 64",
    "--presets tiny --set n_layer=abc": "preset tiny, remat none: --set n_layer=abc: expected an integer",
    "--budget-s nan": "--budget-s must be a positive number of seconds, got nan",
    "--device-memory-bytes -1": "--device-memory-bytes must be at least 0, got -1",
    "--presets tiny --batch 3": "preset tiny, remat none: training config does not fit the model config: bi_data "
                                "needs even train_batch_size and eval_batch_size (forward + backward halves)",
}


@pytest.mark.parametrize("flags", sorted(BAD_FLAGS))
def test_a_flag_no_setting_can_run_with_is_refused_in_one_line_with_exit_2(flags):
    result = subprocess.run([sys.executable, str(SCRIPT), *flags.split(), "--no-peer"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)

    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"accelerator_step.py: error: {BAD_FLAGS[flags]}\n"


def test_a_setting_that_fails_for_a_reason_other_than_memory_makes_the_run_exit_1():
    # Ours does not fit (nothing compiled); the peer's Python is a program that fails.
    lines = run_script(*TINY, "--remat", "none", "--batch", "8", "--device-memory-bytes", "8000000",
                       "--peer-python", "false", status=1)

    assert [line.get("status") for line in lines[:2]] == ["does_not_fit", "failed"]
    assert lines[-1]["measure"] == "run" and lines[-1]["failed_settings"] == 1


def peer_python() -> str | None:
    """A Python that imports torch and transformers, if this machine has one."""
    venv = Path(os.environ.get("XLNET_TRANSFORMERS_VENV", "/tmp/peer-transformers"))
    for python in (REPO / ".venv-interop" / "bin" / "python", venv / "bin" / "python"):
        if python.exists() and subprocess.run([str(python), "-c", "import torch, transformers"],
                                              capture_output=True, timeout=300).returncode == 0:
            return str(python)
    return None


@pytest.fixture()
def bench(monkeypatch):
    """The script as a module, its environment settings undone after the test."""
    for name, value in (("KERAS_BACKEND", "jax"), ("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.90"),
                        ("TF_CPP_MIN_LOG_LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3"))):
        monkeypatch.setenv(name, value)  # the import sets them; monkeypatch restores them
    spec = importlib.util.spec_from_file_location("accelerator_step_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # two jitted steps compiled on the CPU and the peer's process (about 60-90 s)
def test_cpu_smoke_run_prints_a_consistent_line_per_setting_and_the_peers(tmp_path):
    from trainer.planning.flops import model_flops_per_step

    python = peer_python()
    output = tmp_path / "lines.jsonl"
    lines = run_script(*TINY, "--remat", "none,full", "--device-memory-bytes", str(PLANNED_MEMORY),
                       "--output", str(output), "--peer-python", python or sys.executable)

    assert [json.loads(text) for text in output.read_text().splitlines()] == lines
    none, peer, full, run = lines
    assert [(line.get("impl"), line.get("remat")) for line in (none, peer, full)] == [
        ("ours (keras on jax)", "none"), ("transformers", None), ("ours (keras on jax)", "full")]
    for line in (none, full):
        assert line["status"] == "ok" and line["platform"] == "cpu" and line["tensorflow_imported"] is False
        assert line["batch_source"].startswith("planner") and line["batch"] >= 2 and line["batch"] % 2 == 0
        assert line["predicted_peak_bytes"] <= line["planner_budget_bytes"] == int(PLANNED_MEMORY * 0.95)
        assert line["num_targets"] == line["batch"] * 10  # every synthetic row has its num_predict targets
        assert line["tokens_per_s"] == pytest.approx(line["batch"] * 64 / line["step_s"], rel=1e-3)
        flops = model_flops_per_step(n_layer=2, d_model=128, d_inner=512, seq_len=64, mem_len=32, num_predict=10,
                                     batch=line["batch"], vocab=1000)
        assert line["model_tflops_per_step"] == round(flops / 1e12, 4)
        assert 0 < line["mfu"] <= 1 and 0 < line["mfu_vs_measured_peak"] <= 1
        assert line["mfu_peak_tflops"] >= line["matmul_peak_tflops"] == max(line["peak_timings_tflops"])
        assert line["datasheet_peak_tflops"] is None and line["peak_source"].startswith("jax matmul 512^3 bfloat16")
        assert line["measured_peak_bytes"] is None and line["predicted_over_measured"] is None  # no CPU statistics
    assert none["recomputed_tflops_per_step"] == 0 < full["recomputed_tflops_per_step"]
    assert full["batch"] > none["batch"]  # remat full keeps less: the planner fits more rows
    if python:
        assert peer["status"] == "ok", peer
        assert (peer["batch"], peer["seq_len"], peer["mem_len"], peer["num_predict"]) == (none["batch"], 64, 32, 10)
        assert peer["params"] == none["params"]  # the same architecture, built from an XLNetConfig
        assert peer["tokens_per_s"] > 0 and peer["measured_peak_bytes"] is None and peer["out_of_memory_at"] == []
    else:
        assert peer["status"] == "skipped" and "torch or transformers missing" in peer["reason"], peer
    assert run["measure"] == "run" and run["tensorflow_imported"] is False


def test_a_shape_above_the_memory_is_reported_with_its_planned_peak_and_the_run_goes_on():
    lines = run_script(*TINY, "--remat", "none,full", "--batch", "8", "--device-memory-bytes", "8000000", "--no-peer")

    none, peer, full, run = lines
    for line in (none, full):
        assert line["status"] == "does_not_fit" and line["batch"] == 8 and line["tensorflow_imported"] is False
        assert line["memory_bytes_planned_for"] == 8_000_000
        assert line["predicted_peak_bytes"] > line["planner_budget_bytes"] == 7_600_000
        assert "step_s" not in line
    assert peer == {"impl": "transformers", "preset": "tiny", "status": "skipped", "reason": "--no-peer"}
    assert run["tensorflow_imported"] is False


def test_the_planner_fitting_nothing_is_reported_with_the_smallest_batchs_peak():
    (line, _, run) = run_script(*TINY, "--remat", "full", "--device-memory-bytes", "1000000", "--no-peer")

    assert line["status"] == "does_not_fit" and line["batch"] == 0
    assert line["predicted_peak_bytes"] > line["planner_budget_bytes"] == 950_000
    assert "not even 2" in line["reason"]


def test_synthetic_batch_is_laid_out_as_the_readers_compact_features(bench):
    batch = bench.synthetic_batch(4, 64, 10, 32, 1000)

    assert sorted(batch) == ["input_ids", "is_masked", "perm_seed", "segment_ids"]
    assert all(value.dtype == np.int32 for value in batch.values())
    ids, segments, masked = batch["input_ids"], batch["segment_ids"], batch["is_masked"]
    assert (ids[:, 48] == 4).all() and (ids[:, 62] == 4).all() and (ids[:, 63] == 3).all()  # A <sep> B <sep> <cls>
    assert ((ids >= 10).sum(1) == 61).all()
    assert (segments[:, :49] == 0).all() and (segments[:, 49:63] == 1).all() and (segments[:, 63] == 2).all()
    assert (masked.sum(1) == 10).all() and (masked[:, :32].sum(1) == 5).all()  # half of the targets in the context
    assert (masked[:, [48, 62, 63]] == 0).all()
    assert batch["perm_seed"].shape == (4, 2) and len({tuple(row) for row in batch["perm_seed"]}) == 4


def test_a_setting_out_of_memory_is_run_once_more_at_half_its_batch(bench, monkeypatch):
    answers = iter([[{"status": "out_of_memory", "batch": 74}], [{"status": "ok", "batch": 36}]])
    commands = []
    monkeypatch.setattr(bench, "run_child", lambda command, timeout, what: commands.append(command) or next(answers))
    args = bench.argparse.Namespace(batch=0, seq_len=512, mem_len=384, num_predict=85, precision="mixed_bfloat16",
                                    steps=8, warmup=2, matmul_size=0, device_memory_bytes=0, set=[])

    lines = bench.setting_lines(args, "base", "none", None, bench.time.monotonic() + 100)

    assert [command[command.index("--batch") + 1] for command in commands] == ["0", "36"]
    assert lines == [{"status": "out_of_memory", "batch": 74},
                     {"status": "ok", "batch": 36, "batch_source": "half of 74, which ran out of memory"}]
