"""Who holds a directory's lock, and whether that process is still there: the one rule shared by
`xlnet preprocess`'s output lock (pipeline/output_lock.py) and training's run lock
(trainer/runtime/run_lock.py). A lock's record is a JSON object with ``host``, ``pid``, ``started``
and ``heartbeat`` (seconds since the epoch); any of them may be missing or wrong in a damaged file."""
from __future__ import annotations

import errno
import math
import os
import time
from typing import Any


def describe(owner: dict[str, Any] | None) -> str:
    """The owner of a lock, as a message names it: host, pid, start and the age of its heartbeat."""
    if owner is None:
        return "unknown owner (the lock file is empty or cannot be read: being written, or cut short)"
    started, heartbeat = owner_time(owner, "started"), owner_time(owner, "heartbeat")
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started is not None else "unknown"
    except (OverflowError, OSError, ValueError):
        since = "unknown"
    if heartbeat is None:
        beat = "no heartbeat recorded"
    elif heartbeat > time.time():
        beat = f"last heartbeat {heartbeat - time.time():.0f}s in the future (a clock set wrong)"
    else:
        beat = f"last heartbeat {time.time() - heartbeat:.0f}s ago"
    return f"host {owner.get('host')}, pid {owner.get('pid')}, started {since}, {beat}"


def owner_time(owner: dict[str, Any] | None, field: str) -> float | None:
    """A time field of a lock (seconds since the epoch), or None when it is absent or not a finite number."""
    try:
        value = float(owner[field]) if owner is not None else None
    except (KeyError, TypeError, ValueError):
        return None
    return value if value is not None and math.isfinite(value) else None


def process_alive(pid: Any) -> bool:
    """Whether process ``pid`` exists on this host (signal 0 checks without signalling); not a
    positive integer: False (0 and below would address process groups)."""
    try:
        pid = int(pid)
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, TypeError, OverflowError):  # OverflowError: no pid is that large
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OSError as error:
        return error.errno != errno.ESRCH
    return True
