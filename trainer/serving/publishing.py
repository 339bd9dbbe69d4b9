"""Publishing a SavedModel as a numbered version: versions, staging directories, abandoning an export.

TF Serving polls a model's base path for numbered version directories (``OUTPUT/1``, ``OUTPUT/2``,
...) and loads the highest. A version must therefore appear whole or not at all:

* The SavedModel is written to a staging directory first: inside ``OUTPUT`` on a local disk (same
  filesystem, so the final rename is atomic), in the local temporary directory for an object store
  (gs://: no directory rename there). Staging directories are named
  ``<prefix><version>-<host>-<pid>-<random>``, so that a later export can tell a leftover of a
  killed process (removed) from one still being written (kept).
* Publishing is one rename on a local disk; on an object store a copy file by file with
  ``saved_model.pb`` last, so a server never finds the graph before its variables.
* A signal handler that ends the process calls :func:`abandon_export`: what this process's export
  wrote goes, and a version already complete is named (trainer/commands/export.py).

What is written into the staging directory (the SavedModel and its signatures) is
trainer/serving/saved_model.py's.
"""
from __future__ import annotations

import os
import posixpath
import re
import shutil
import socket
import tempfile
import uuid
from typing import Any, Callable

import tensorflow as tf

from trainer.runtime.run_lock import process_alive
from trainer.runtime.storage import check_output_directory, failures_named

# Staging directories are named <prefix><version>-<host>-<pid>-<random>: host and pid tell a later
# export whether the process writing one is still alive (remove_stale_staging).
STAGING_PREFIX = ".export-"  # inside a local --output
LOCAL_STAGING_PREFIX = "xlnet-export-"  # in the local temporary directory, for an object-store --output
_STAGING_OWNER = re.compile(r"\d+-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{12}")

# The export this process is running (at most one: the command's), for abandon_export.
_RUNNING_EXPORT: dict[str, Any] = {}


def next_version(output: str | os.PathLike) -> int:
    """One more than the highest numbered version directory in ``output`` (1 when there is none)."""
    output = os.fspath(output)
    names = [name.rstrip("/") for name in tf.io.gfile.listdir(output)] if tf.io.gfile.isdir(output) else []
    versions = [int(name) for name in names if name.isdigit() and tf.io.gfile.isdir(posixpath.join(output, name))]
    return max(versions, default=0) + 1


def publish_version(output: str, version: int, write: Callable[[str], str]) -> str:
    """Writes a SavedModel through a staging directory and publishes it as ``output/<version>``.

    Args:
      output: the base directory of the versions (local or gs://), without a trailing slash.
      version: the version number; the caller has checked that ``output/<version>`` does not exist.
      write: called with the staging directory (empty, private to this export); writes the
        SavedModel (and whatever it needs) under it and returns the SavedModel's directory.

    Returns:
      ``output/<version>``, complete. The staging directory is removed whether or not ``write``
      and the publishing succeed; a version cut short is never left under its number, nor an
      ``output`` this export created. An ``output`` that is a file, read-only or unreachable is a
      StorageError naming ``--output`` (StorageUnreachableError for unreachable storage).
    """
    target = posixpath.join(output, str(version))
    check_output_directory(output)
    created = not _is_object_store(output) and not tf.io.gfile.exists(output)
    with failures_named(output, "written", "--output"):
        staging = _staging_directory(output, version)
    _RUNNING_EXPORT.update(staging=staging, target=target, publishing=False)
    try:
        saved = write(staging)
        _RUNNING_EXPORT["publishing"] = True
        with failures_named(target, "written", "--output"):
            _publish(saved, target)
    finally:
        tf.io.gfile.rmtree(staging)
        _RUNNING_EXPORT.pop("staging")
        if created and tf.io.gfile.isdir(output) and not tf.io.gfile.listdir(output):
            tf.io.gfile.rmtree(output)  # this export made it, and published nothing in it
    return target


