"""Whole-file reads and writes (bytes, JSON) through tf.io.gfile, with errors that name the file.

Every file the trainer, export and import read or write goes through tf.io.gfile, so any path
may be local or gs:// (or another filesystem TensorFlow knows): small files whole through these
helpers; listings, globs, copies, renames and record streams through tf.io.gfile and tf.data
directly, in the module that owns them (trainer/runtime/model_dir.py for model directories,
trainer/inputs/text_files.py for fine-tuning files, trainer/serving/saved_model.py for
publishing an export). tests/test_cloud_storage.py runs those paths against a GCS API.

Paths stay plain strings joined with posixpath: ``pathlib.Path("gs://b/m")`` would silently
become ``gs:/b/m``, a local directory.
"""
from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf

from tfrecords.errors import UsageError


class StorageError(UsageError):
    """A file that cannot be read as expected; the message names it."""


def read_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of a file; StorageError names a missing one."""
    path = os.fspath(path)
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            return handle.read()
    except tf.errors.NotFoundError:
        raise StorageError(f"{path}: file not found") from None


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes a file whole (an object store publishes it when it is closed)."""
    with tf.io.gfile.GFile(os.fspath(path), "wb") as handle:
        handle.write(data)


def read_json(path: str | os.PathLike) -> Any:
    """The JSON value of a file; StorageError names a missing file or one that is not JSON."""
    data = read_bytes(path)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise StorageError(f"{os.fspath(path)} is not valid JSON: {error}") from None


def write_json(path: str | os.PathLike, values: Any) -> None:
    """Writes ``values`` as the indented, key-sorted JSON every configuration file uses."""
    write_bytes(path, (json.dumps(values, indent=2, sort_keys=True) + "\n").encode("utf-8"))
