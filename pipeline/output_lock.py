"""One writer per data directory: OUTPUT/.preprocess.lock records which `xlnet preprocess` writes it.

The rules are training's run lock (trainer/runtime/run_lock.py) on a data directory, through
Beam's FileSystems (pipeline/ imports neither trainer/ nor TensorFlow): the lock names its owner
(host, pid, start time) and carries a heartbeat; a second run on the same ``--output`` stops with
exit status 2 naming the owner; a lock whose run is gone is taken over, with a warning.

How strong it is depends on the filesystem:

* a local disk: the lock file is held with ``flock`` for the whole run. The kernel drops the lock
  when the process ends however it ends (even SIGKILL), so "its run is gone" is exact, and of two
  runs starting at once exactly one gets it. The file's content only names the owner for the message.
* an object store (gs://) has no create-if-absent through Beam's FileSystems: the lock is written,
  read back after ``SETTLE_SECONDS`` and kept only if it is still ours, and a thread refreshes its
  heartbeat every ``HEARTBEAT_SECONDS``. It is taken over when its owner's process no longer exists
  on this host or its heartbeat is older than ``STALE_SECONDS``. Two runs starting within the
  settling window on different hosts can both see their own write; runs further apart are caught.

The lock file is hidden and not part of the data: pipeline/data_directory.py leaves it out of the
directory's entries, and a finished run removes it.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from apache_beam.io.filesystems import FileSystems

from tfrecords.errors import UsageError
from tfrecords.lock_owner import describe, process_alive

LOCK_NAME = ".preprocess.lock"
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0  # 20 missed heartbeats: the owner is gone
SETTLE_SECONDS = 2.0  # object stores: how long a competing write has to show before ours is trusted
_LOG = logging.getLogger("xlnet.preprocess")


class OutputInUseError(UsageError):
    """Another live `xlnet preprocess` writes the same --output; the message names it (exit status 2)."""


class OutputLock:
    """The lock of one data directory, as a context manager: taken on entry, released on exit.
    ``output`` must exist (a local directory is created before the lock is taken)."""

    def __init__(self, output: str, stale_seconds: float = STALE_SECONDS,
                 heartbeat_seconds: float = HEARTBEAT_SECONDS, settle_seconds: float = SETTLE_SECONDS):
        self.output = output
        self.path = FileSystems.join(output, LOCK_NAME)
        self.stale_seconds, self.heartbeat_seconds, self.settle_seconds = (stale_seconds, heartbeat_seconds,
                                                                           settle_seconds)
        now = time.time()
        self.record = {"host": socket.gethostname(), "pid": os.getpid(), "started": now, "heartbeat": now,
                       "token": uuid.uuid4().hex, "command": "xlnet preprocess"}
        self._fd: int | None = None
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        self._held = False

    @property
    def local(self) -> bool:
        return "://" not in self.path

    def __enter__(self) -> "OutputLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def acquire(self) -> None:
        """Takes the lock, or raises OutputInUseError naming the live owner."""
        if self.local:
            self._acquire_local()
        else:
            self._acquire_object_store()
        self._held = True

    def release(self) -> None:
        """Removes the lock if it is still ours (idempotent; safe from a signal handler)."""
        if not self._held:
            return
        self._held = False
        self._stop.set()
        if self.local:
            try:
                if self._fd is not None and _same_file(self._fd, self.path):
                    os.unlink(self.path)  # while still holding the flock: no one can take the old inode
            except OSError:
                pass
            finally:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
            return
        if self._beating is not None and self._beating is not threading.current_thread():
            self._beating.join(timeout=5)
        try:
            if self.is_ours():
                FileSystems.delete([self.path])
        except Exception as error:  # the run's outcome stands; a stale lock is taken over next time
            _LOG.warning("could not remove %s: %s", self.path, error)

    def is_ours(self) -> bool:
        """Whether the lock file still holds this run's token."""
        owner = self._owner()
        return owner is not None and owner.get("token") == self.record["token"]

    # ------------------------------------------------------------------------------ local disk
    def _acquire_local(self) -> None:
        import fcntl

        for _ in range(20):  # the file can be replaced between our open and our flock: try again
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                owner = self._owner()
                raise OutputInUseError(f"--output {self.output} is being written by another `xlnet preprocess` "
                                       f"({describe(owner)}); wait for it to finish, or choose another "
                                       "directory") from None
            if not _same_file(fd, self.path):  # its owner released it (and unlinked it) meanwhile
                os.close(fd)
                continue
            previous = self._owner()
            if previous is not None and previous.get("token"):
                _LOG.warning("taking over %s from a run that is gone: %s", self.path, describe(previous))
            data = json.dumps(self.record, sort_keys=True).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            self._fd = fd
            return
        raise OutputInUseError(f"--output {self.output}: could not take {self.path}, which other runs keep "
                               "replacing; wait for them to finish")

    # ------------------------------------------------------------------------------ object stores
    def _acquire_object_store(self) -> None:
        owner = self._owner() if FileSystems.exists(self.path) else None
        if owner is not None or FileSystems.exists(self.path):
            why_gone = self._gone(owner) if owner is not None else None
            if why_gone is None:
                raise OutputInUseError(f"--output {self.output} is being written by another `xlnet preprocess` "
                                       f"({describe(owner)}); wait for it to finish, or remove {self.path} if "
                                       "that run is gone")
            _LOG.warning("taking over %s from a run that is gone (%s): %s", self.path, why_gone, describe(owner))
        self._write()
        time.sleep(self.settle_seconds)
        if not self.is_ours():
            raise OutputInUseError(f"--output {self.output} was taken by another `xlnet preprocess` starting at "
                                   f"the same time ({describe(self._owner())}); wait for it to finish")
        self._beating = threading.Thread(target=self._beat, name="output-lock-heartbeat", daemon=True)
        self._beating.start()

    def _write(self) -> None:
        with FileSystems.create(self.path, mime_type="application/json") as handle:
            handle.write(json.dumps(self.record, sort_keys=True).encode("utf-8"))

    def _gone(self, owner: dict[str, Any]) -> str | None:
        """Why ``owner`` is gone, or None when it may still be running."""
        if owner.get("host") == self.record["host"] and not process_alive(owner.get("pid")):
            return f"no process {owner.get('pid')} on this host"
        age = time.time() - float(owner.get("heartbeat", 0) or 0)
        if age > self.stale_seconds:
            return f"no heartbeat for {age:.0f}s"
        return None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                if not self.is_ours():
                    _LOG.warning("%s is no longer this run's lock", self.path)
                    return
                self.record["heartbeat"] = time.time()
                self._write()
            except Exception as error:  # a missed beat is not fatal: STALE_SECONDS is 20 of them
                _LOG.warning("could not refresh %s: %s", self.path, error)

    def _owner(self) -> dict[str, Any] | None:
        return read_lock(self.output)

    @property
    def token(self) -> str:
        """What identifies this run in its lock file (the pipeline checks it before publishing)."""
        return self.record["token"]


def read_lock(output: str) -> dict[str, Any] | None:
    """The lock record of a data directory: its owner (host, pid, started, heartbeat, token), or None."""
    try:
        with FileSystems.open(FileSystems.join(output, LOCK_NAME), compression_type="uncompressed") as handle:
            owner = json.loads(handle.read().decode("utf-8") or "null")
    except Exception:  # missing, half-written or not ours to read: no known owner
        return None
    return owner if isinstance(owner, dict) else None


def _same_file(fd: int, path: str) -> bool:
    """Whether the open ``fd`` is still the file at ``path`` (not unlinked or replaced)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False
