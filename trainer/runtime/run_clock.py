"""When the command running a training started: the origin of a run's wall time in its goodput
(trainer/runtime/goodput.py), so that start-up (importing TensorFlow, reading the data's manifest,
building the model, restoring a checkpoint) counts.

`xlnet` notes the start around the command it runs (xlnet_cli.run_subcommand): the process's own
start when the process was launched for that command, else the moment the command was called (a
test calling xlnet_cli.main in-process). A controller built outside a command counts from when it
was built. No TensorFlow here: `xlnet` notes the start before it imports TensorFlow.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

_started: list[float] = []  # the start of the command running now, innermost last


def process_start_time() -> float | None:
    """The wall-clock time (time.time()'s scale) this process started, to about 10 ms, from
    /proc/self/stat and /proc/uptime; None where those do not exist (not Linux)."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of proc(5): starttime
    return time.time() - (uptime - started_after_boot)


@contextlib.contextmanager
def command_started(at: float) -> Iterator[None]:
    """Within the block, :func:`command_start_time` is ``at`` (a time.time() value)."""
    _started.append(at)
    try:
        yield
    finally:
        _started.pop()


def command_start_time(default: float) -> float:
    """The start of the command running now (noted by :func:`command_started`), else ``default``."""
    return _started[-1] if _started else default
