"""demo.py (`make demo`): its loss-curve helpers, and (slow) a short end-to-end run."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", REPO / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_losses_writes_a_png(tmp_path):
    path = tmp_path / "loss.png"
    load_demo().plot_losses([(50, 8.5), (100, 7.25)], [(100, 7.5)], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_noise_filter_drops_tensorflow_startup_lines_only():
    noise = load_demo().NOISE
    assert noise.match("I0000 00:00:1795273013.106767   23412 port.cc:153] oneDNN custom operations are on.")
    assert noise.match("E0000 00:00:1795273017.095897   23412 cuda_platform.cc:52] failed call to cuInit")
    assert not noise.match("step 50/400 loss 8.4684 lr 0.0005 tokens/s 1279 ETA 0:04:00")


@pytest.mark.slow
def test_demo_runs_end_to_end_and_reports_losses_and_predictions(tmp_path):
    output = tmp_path / "demo_output"
    run = subprocess.run([sys.executable, str(REPO / "demo.py"), "--output", str(output), "--train-steps", "20",
                          "--eval-every", "10", "--finetune-steps", "20"], capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "final train loss:" in run.stdout and "final valid loss:" in run.stdout
    assert run.stdout.count("  <mask> 1: ") == 5
    assert (output / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (output / "data_stats.png").read_bytes()[:4] == b"\x89PNG"
    assert "train stream 0, record 0" in run.stdout and "targets [[...]]:" in run.stdout
    assert (output / "serving" / "xlnet" / "1" / "saved_model.pb").is_file()
    assert list((output / "model" / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert "dev accuracy" in run.stdout and (output / "classifier" / "eval_results.json").is_file()
    assert run.stdout.count("project modules imported by the client: none") == 2
    assert sum(line.split()[0] in ("fresh", "rotten") for line in run.stdout.splitlines() if line.strip()
               and line.startswith("      ")) >= 4