def abandon_export() -> str | None:
    """For the handler of a signal that ends the process: removes what this process's export has
    written, and returns the path of its version if that was already complete (else None).

    A handler runs wherever the main thread was, possibly inside TensorFlow, so only local file
    calls are made, but while a version is copied to an object store (the main thread is then in
    ``_publish``'s loop). A staging directory this leaves (an export stopped before recording
    it) is removed by the next export, its process being gone.
    """
    running = dict(_RUNNING_EXPORT)
    staging, target = running.get("staging"), running.get("target")
    complete = None
    if target is not None and not _is_object_store(target):
        if os.path.exists(os.path.join(target, "saved_model.pb")):
            complete = target  # a local version appears whole, by one rename
    elif running.get("publishing"):
        if tf.io.gfile.exists(posixpath.join(target, "saved_model.pb")):
            complete = target  # copied last, in one upload
        elif tf.io.gfile.exists(target):
            tf.io.gfile.rmtree(target)
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
    return complete


def remove_stale_staging(parent: str, prefix: str = STAGING_PREFIX) -> list[str]:
    """Removes the staging directories in ``parent`` whose export ran on this host and is no longer
    running (killed by a signal that cannot be caught, such as SIGKILL); returns their paths.

    Those of other hosts, of live processes and with names of another form are kept: their
    owner may still be writing them.
    """
    if not tf.io.gfile.isdir(parent):
        return []
    host = socket.gethostname()
    removed = []
    for name in sorted(entry.rstrip("/") for entry in tf.io.gfile.listdir(parent)):
        owner = _STAGING_OWNER.fullmatch(name[len(prefix):]) if name.startswith(prefix) else None
        if owner is None or owner["host"] != host or process_alive(int(owner["pid"])):
            continue
        try:
            tf.io.gfile.rmtree(posixpath.join(parent, name))
        except tf.errors.OpError:
            continue  # another export is removing it too; a leftover never blocks an export
        removed.append(posixpath.join(parent, name))
    return removed


def _is_object_store(path: str) -> bool:
    return "://" in path


def _staging_directory(output: str, version: int) -> str:
    """Creates the directory the SavedModel is written to before it is published: inside ``output``
    on a local disk (same filesystem, so the final rename is atomic), in the local temporary
    directory for an object store (which has no directory rename; TensorFlow's would not survive a
    transient error). Staging directories that killed exports left there are removed first."""
    if _is_object_store(output):
        parent, prefix = tempfile.gettempdir(), LOCAL_STAGING_PREFIX
    else:
        parent, prefix = output, STAGING_PREFIX
    remove_stale_staging(parent, prefix)
    staging = posixpath.join(parent, f"{prefix}{version}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    if _is_object_store(output):
        os.mkdir(staging, 0o700)  # private, as tempfile.mkdtemp would make it: the weights are in there
    else:
        tf.io.gfile.makedirs(staging)
    return staging


def _publish(saved: str, target: str) -> None:
    """Moves a finished SavedModel to ``target``: one rename on a local disk; on an object store a
    copy file by file (single-object writes, which TensorFlow's GCS layer retries), saved_model.pb
    last, so a server polling for versions never finds the graph before its variables."""
    if not _is_object_store(target):
        tf.io.gfile.rename(saved, target)
        return
    files = [posixpath.join(root, name) for root, _, names in tf.io.gfile.walk(saved) for name in names]
    graph = posixpath.join(saved, "saved_model.pb")
    try:
        for source in sorted(files, key=lambda path: path == graph):
            destination = posixpath.join(target, posixpath.relpath(source, saved))
            tf.io.gfile.makedirs(posixpath.dirname(destination))
            tf.io.gfile.copy(source, destination)
    except BaseException:
        # A copy cut short (an error, KeyboardInterrupt) publishes nothing: the version's files
        # copied so far go (the export checked that ``target`` was new).
        if tf.io.gfile.exists(target):
            tf.io.gfile.rmtree(target)
        raise
