"""One run per model directory: MODEL_DIR/run.lock records who is writing the directory.

The lock holds the owner's host, pid, start time and a heartbeat that a background thread
refreshes every ``HEARTBEAT_SECONDS``. A second `xlnet train` or `xlnet finetune` on the same
directory stops with exit status 2 and names the owner. A lock is taken over, with a warning,
when its owner is dead: a process that no longer exists on this host, or a heartbeat older than
``STALE_SECONDS`` (a host that crashed or lost the directory). The new lock keeps the dead run's
record (``taken_over_from``: its start and last heartbeat), from which the next run's goodput
counts the time that run lived after its last record as lost (trainer/runtime/goodput.py). The workers of one multi-worker
job share the chief's lock: only the chief takes it.

Each heartbeat is also written to MODEL_DIR/run.heartbeat, which only the run's own release removes.
A run killed with SIGKILL leaves it behind, and it outlives a run.lock removed by hand (what the
"in use" message offers when that run is gone): the next run, finding no lock to take over, takes
its ``taken_over_from`` from that file, so the killed run's lost time counts either way.

Two kinds of lock are judged by the file's own modification time instead (set by the filesystem
each time the owner rewrites it, every heartbeat), and taken over once that is older than
``STALE_SECONDS``:

* a lock that cannot be read, empty or cut short: a lock being written is empty for a moment, so
  it is held, not taken over at once;
* a heartbeat in the future (a clock set wrong, a file edited by hand), which would otherwise never
  grow old. A modification time more than ``STALE_SECONDS`` in the future too is refused with a
  message naming the file to remove: nothing left tells whether its run is alive.

A model directory that cannot be created or written (read-only, a file, unreachable storage) is
a StorageError naming ``--model-dir`` (exit status 2), or a StorageUnreachableError (exit 3).

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

from tfrecords.lock_owner import describe, owner_time, process_alive
from trainer.runtime import file_system
from trainer.runtime.model_dir import ModelDirectory, ModelDirectoryError
from trainer.runtime.storage import StorageError, StorageUnreachableError, failures_named, read_json, write_json

HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 600.0  # 20 missed heartbeats: the owner is gone
SETTLE_SECONDS = 2.0  # object stores: how long a competing write has to show before ours is trusted
_HELD: set["RunLock"] = set()  # the locks this process holds now (release_held_locks)


def release_held_locks() -> None:
    """Releases every run lock this process holds: for a process about to leave through os._exit,
    where no context manager's exit runs (a loop of steps given up after a signal,
    trainer/runtime/preemption.py)."""
    for lock in list(_HELD):
        lock.release()


TAKEN_OVER = "taken_over_from"  # in a lock taken over: the record of the dead run's lock
KILLED_RUN_FIELDS = ("host", "pid", "started", "heartbeat")  # what the next run keeps of a dead run's record


def taken_over_from(directory: ModelDirectory) -> dict[str, Any] | None:
    """When the run holding ``directory``'s lock took it over from a run that is gone (killed): that
    run's lock record (host, pid, started, heartbeat: when it was last alive); else None. Given to
    trainer/runtime/goodput.py to count the killed run's last, unrecorded loop as lost."""
    try:
        record = read_json(directory.join(RunLock.FILE))
    except (StorageError, StorageUnreachableError):
        return None
    previous = record.get(TAKEN_OVER) if isinstance(record, dict) else None
    return previous if isinstance(previous, dict) else None


class RunLockError(ModelDirectoryError):
    """Another live run owns the model directory; the message names it."""


