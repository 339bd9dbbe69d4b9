"""TensorBoard event files: their scalars read back, and a file rewritten without later steps.

A run's writer (:class:`EventFileWriter`, one per directory: tensorboard/train, tensorboard/eval of a
model directory) appends ``Event`` records to ``events.out.tfevents.*`` files, one new file per
process, encoded by trainer/runtime/event_records.py without TensorFlow (both engines write them so).
Reading them back serves the tests and the benchmarks (ModelDirectory.scalars); a
resumed run rewrites them without the events of the steps it will log again
(ModelDirectory.forget_steps_after), so that the curves do not double. Every path goes through
trainer/runtime/file_system.py (local or gs://).

A run's logs written on a full disk (its step log, its TensorBoard events) stop the run with one
sentence naming the file and what to do (:func:`full_disk_stops_the_run`, a
:class:`LogWriteError`, exit status 3), and an append cut short by the full disk is cut back
(:func:`append_text`), so that the same command resumes from the last checkpoint once space is
freed and logs each step once.
"""
from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import socket
import time
from typing import Callable, Iterator, Mapping

from tfrecords.errors import DataError
from tfrecords.record_files import frame_record
from trainer.runtime import event_records, file_system

EVENT_FILES = "events.out.tfevents.*"

# How TensorFlow's filesystems tell a full disk or an exhausted quota (ENOSPC, EDQUOT): a
# ResourceExhaustedError "<path>; No space left on device". The kind alone is not enough: an
# allocator out of memory raises a ResourceExhaustedError too.
_FULL = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))
_FULL_PATH = re.compile(r"(\S+); (?:" + "|".join(map(re.escape, _FULL)) + ")")


class LogWriteError(DataError):
    """A run's log (its step log, its TensorBoard events) could not be written for want of space;
    the message names the file and what to do. The run stops (exit status 3); its checkpoints are kept."""


def is_full_disk(error: BaseException) -> bool:
    """Whether ``error`` says the disk or quota is full: an ``OSError``, TensorFlow's
    ResourceExhaustedError, or tensorstore's (Orbax's writes) ``RESOURCE_EXHAUSTED: ... No space
    left on device``, a ValueError."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    said = getattr(error, "message", "") or str(error)
    exhausted = type(error).__name__ == "ResourceExhaustedError" or said.startswith("RESOURCE_EXHAUSTED")
    return exhausted and any(text in said for text in _FULL)


@contextlib.contextmanager
def full_disk_stops_the_run(path: str, model_dir: str, latest_checkpoint: Callable[[], str | None]) -> Iterator[None]:
    """Turns a full disk met in the block, while ``path`` (a log of the run in ``model_dir``) is
    written, into a LogWriteError: the file, what to do, and the checkpoint the run will resume
    from (``latest_checkpoint()``). Any other error passes unchanged."""
    try:
        yield
    except file_system.failures() as error:
        if not is_full_disk(error):
            raise
        named = _FULL_PATH.search(getattr(error, "message", "") or "" if not isinstance(error, OSError) else "")
        written = getattr(error, "filename", None) or (named.group(1) if named else path)
        latest = latest_checkpoint()
        raise LogWriteError(
            f"cannot write {written}: no space left on the device. Free space under {model_dir} and run the "
            "same command again: the run resumes from "
            + (latest if latest else "its start, no checkpoint having been saved")
            + " and logs the steps after it again") from None


def append_text(path: str, text: str) -> None:
    """Appends ``text`` to ``path``. On a local disk an append that fails part way is cut back to the
    file's length before it, so that no torn line is left behind (an object store replaces the
    object whole, or not at all)."""
    append_bytes(path, text.encode("utf-8"))


def append_bytes(path: str, data: bytes) -> None:
    """Appends ``data`` to ``path``, cut back as :func:`append_text` says when it fails part way."""
    local = not file_system.has_scheme(path)
    before = os.path.getsize(path) if local and os.path.exists(path) else 0
    try:
        with file_system.open_file(path, "ab") as handle:
            handle.write(data)
    except file_system.failures():
        if local and os.path.exists(path):
            os.truncate(path, before)
        raise


class EventFileWriter:
    """Appends scalar events to a new ``events.out.tfevents.*`` file of ``directory`` (one per writer:
    TensorBoard reads a file per process), created at the first write, in the encoding of
    trainer/runtime/event_records.py (no TensorFlow needed). Appended as the step log is
    (:func:`append_bytes`): a full disk leaves no torn event behind."""

    def __init__(self, directory: str):
        self.directory = directory
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{id(self)}.v2"
        self.path = posixpath.join(directory, name)
        self._started = False

    def write(self, step: int, scalars: Mapping[str, float]) -> None:
        """Writes ``scalars`` (tag -> value, in that order) as one event at ``step``."""
        data = b""
        if not self._started:
            file_system.makedirs(self.directory)
            data += frame_record(event_records.encode_event(time.time(), file_version=event_records.FILE_VERSION))
        data += frame_record(event_records.encode_event(time.time(), step, scalars))
        append_bytes(self.path, data)
        self._started = True


def event_files(directory: str) -> list[str]:
    """The event files of one writer's ``directory``, sorted by name (so in the order written)."""
    return sorted(file_system.glob(posixpath.join(directory, EVENT_FILES)))


def scalar_events(directory: str) -> Iterator[tuple[int, str, float]]:
    """(step, tag, value) of every scalar in the event files of ``directory``, in file order,
    whether written as a tensor (tf.summary) or as a simple value (TF1 summaries)."""
    for path in event_files(directory):
        records, _ = event_records.read_records(path)  # a killed writer's torn last event is left out
        for record in records:
            event = event_records.decode_event(record)
            for tag, value in event.scalars:
                yield event.step, tag, value


def forget_events_after(directory: str, step: int) -> None:
    """Rewrites every event file of ``directory`` without its summaries of steps after ``step``."""
    for path in event_files(directory):
        drop_events_after(path, step)


def drop_events_after(path: str, step: int) -> None:
    """Rewrites one TensorBoard event file without its events of steps after ``step`` (left as it
    is when it has none). A file cut short by a killed run keeps the events before the cut."""
    records, clean = event_records.read_records(path)
    kept = [record for record in records if not _summary_after(record, step)]
    dropped = len(records) - len(kept) + (0 if clean else 1)  # the torn last record of a killed writer
    if not dropped:
        return
    # not named *tfevents*: a rewrite cut short must not be read as another event file
    name = ".rewrite-" + posixpath.basename(path).replace("tfevents", "tmp")
    temporary = posixpath.join(posixpath.dirname(path), name)
    with file_system.open_file(temporary, "wb") as handle:
        handle.write(b"".join(frame_record(record) for record in kept))
    file_system.rename(temporary, path, overwrite=True)


def _summary_after(record: bytes, step: int) -> bool:
    event = event_records.decode_event(record)
    return event.summary and event.step > step
