"""SIGINT and SIGTERM end a command with its clean-up, one line and the shell's status
(tfrecords/interruption.py, shared by `xlnet preprocess` and `xlnet export`), or raise Interrupted
in its loop (`xlnet score`). Real processes: a child enters the block and is signalled."""
from __future__ import annotations

import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tfrecords.interruption import Interrupted, ending_on_signals, interrupted_status, raising_on_signals

from support.processes import start, wait_for

CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tfrecords.interruption import ending_on_signals

    directory, pause = Path(sys.argv[1]), float(sys.argv[2])

    def clean_up():
        (directory / "cleaning").touch()
        time.sleep(pause)  # long enough for a second signal to arrive during it
        (directory / "partial").unlink()
        return "nothing was published"

    (directory / "partial").touch()
    with ending_on_signals("demo", clean_up):
        (directory / "ready").touch()
        time.sleep(60)
""")


def signalled(tmp_path: Path, *signums: int, pause: float = 0.0) -> subprocess.CompletedProcess:
    """Runs CHILD, sends it ``signums`` (the later ones while it cleans up), returns how it ended."""
    process = start(["-c", CHILD, str(tmp_path), str(pause)], stderr=subprocess.PIPE)
    wait_for(lambda: (tmp_path / "ready").exists(), process, timeout=30, what="the block")
    process.send_signal(signums[0])
    if len(signums) > 1:
        wait_for(lambda: (tmp_path / "cleaning").exists(), process, timeout=30, what="the clean-up")
        for signum in signums[1:]:
            process.send_signal(signum)
    out, err = process.communicate(timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_runs_the_clean_up_and_ends_with_one_line_and_128_plus_its_number(tmp_path, signum, status):
    ended = signalled(tmp_path, signum)
    assert ended.returncode == status == interrupted_status(signum)
    assert ended.stderr == f"xlnet demo: interrupted by {signal.Signals(signum).name}; nothing was published\n"
    assert not (tmp_path / "partial").exists()


def test_a_second_signal_does_not_cut_the_clean_up_short(tmp_path):
    ended = signalled(tmp_path, signal.SIGTERM, signal.SIGINT, signal.SIGTERM, pause=0.5)
    assert ended.returncode == 143
    assert ended.stderr == "xlnet demo: interrupted by SIGTERM; nothing was published\n"
    assert not (tmp_path / "partial").exists()


def test_a_clean_up_that_fails_is_reported_in_the_line_and_the_process_still_ends(tmp_path):
    process = start(["-c", CHILD.replace('(directory / "partial").unlink()', 'raise OSError("read-only")'),
                     str(tmp_path), "0"], stderr=subprocess.PIPE)
    wait_for(lambda: (tmp_path / "ready").exists(), process, timeout=30, what="the block")
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 143
    assert err == "xlnet demo: interrupted by SIGTERM; what it wrote could not all be removed (read-only)\n"


def test_the_previous_handlers_come_back_after_the_block():
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    with ending_on_signals("demo", lambda: ""):
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {signum: signal.getsignal(signum) for signum in before} == before


def test_off_the_main_thread_the_block_runs_without_handlers():
    before, seen = signal.getsignal(signal.SIGTERM), []

    def block() -> None:
        with ending_on_signals("demo", lambda: ""):
            seen.append(signal.getsignal(signal.SIGTERM))
            time.sleep(0)

    thread = threading.Thread(target=block)
    thread.start()
    thread.join()
    assert seen == [before]


RAISING_CHILD = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path
    from tfrecords.interruption import Interrupted, raising_on_signals

    directory = Path(sys.argv[1])
    try:
        with raising_on_signals():
            (directory / "ready").touch()
            while True:
                time.sleep(0.01)
    except Interrupted as stopped:
        print(signal.Signals(stopped.signum).name)
    print("handlers back" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else "handlers not back")
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_raising_on_signals_raises_interrupted_in_the_block_and_gives_the_handlers_back(tmp_path, signum):
    process = start(["-c", RAISING_CHILD, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: (tmp_path / "ready").exists(), process, timeout=30, what="the block")
    process.send_signal(signum)
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert out.split("\n")[:2] == [signal.Signals(signum).name, "handlers back"]


def test_interrupted_is_not_an_error_a_user_acts_on():
    assert issubclass(Interrupted, BaseException) and not issubclass(Interrupted, Exception)
