"""Preemption (trainer/runtime/preemption.py): a signal is noted, not acted upon, while the handlers
are installed, and the previous handlers come back; a loop of steps that outlasts the signal by
``preemption_grace_seconds`` is given up, the run lock released, in one line (slow: `xlnet train`
runs). The whole path (a signalled run saves and stops; one signalled worker stops them all) is
tested with the pretraining task and in test_distribution.py."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import tensorflow as tf
from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING
from support.processes import signal_and_wait, start, stopped, wait_for

import xlnet_cli
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.preemption import Preemption

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
         "eval_batch_size=8", "warmup_steps=2", f"vocab_size={SMALL_DATA['vocab_size']}"] + SMALL_DATA_TRAINING


def test_a_signal_is_noted_and_the_previous_handler_comes_back():
    preemption = Preemption()
    previous = signal.getsignal(signal.SIGTERM)
    with preemption.handlers():
        assert not preemption.stopping()
        os.kill(os.getpid(), signal.SIGTERM)  # noted: the process goes on
        assert preemption.stopping()
    assert signal.getsignal(signal.SIGTERM) is previous
    assert preemption.cause() == f"received signal {int(signal.SIGTERM)}"


def test_without_a_signal_here_another_worker_was_signalled():
    assert Preemption().cause() == "another worker was signalled"


# A loop of steps that outlasts any test: after its first step (a loop of its own) a run goes on for
# 99,999 steps in one TensorFlow call, which a signal cannot interrupt.
ENDLESS_LOOP = ["train_steps=1000000", "steps_per_loop=1000000", "checkpoint_every=1000000", "eval_every=0"]
GRACE = 3  # preemption_grace_seconds of the tests' runs


def train_args(data_dir, model_dir, *overrides: str) -> list[str]:
    args = ["train", "--data", str(data_dir), "--model-dir", str(model_dir), "--preset", "tiny", "--strategy", "cpu"]
    for item in SMALL + [f"preemption_grace_seconds={GRACE}", *overrides]:
        args += ["--set", item]
    return args


def sigterm_during_a_long_loop(data_dir, model_dir, *overrides: str) -> tuple[subprocess.Popen, str, float]:
    """Starts `xlnet train` with ENDLESS_LOOP, sends SIGTERM once its long loop runs: (the process, its
    output, the seconds from the signal to its exit)."""
    process = start(["-m", "xlnet_cli", *train_args(data_dir, model_dir, *ENDLESS_LOOP, *overrides)])
    with stopped(process):
        log, first = model_dir / ModelDirectory.STEP_LOG, resumed_at(model_dir) + 1
        # the first loop of a run is one step; its row is logged, then the long loop starts
        wait_for(lambda: log.exists() and log.read_text().count("\n") >= first, process, what=f"step {first}")
        time.sleep(3)  # into the long loop
        signalled = time.monotonic()
        output = signal_and_wait(process, signal.SIGTERM, timeout=120)
        return process, output, time.monotonic() - signalled


def resumed_at(model_dir) -> int:
    latest = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def the_line(output: str, text: str) -> str:
    lines = [line for line in output.splitlines() if text in line]
    assert len(lines) == 1, output[-3000:]
    return lines[0]


@pytest.mark.slow  # about 60 s under load: a run started and stopped
def test_sigterm_during_a_loop_that_does_not_end_stops_the_run_within_the_grace_period(small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    process, output, seconds = sigterm_during_a_long_loop(small_data_dir, model_dir)
    assert process.returncode == 0 and "Traceback" not in output, output[-3000:]
    assert seconds < GRACE + 20, output[-3000:]  # the grace, then the lock's release and the exit
    line = the_line(output, "did not end within")
    assert line.startswith(f"received signal {int(signal.SIGTERM)}: steps 2-1000000 did not end within {GRACE} s "
                           "(preemption_grace_seconds)"), line
    assert line.endswith(": stopped before the run's first checkpoint; re-running the same command starts at step 1")
    assert not (model_dir / "run.lock").exists()
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")) is None


@pytest.mark.slow  # about 80 s under load: a short run, then a resumed one stopped
def test_a_loop_given_up_after_a_resume_names_the_checkpoint_it_resumes_from(small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    assert xlnet_cli.main(train_args(small_data_dir, model_dir, "train_steps=2", "checkpoint_every=2",
                                     "eval_every=0")) == 0
    process, output, seconds = sigterm_during_a_long_loop(small_data_dir, model_dir)
    assert process.returncode == 0 and "Traceback" not in output, output[-3000:]
    assert seconds < GRACE + 20, output[-3000:]
    line = the_line(output, "did not end within")
    saved = model_dir / "checkpoints" / "ckpt-2"
    assert f"steps 4-1000000 did not end within {GRACE} s" in line, line
    assert line.endswith(f": stopped with nothing to save since {saved}; re-running the same command resumes from it"), \
        line
    assert not (model_dir / "run.lock").exists()
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")) == str(saved)
