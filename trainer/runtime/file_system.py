"""Listings, renames, copies and streams of model-directory files, with or without TensorFlow.

The model directory (trainer/runtime/model_dir.py), the run lock and the logs are written by both
training engines, and the JAX engine runs where TensorFlow is not installed (a GPU machine with JAX
only). Every such operation goes through this module, which chooses per call:

* TensorFlow's ``tf.io.gfile`` once TensorFlow is loaded (the TensorFlow engine, export), or for a
  path with a scheme (``gs://``) where TensorFlow is installed: what the trainer always used;
* Python's own ``os`` and ``shutil`` for a local path in a process without TensorFlow;
* ``etils.epath`` (installed with Orbax, the JAX engine's checkpointer) for a path with a scheme
  where TensorFlow is not installed.

Errors stay those of the implementation chosen: ``OSError`` from Python and epath, ``tf.errors``
from TensorFlow; :func:`failures` and :func:`not_found` name the kinds to catch, whichever ran.
Paths stay plain strings: ``pathlib.Path("gs://b/m")`` would become ``gs:/b/m``.
"""
from __future__ import annotations

import glob as python_glob
import os
import shutil
import sys
from typing import IO, Any

from tfrecords.errors import UsageError


def has_scheme(path: str) -> bool:
    return "://" in path


def _loaded_tensorflow() -> Any | None:
    return sys.modules.get("tensorflow")


def failures() -> tuple[type[BaseException], ...]:
    """What a file operation raises: OSError, and tf.errors.OpError once TensorFlow is loaded."""
    errors = getattr(_loaded_tensorflow(), "errors", None)
    return (OSError,) if errors is None else (OSError, errors.OpError)


def not_found() -> tuple[type[BaseException], ...]:
    """What a file operation raises for a path that does not exist."""
    errors = getattr(_loaded_tensorflow(), "errors", None)
    return (FileNotFoundError,) if errors is None else (FileNotFoundError, errors.NotFoundError)


class _LocalFiles:
    """tf.io.gfile's operations on local paths, in Python."""

    exists = staticmethod(os.path.exists)
    isdir = staticmethod(os.path.isdir)
    listdir = staticmethod(os.listdir)
    remove = staticmethod(os.remove)
    rmtree = staticmethod(shutil.rmtree)

    @staticmethod
    def makedirs(path: str) -> None:
        os.makedirs(path, exist_ok=True)

    @staticmethod
    def glob(pattern: str) -> list[str]:
        return python_glob.glob(pattern)

    @staticmethod
    def rename(source: str, target: str, overwrite: bool = False) -> None:
        if not overwrite and os.path.exists(target):
            raise FileExistsError(17, "File exists", target)
        os.replace(source, target)

    @staticmethod
    def copy(source: str, target: str, overwrite: bool = False) -> None:
        if not overwrite and os.path.exists(target):
            raise FileExistsError(17, "File exists", target)
        shutil.copyfile(source, target)

    @staticmethod
    def mtime(path: str) -> float:
        return os.stat(path).st_mtime

    @staticmethod
    def open(path: str, mode: str) -> IO:
        return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")


class _TensorFlowFiles:
    """tf.io.gfile, as the trainer always used it."""

    def __init__(self, tf: Any):
        self._gfile = tf.io.gfile
        for name in ("exists", "isdir", "listdir", "remove", "rmtree", "makedirs", "glob", "rename", "copy"):
            setattr(self, name, getattr(self._gfile, name))

    def mtime(self, path: str) -> float:
        return self._gfile.stat(path).mtime_nsec / 1e9

    def open(self, path: str, mode: str) -> IO:
        return self._gfile.GFile(path, mode)


class _EpathFiles:
    """etils.epath for a path with a scheme where TensorFlow is not installed."""

    def __init__(self):
        try:
            from etils import epath
        except ImportError:
            raise UsageError("a path with a scheme (gs://) needs TensorFlow's filesystems or etils.epath: install "
                             "the jax extra (pip install '.[jax]') or the tensorflow extra") from None
        self._path = epath.Path

    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    def isdir(self, path: str) -> bool:
        return self._path(path).is_dir()

    def listdir(self, path: str) -> list[str]:
        return [child.name for child in self._path(path).iterdir()]

    def remove(self, path: str) -> None:
        self._path(path).unlink()

    def rmtree(self, path: str) -> None:
        self._path(path).rmtree()

    def makedirs(self, path: str) -> None:
        self._path(path).mkdir(parents=True, exist_ok=True)

    def glob(self, pattern: str) -> list[str]:
        head, _, tail = pattern.rpartition("/")
        return [os.fspath(found) for found in self._path(head).glob(tail)]

    def rename(self, source: str, target: str, overwrite: bool = False) -> None:
        if not overwrite and self.exists(target):
            raise FileExistsError(17, "File exists", target)
        self._path(source).replace(target)

    def copy(self, source: str, target: str, overwrite: bool = False) -> None:
        self._path(source).copy(target, overwrite=overwrite)

    def mtime(self, path: str) -> float:
        return float(self._path(path).stat().mtime)

    def open(self, path: str, mode: str) -> IO:
        return self._path(path).open(mode)


_LOCAL = _LocalFiles()


def files_for(path: str) -> Any:
    """The implementation that handles ``path`` in this process (see the module's docstring)."""
    tf = _loaded_tensorflow()
    if tf is not None:
        return _TensorFlowFiles(tf)
    if not has_scheme(path):
        return _LOCAL
    try:
        import tensorflow as tf
    except ImportError:
        return _EpathFiles()
    return _TensorFlowFiles(tf)


def exists(path: str) -> bool:
    return files_for(path).exists(path)


def isdir(path: str) -> bool:
    return files_for(path).isdir(path)


def listdir(path: str) -> list[str]:
    return files_for(path).listdir(path)


def makedirs(path: str) -> None:
    files_for(path).makedirs(path)


def glob(pattern: str) -> list[str]:
    return files_for(pattern).glob(pattern)


def remove(path: str) -> None:
    files_for(path).remove(path)


def rmtree(path: str) -> None:
    files_for(path).rmtree(path)


def rename(source: str, target: str, overwrite: bool = False) -> None:
    files_for(target).rename(source, target, overwrite=overwrite)


def copy(source: str, target: str, overwrite: bool = False) -> None:
    files_for(source if has_scheme(source) else target).copy(source, target, overwrite=overwrite)


def mtime(path: str) -> float:
    """The modification time of ``path``, in seconds since the epoch."""
    return files_for(path).mtime(path)


def open_file(path: str, mode: str) -> IO:
    """A file object of ``path`` ("r", "w", "a", "rb", "wb"): text modes are UTF-8."""
    return files_for(path).open(path, mode)