class RunLock:
    """The lock of one model directory, as a context manager: taken on entry, released on exit."""

    FILE = "run.lock"
    HEARTBEAT_FILE = "run.heartbeat"  # the lock's record, kept until the run releases the lock itself

    def __init__(self, directory: ModelDirectory, log: Callable[[str], None] = print,
                 stale_seconds: float = STALE_SECONDS, heartbeat_seconds: float = HEARTBEAT_SECONDS):
        self.directory, self.log = directory, log
        self.path = directory.join(self.FILE)
        self.heartbeat_path = directory.join(self.HEARTBEAT_FILE)
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
        """Takes the lock, or raises RunLockError naming the live owner (StorageError or
        StorageUnreachableError naming ``--model-dir`` when the directory cannot be written)."""
        with failures_named(self.directory.path, "written", "--model-dir"):
            file_system.makedirs(self.directory.path)
            killed = self._read(self.heartbeat_path)  # a run killed whose lock may be gone: before ours replaces it
            if killed is not None:
                self.record[TAKEN_OVER] = {key: killed.get(key) for key in KILLED_RUN_FIELDS}
            created = self._create()
        if not created:
            owner = self._owner()
            why_stale = self._stale(owner)
            if why_stale is None:
                raise RunLockError(f"--model-dir {self.directory.path} is in use by another run: {describe(owner)}; "
                                   f"wait for it to finish, or remove {self.path} if that run is gone")
            self.log(f"warning: taking over {self.path} from a run that is gone ({why_stale}): {describe(owner)}")
            if owner is not None:  # when it was last alive: goodput counts its time since its last record as lost
                self.record[TAKEN_OVER] = {key: owner.get(key) for key in KILLED_RUN_FIELDS}
            write_json(self.path, self.record)
        if "://" in self.path:
            self._settle()
        self._write_heartbeat()
        self._beating = threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True)
        self._beating.start()
        _HELD.add(self)

    def release(self) -> None:
        """Stops the heartbeat and removes the lock if it is still ours."""
        _HELD.discard(self)
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
        try:
            for path in (self.heartbeat_path, self.path):  # a heartbeat file left behind: a run that did not end
                if self._is_ours(path):
                    file_system.remove(path)
        except (*file_system.failures(), StorageError, StorageUnreachableError) as error:
            # The run's own outcome stands; a lock left behind is taken over once it is stale.
            self.log(f"warning: could not remove {self.path}: {error}")

    # ------------------------------------------------------------------------------ helpers
    def _create(self) -> bool:
        """Writes the lock if there is none: atomically on a local disk."""
        data = json.dumps(self.record, indent=2, sort_keys=True).encode("utf-8")
        if "://" not in self.path:
            try:
                handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            try:
                with os.fdopen(handle, "wb") as file:
                    file.write(data)
            except OSError:  # a disk full: no lock cut short is left behind
                os.remove(self.path)
                raise
            return True
        if file_system.exists(self.path):
            return False
        write_json(self.path, self.record)
        return True

    def _settle(self) -> None:
        time.sleep(SETTLE_SECONDS)
        if not self._is_ours():
            raise RunLockError(f"--model-dir {self.directory.path} was taken by another run starting at the same "
                               f"time: {describe(self._owner())}")

    def _owner(self) -> dict[str, Any] | None:
        return self._read(self.path)

    @staticmethod
    def _read(path: str) -> dict[str, Any] | None:
        """The record in ``path`` (the lock or the heartbeat file), or None when absent or unreadable."""
        try:
            record = read_json(path)
        except StorageError:
            return None
        return record if isinstance(record, dict) else None

    def _is_ours(self, path: str | None = None) -> bool:
        """Whether the lock (or the file ``path``) holds this run's record."""
        owner = self._read(path or self.path)
        return owner is not None and owner.get("token") == self.record["token"]

    def _write_heartbeat(self) -> None:
        """The lock's record (without a dead run's) in the heartbeat file, which outlives a lock removed
        by hand."""
        write_json(self.heartbeat_path, {key: value for key, value in self.record.items() if key != TAKEN_OVER})

    def _stale(self, owner: dict[str, Any] | None) -> str | None:
        """Why ``owner`` is gone, or None when it may still be running. A lock that cannot be read
        (None: empty, being written, cut short) or whose heartbeat is in the future is judged by the
        file's modification time; RunLockError when that is far in the future too."""
        if owner is not None and owner.get("host") == self.record["host"] and not process_alive(owner.get("pid")):
            return f"no process {owner.get('pid')} on this host"
        heartbeat = owner_time(owner, "heartbeat")
        now = time.time()
        if heartbeat is not None and heartbeat <= now:
            age = now - heartbeat
            return f"no heartbeat for {age:.0f}s" if age > self.stale_seconds else None
        modified = self._modified()
        if modified is None:
            return "its lock file is gone"
        age = now - modified
        what = "its lock file cannot be read" if heartbeat is None else "its heartbeat is in the future"
        if age < -self.stale_seconds:
            raise RunLockError(f"--model-dir {self.directory.path}: {self.path} was modified {-age:.0f}s in the "
                               f"future and {what}, so whether its run is alive cannot be told; remove {self.path} "
                               "if no run is using the directory, and check this host's clock")
        return f"{what} and it was last modified {age:.0f}s ago" if age > self.stale_seconds else None

    def _modified(self) -> float | None:
        """The lock file's modification time (seconds since the epoch), or None when it is gone."""
        try:
            return file_system.mtime(self.path)
        except file_system.not_found():
            return None

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                if not self._is_ours():
                    self.log(f"warning: {self.path} is no longer this run's lock")
                    return
                self.record["heartbeat"] = time.time()
                write_json(self.path, self.record)
                self._write_heartbeat()
            except (StorageError, StorageUnreachableError) as error:  # tried again at the next beat
                self.log(f"warning: the heartbeat of {self.path} could not be written: {error}")
