"""The child-process helper of the tests (tests/support/processes.py), on `python -c` children."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from support.bundled_data import REPO
from support.processes import exited_pid, output_of, signal_and_wait, start, stopped, wait_for

SLEEPER = ["-c", "import time; print('up', flush=True); time.sleep(60)"]


def test_wait_for_returns_the_conditions_first_true_value_while_the_child_runs(tmp_path):
    with stopped(start(SLEEPER)) as process:
        calls = []
        assert wait_for(lambda: calls.append(1) or (len(calls) >= 3 and ["found"]), process, interval=0.01) == ["found"]
        assert process.poll() is None


def test_wait_for_fails_with_the_childs_output_when_it_exits_first():
    process = start(["-c", "import sys; print('said this'); sys.exit(4)"])
    with pytest.raises(AssertionError, match=r"exited \(4\) before step 6:\n(.|\n)*said this"):
        wait_for(lambda: False, process, interval=0.01, what="step 6")


def test_wait_for_kills_every_child_at_the_deadline():
    processes = [start(SLEEPER), start(SLEEPER)]
    with pytest.raises(AssertionError, match="did not reach the end in 0.2 s"):
        wait_for(lambda: False, *processes, timeout=0.2, interval=0.05, what="the end")
    assert [process.returncode for process in processes] == [-signal.SIGKILL] * 2


def test_output_of_kills_every_child_when_one_overruns():
    quick, slow = start(["-c", "print('done')"]), start(SLEEPER)
    with pytest.raises(subprocess.TimeoutExpired):
        output_of(quick, slow, timeout=1)
    assert slow.returncode == -signal.SIGKILL


def test_signal_and_wait_returns_the_output_of_the_signalled_child(tmp_path):
    ready = tmp_path / "ready"
    process = start(["-c", "import signal, sys, time\n"
                           "signal.signal(signal.SIGTERM, lambda *_: (print('stopping'), sys.exit(0)))\n"
                           f"print('up'); open({str(ready)!r}, 'w').close(); time.sleep(60)"])
    wait_for(ready.exists, process, interval=0.01, what="its SIGTERM handler")
    assert signal_and_wait(process, signal.SIGTERM) == "up\nstopping\n" and process.returncode == 0


def test_start_adds_to_and_removes_from_the_environment(monkeypatch):
    monkeypatch.setenv("XLNET_TEST_REMOVED", "1")
    process = start(["-c", "import os; print(os.environ.get('XLNET_TEST_REMOVED'), os.environ['XLNET_TEST_ADDED'], "
                           "os.environ['TF_CPP_MIN_LOG_LEVEL'], os.getcwd())"],
                    env={"XLNET_TEST_REMOVED": None, "XLNET_TEST_ADDED": "yes"})
    (output,) = output_of(process)
    assert output.split() == ["None", "yes", "2", str(REPO)]


def test_exited_pid_names_no_running_process():
    with pytest.raises(ProcessLookupError):
        os.kill(exited_pid(), 0)
