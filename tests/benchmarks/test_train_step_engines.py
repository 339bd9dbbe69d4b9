"""benchmarks/train_step.py's JAX engine mode (issue 45): a smoke run of `--modes fp32:jax`, the JAX engine's
step timed in a process of its own under KERAS_BACKEND=jax, with the same JSON line as the TensorFlow modes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # one warm-up step (the compiling one) and one timed: a step of these shapes is 3 to 5 CPU s
def test_train_step_times_the_jax_engines_step_on_the_benchmark_shapes():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "train_step.py"), "--modes", "fp32:jax",
                          "--no-peer", "--no-query-rows", "--steps", "1", "--warmup", "1"], capture_output=True,
                         text=True, timeout=1200, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert row["impl"] == "ours (JAX engine)" and row["precision"] == "fp32" and row["jit"] is True
    assert row["step_s"] > 0 and 0 < row["mfu"] <= 1
    assert row["params"] == 36906752  # the same network as the TensorFlow modes' line
