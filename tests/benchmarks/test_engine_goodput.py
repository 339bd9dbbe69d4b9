"""benchmarks/engine_goodput.py (issue 45): a smoke run of both engines' goodput lines, a few steps each."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.bundled_data import SMALL_DATA_TRAINING

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # on the committed small data directory: no vocabulary trained, no corpus preprocessed
def test_engine_goodput_prints_where_each_engines_run_went(tmp_path, small_data_dir):
    # its record shapes, and a batch of 8 (4 forward rows: its train split has 4 streams)
    shapes = [arg for item in [*SMALL_DATA_TRAINING, "train_batch_size=8"] for arg in ("--set", item)]
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "engine_goodput.py"), "--steps", "4",
                          "--workdir", str(tmp_path), "--data", small_data_dir, *shapes, "--set", "n_layer=1"],
                         capture_output=True, text=True, timeout=1800, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [row["engine"] for row in rows] == ["tensorflow", "jax"]
    for row in rows:
        parts = sum(row[f"{name}_s"] for name in ("startup", "compile", "productive", "input", "checkpoint",
                                                  "evaluation", "other", "lost"))
        assert parts == pytest.approx(row["total_s"], abs=0.05)  # every second in one category
        assert row["total_s"] <= row["wall_s"]
        assert row["steps"] == 4 and row["productive_steps_per_s"] > 0
    assert "input_wait_share_of_productive" in rows[1] and "input_wait_share_of_productive" not in rows[0]
    # the JAX run compiled into the benchmark's own cache, empty when it started
    assert rows[1]["compilation_cache"] == "cold" and "compilation_cache" not in rows[0]
    assert any((tmp_path / "jax-compilation").iterdir())


def test_engine_goodput_refuses_an_unknown_engine():
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "engine_goodput.py"), "--engines", "torch"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "--engines takes tensorflow, jax" in out.stderr
