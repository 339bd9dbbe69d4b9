"""Whole-file reads and writes (bytes, JSON), with errors that name the file.

Every file the trainer, export and import read or write goes through trainer/runtime/file_system.py
(tf.io.gfile where TensorFlow runs, Python or etils.epath where it does not), so any path may be
local or gs://: small files whole through these helpers; listings, globs, copies, renames and record
streams through file_system, tf.io.gfile and tf.data directly, in the module that owns them (trainer/runtime/model_dir.py for model directories,
trainer/inputs/text_files.py for fine-tuning files, trainer/serving/saved_model.py for
publishing an export). tests/test_cloud_storage.py runs those paths against a GCS API.
TensorFlow is imported only where a path with a scheme (gs://) needs it: a local file is read
with Python's own I/O, so that a light command reading one (`xlnet goodput` on a local
directory) never pays for TensorFlow's import.

A filesystem that fails is a sentence naming the path (and the flag, where the caller knows it),
never a traceback (:func:`storage_failure`, :func:`failures_named`):

* ``StorageError`` (a UsageError, exit status 2): the path cannot be used as given: missing, a
  file where a directory is needed (or the reverse), read-only, no permission, not JSON.
* ``StorageUnreachableError`` (a DataError, exit status 3): the storage did not answer: a host
  that cannot be resolved or connected to, TensorFlow's retries exhausted. The command line may
  be right; the network or the service is not. TensorFlow's GCS filesystem retries a connection
  that fails up to ``GCS_RETRY_CONFIG_MAX_RETRIES`` times (10 by default, about 3 minutes in
  all) before this is raised; a host that cannot be resolved fails at once.

Paths stay plain strings joined with posixpath: ``pathlib.Path("gs://b/m")`` would silently
become ``gs:/b/m``, a local directory.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Iterator

from tfrecords.errors import DataError, UsageError
from tfrecords.json_documents import load_json
from tfrecords.tensorflow_errors import UNREACHABLE_ADVICE, error_text, is_unreachable
from trainer.runtime import file_system


class StorageError(UsageError):
    """A file that cannot be read as expected; the message names it. When the filesystem refused,
    ``path`` is the file and ``reason`` what the filesystem said, so that an enclosing
    :func:`failures_named` can name its flag too."""

    def __init__(self, message: str, *, path: str | None = None, reason: str | None = None):
        super().__init__(message)
        self.path, self.reason = path, reason


class StorageUnreachableError(DataError):
    """Storage that did not answer (no network, a host that cannot be resolved, retries
    exhausted); the message names the path, and the flag when the caller knows it."""


def _not_found(error: BaseException) -> bool:
    return isinstance(error, file_system.not_found())


def storage_failure(error: BaseException, path: str, doing: str = "read",
                    flag: str | None = None) -> StorageError | StorageUnreachableError:
    """The error to raise for ``error`` (a ``tf.errors.OpError`` or ``OSError``) met while ``path``
    was being ``doing`` ("read", "written", ...): one sentence naming the flag (if given) and the
    path, then what the filesystem said, e.g. ``--model-dir /m cannot be written: /m/run.lock:
    Read-only file system``."""
    path = os.fspath(path)
    subject = f"{flag} {path}" if flag else path
    if isinstance(error, OSError):
        where = error.filename if error.filename not in (None, path) else None
        reason = f"{where}: {error.strerror}" if where else (error.strerror or str(error))
    else:
        text = error_text(error)  # "<Kind>: <message>", the message's first line
        message = text.split(": ", 1)[1] if ": " in text else text
        if is_unreachable(message):
            return StorageUnreachableError(f"{subject} cannot be reached: {message} ({UNREACHABLE_ADVICE})")
        # TensorFlow says "<path>; <reason>" or "<path> <reason>"; the path is named once.
        if message.startswith(path + ";"):
            message = message[len(path) + 1:].strip()
        elif message.startswith(path + " "):
            message = message[len(path) + 1:].strip()
        reason = message.replace("; ", ": ", 1) if message.startswith(("/", "gs://")) else message
    if _not_found(error) and doing == "read" and not flag:
        return StorageError(f"{path}: file not found", path=path, reason="file not found")
    return StorageError(f"{subject} cannot be {doing}: {reason}", path=path, reason=reason)


@contextlib.contextmanager
def failures_named(path: str | os.PathLike, doing: str = "read", flag: str | None = None) -> Iterator[None]:
    """Turns a filesystem error raised in the block (``tf.errors.OpError``, ``OSError``) into
    :func:`storage_failure`'s StorageError or StorageUnreachableError naming ``flag`` and ``path``;
    a helper's StorageError for a file the filesystem refused gets ``flag`` and ``path`` named too."""
    path = os.fspath(path)
    try:
        yield
    except file_system.failures() as error:
        raise storage_failure(error, path, doing, flag) from None
    except StorageError as error:  # a helper's, naming a file in ``path``: the flag is named too
        if not flag or error.reason is None:
            raise
        reason = error.reason if error.path == path else f"{error.path}: {error.reason}"
        raise StorageError(f"{flag} {path} cannot be {doing}: {reason}", path=path, reason=reason) from None


def check_output_directory(path: str, flag: str = "--output") -> None:
    """Before anything is written to ``path``: a StorageError naming ``flag`` when it is a file,
    StorageUnreachableError when its storage does not answer. (A read-only one is found by the
    first write, through :func:`failures_named`.)"""
    with failures_named(path, "read", flag):
        is_file = file_system.exists(path) and not file_system.isdir(path)
    if is_file:
        raise StorageError(f"{flag} {path} cannot be written: it is a file, not a directory")


def exists(path: str | os.PathLike) -> bool:
    """Whether a file or directory is at ``path`` (a local one is checked without TensorFlow);
    StorageUnreachableError when its storage does not answer."""
    path = os.fspath(path)
    with failures_named(path, "read"):
        return os.path.exists(path) if not file_system.has_scheme(path) else file_system.exists(path)


def read_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of a file; StorageError names a missing one (or a directory, or one that cannot be
    read), StorageUnreachableError one whose storage does not answer. A local file is read without
    TensorFlow."""
    path = os.fspath(path)
    with failures_named(path, "read"):
        if not file_system.has_scheme(path):  # Python's own I/O, whatever is loaded: the same errors everywhere
            with open(path, "rb") as handle:
                return handle.read()
        with file_system.open_file(path, "rb") as handle:
            return handle.read()


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes a file whole (an object store publishes it when it is closed); StorageError names a
    file that cannot be written (read-only, a directory in the way), StorageUnreachableError one
    whose storage does not answer."""
    path = os.fspath(path)
    with failures_named(path, "written"):
        with file_system.open_file(path, "wb") as handle:
            handle.write(data)


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value of a file; StorageError names a missing file or one that is not JSON (bytes
    that are not UTF-8 and nesting too deep included: tfrecords/json_documents.py)."""
    return load_json(read_bytes(path), os.fspath(path), StorageError)


def write_json(path: str | os.PathLike, values: Any) -> None:
    """Writes ``values`` as the indented, key-sorted JSON every configuration file uses."""
    write_bytes(path, (json.dumps(values, indent=2, sort_keys=True) + "\n").encode("utf-8"))
