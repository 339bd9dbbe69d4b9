"""One run per model directory: MODEL_DIR/run.lock records who is writing the directory.

The lock holds the owner's host, pid, start time and a heartbeat that a background thread
refreshes every ``HEARTBEAT_SECONDS``. A second `xlnet train` or `xlnet finetune` on the same
directory stops with exit status 2 and names the owner. A lock is taken over, with a warning,
when its owner is dead: a process that no longer exists on this host, or a heartbeat older than
``STALE_SECONDS`` (a host that crashed or lost the directory). The workers of one multi-worker
job share the chief's lock: only the chief takes it.

How strong it is depends on the filesystem:

* a local disk creates the file atomically (``O_CREAT | O_EXCL``): of two runs starting at once,
  exactly one gets it;
* an object store (gs://) has no create-if-absent through tf.io.gfile, so the lock is written,
  then read back after ``SETTLE_SECONDS`` and kept only if it is still ours. Two runs starting
  within that window on different hosts can both see their own write at different times; runs
  that start further apart than that, which is what happens when a job is submitted twice, are
  caught.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable

import tensorflow as tf

from trainer.runtime.model_dir import ModelDirectory, ModelDirectoryError
from trainer.runtime.storage import StorageError, read_json, write_json

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0  # 20 missed heartbeats: the owner is gone
SETTLE_SECONDS = 2.0  # object stores: how long a competing write has to show before ours is trusted


class RunLockError(ModelDirectoryError):
    """Another live run owns the model directory; the message names it."""


class RunLock:
    """The lock of one model directory, as a context manager: taken on entry, released on exit."""

    FILE = "run.lock"

    def __init__(self, directory: ModelDirectory, log: Callable[[str], None] = print,
                 stale_seconds: float = STALE_SECONDS, heartbeat_seconds: float = HEARTBEAT_SECONDS):
        self.directory, self.log = directory, log
        self.path = directory.join(self.FILE)
        self.stale_seconds, self.heartbeat_seconds = stale_seconds, heartbeat_seconds
        now = time.time()
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "started": now, "heartbeat": now,
                       "token": uuid.uuid4().hex}
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def acquire(self) -> None:
        """Takes the lock, or raises RunLockError naming the live owner."""
        tf.io.gfile.makedirs(self.directory.path)
        if not self._create():
            owner = self._owner()
            why_stale = self._stale(owner) if owner is not None else "its lock file could not be read"
            if why_stale is None:
                raise RunLockError(f"--model-dir {self.directory.path} is in use by another run: {describe(owner)}; "
                                   f"wait for it to finish, or remove {self.path} if that run is gone")
            self.log(f"warning: taking over {self.path} from a run that is gone ({why_stale}): {describe(owner)}")
            write_json(self.path, self.record)
        if "://" in self.path:
            self._settle()
        self._beating = threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True)
        self._beating.start()

    def release(self) -> None:
        """Stops the heartbeat and removes the lock if it is still ours."""
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
        if self._is_ours():
            tf.io.gfile.remove(self.path)

    # ------------------------------------------------------------------------------ helpers
    def _create(self) -> bool:
        """Writes the lock if there is none: atomically on a local disk."""
        data = json.dumps(self.record, indent=2, sort_keys=True).encode("utf-8")
        if "://" not in self.path:
            try:
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            return True
        if tf.io.gfile.exists(self.path):
            return False
        write_json(self.path, self.record)
        return True

    def _settle(self) -> None:
        time.sleep(SETTLE_SECONDS)
        if not self._is_ours():
            raise RunLockError(f"--model-dir {self.directory.path} was taken by another run starting at the same "
                               f"time: {describe(self._owner())}")

    def _owner(self) -> dict[str, Any] | None:
        try:
            owner = read_json(self.path)
        except StorageError:
            return None
        return owner if isinstance(owner, dict) else None

    def _is_ours(self) -> bool:
        owner = self._owner()
        return owner is not None and owner.get("token") == self.record["token"]

    def _stale(self, owner: dict[str, Any]) -> str | None:
        """Why ``owner`` is gone, or None when it may still be running."""
        if owner.get("host") == self.record["host"] and not process_alive(owner.get("pid")):
            return f"no process {owner.get('pid')} on this host"
        age = time.time() - float(owner.get("heartbeat", 0))
        if age > self.stale_seconds:
            return f"no heartbeat for {age:.0f}s"
        return None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            if not self._is_ours():
                self.log(f"warning: {self.path} is no longer this run's lock")
                return
            self.record["heartbeat"] = time.time()
            write_json(self.path, self.record)


def describe(owner: dict[str, Any] | None) -> str:
    """The owner of a lock, as a message names it."""
    if owner is None:
        return "unknown owner"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(owner.get("started", 0))))
    beat = time.time() - float(owner.get("heartbeat", 0))
    return f"host {owner.get('host')}, pid {owner.get('pid')}, started {started}, last heartbeat {beat:.0f}s ago"


def process_alive(pid: Any) -> bool:
    """Whether process ``pid`` exists on this host (signal 0 checks without signalling); not a
    positive integer: False (0 and below would address process groups)."""
    try:
        pid = int(pid)
        if pid <= 0:
            return False
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True
