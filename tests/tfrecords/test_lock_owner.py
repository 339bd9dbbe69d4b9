"""The lock owner rule shared by the output lock and the run lock (tfrecords/lock_owner.py)."""
from __future__ import annotations

import os
import time

from tfrecords.lock_owner import describe, owner_time, process_alive


def test_a_live_process_is_alive_and_a_finished_one_is_not():
    assert process_alive(os.getpid()) and process_alive(str(os.getpid()))
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert not process_alive(pid)


def test_no_positive_integer_is_no_process():
    assert not any(process_alive(pid) for pid in (0, -1, None, "x", 1.5e30))


def test_an_owner_is_named_by_host_pid_start_and_heartbeat_age():
    now = time.time()
    text = describe({"host": "h", "pid": 7, "started": 0, "heartbeat": now - 30})
    assert text.startswith("host h, pid 7, started 1970-01-01 00:00:00 UTC, last heartbeat ") and text.endswith("s ago")


def test_a_heartbeat_in_the_future_says_the_clock_is_wrong():
    assert "in the future (a clock set wrong)" in describe({"host": "h", "pid": 7, "heartbeat": time.time() + 1000})


def test_an_unreadable_lock_names_an_unknown_owner():
    assert describe(None).startswith("unknown owner (the lock file is empty or cannot be read")
    assert describe({"started": "soon"}).endswith("started unknown, no heartbeat recorded")


def test_a_time_that_is_not_a_finite_number_is_none():
    assert [owner_time({"t": value}, "t") for value in (5, "5", "nan", "x", None)] == [5.0, 5.0, None, None, None]
    assert owner_time({}, "t") is None and owner_time(None, "t") is None
