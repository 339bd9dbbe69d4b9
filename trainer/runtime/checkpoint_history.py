"""A directory's checkpoint history: which checkpoints ``checkpoints/`` holds, oldest first, as its
``checkpoint`` state file names them and as the files on disk are.

tf.train.CheckpointManager keeps its list of checkpoints in ``checkpoints/checkpoint`` and trusts
it: a name missing there is never resumed from, and one listed there is restored, deleted or
renamed wherever it points. This module makes the files present the truth:

* :func:`read_history`: the checkpoints of a directory, the state file's names each checked to
  stay inside the directory (:class:`CheckpointNameError`, exit status 3, names the file and the
  name), completed with the ``ckpt-N.index`` files present, or rebuilt from them when the state
  file is missing or damaged (``History.rebuilt`` says why).
* :func:`write_history`: the state file written with timestamps, so a CheckpointManager built on it
  keeps every checkpoint in its list (without them it silently drops them all).
* :func:`set_aside`: a checkpoint's files moved to ``damaged/`` under a name no earlier one has:
  nothing is overwritten, nothing outside the directory is touched. :func:`set_aside_file` does
  the same for one file of a directory (a model directory's damaged goodput.json).
* :func:`unfinished_saves` and :func:`remove_unfinished_save`: what a save that did not finish (a
  full disk, a process killed while writing) left, and its removal.

Every path is a plain string joined with posixpath (``gs://`` stays ``gs://``).
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import time
from typing import Callable

from tfrecords.errors import DataError
from trainer.runtime import file_system

STATE_FILE = "checkpoint"
DAMAGED = "damaged"
_INDEX = re.compile(r"^ckpt-(\d+)\.index$")
_NAME = re.compile(r"^ckpt-(\d+)$")
_UNFINISHED = re.compile(r"^ckpt-(\d+)(_temp|\.data-\d+-of-\d+)$")  # a save's temporary directory or data files


class CheckpointNameError(DataError):
    """The checkpoint state file names a checkpoint outside its directory (exit status 3)."""


@dataclasses.dataclass(frozen=True)
class History:
    """The checkpoints of ``directory``: ``prefixes`` oldest first, the last the one to resume from.

    ``rebuilt`` is None when the state file lists exactly these; else the state file should be
    written again, and it says why (missing, damaged, lacking checkpoints that are on disk), or is
    empty when only entries whose files are gone differ."""

    directory: str
    prefixes: tuple[str, ...]
    rebuilt: str | None = None

    @property
    def latest(self) -> str | None:
        return self.prefixes[-1] if self.prefixes else None


def state_path(directory: str) -> str:
    return posixpath.join(directory, STATE_FILE)


def damaged_directory(directory: str) -> str:
    return posixpath.join(directory, DAMAGED)


def _split_scheme(path: str) -> tuple[str, str]:
    scheme, separator, rest = path.partition("://")
    return (scheme + separator, rest) if separator else ("", path)


def _absolute(path: str) -> str:
    """``path`` normalised: a local one made absolute, a URL's path part cleaned of ``//`` and ``/.``."""
    scheme, rest = _split_scheme(path.rstrip("/") or "/")
    if not scheme:
        return os.path.abspath(rest)
    return scheme + posixpath.normpath(rest)


def resolve(directory: str, name: str) -> str:
    """The path of checkpoint ``name`` as the state file of ``directory`` gives it (relative to the
    directory, or absolute); CheckpointNameError unless it is a checkpoint directly inside it."""
    where = _absolute(directory)
    parts = _split_scheme(name)[1].split("/")
    path = name if (_split_scheme(name)[0] or name.startswith("/")) else posixpath.join(directory, name)
    if not name or ".." in parts or "\\" in name or posixpath.dirname(_absolute(path)) != where:
        raise CheckpointNameError(
            f"{state_path(directory)} names checkpoint {name!r}, which is not inside {directory}: a checkpoint "
            f"path there must be a file name in that directory. Nothing was read, moved or deleted; correct or "
            f"remove {state_path(directory)} (the checkpoints present are found again without it)")
    return posixpath.join(directory, posixpath.basename(path))


def _step(prefix: str) -> int:
    match = _NAME.match(posixpath.basename(prefix))
    return int(match.group(1)) if match else -1


def _read_state(directory: str) -> tuple[CheckpointState | None, str | None]:
    """The parsed state file, or (None, why) when it is missing or damaged."""
    path = state_path(directory)
    if not file_system.exists(path):
        return None, f"{path} is missing"
    from google.protobuf import text_format  # the state file is TensorFlow's: only its engine writes one
    from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

    try:
        with file_system.open_file(path, "rb") as handle:
            text = handle.read().decode("utf-8")
        state = text_format.Parse(text, CheckpointState())
    except (*file_system.failures(), text_format.ParseError, UnicodeDecodeError) as error:
        return None, f"{path} is damaged ({' '.join(str(error).split())[:120]})"
    if not state.model_checkpoint_path:
        return None, f"{path} names no checkpoint"
    return state, None


def on_disk(directory: str) -> list[str]:
    """The prefixes of the ``ckpt-N.index`` files directly in ``directory``, by step."""
    found = []
    for path in file_system.glob(posixpath.join(directory, "ckpt-*.index")):
        match = _INDEX.match(posixpath.basename(path))
        if match:
            found.append((int(match.group(1)), posixpath.join(directory, posixpath.basename(path)[:-len(".index")])))
    return [prefix for _, prefix in sorted(found)]


def read_history(directory: str) -> History:
    """The checkpoints of ``directory``, oldest first.

    With a readable state file: the checkpoints it lists that are present (the latest it names last,
    as TensorFlow resumes), plus every other ``ckpt-N.index`` present that is older than that latest
    (a checkpoint a fallback or an earlier version left out of the list). Checkpoints newer than the
    state file's latest are left alone: a save that never reached the state file, written again by
    the resumed run. Without a readable state file: every ``ckpt-N.index`` present.
    Raises CheckpointNameError for a name outside the directory, before anything is touched."""
    state, why = _read_state(directory)
    present = on_disk(directory)
    if state is None:
        return History(directory, tuple(present), why if present else None)
    latest = resolve(directory, state.model_checkpoint_path)
    listed = [resolve(directory, name) for name in state.all_model_checkpoint_paths]
    if not file_system.exists(latest + ".index"):
        # the latest it names is gone: every checkpoint present counts
        return History(directory, tuple(present), f"{state_path(directory)} names {latest}, which is missing"
                       if present else None)
    kept = [path for path in listed if path != latest and file_system.exists(path + ".index")]
    kept += [path for path in present if path not in kept and path != latest and _step(path) < _step(latest)]
    prefixes = tuple(sorted(kept, key=_step)) + (latest,)
    added = [posixpath.basename(path) for path in prefixes if path not in listed]
    if added:
        rebuilt = f"{state_path(directory)} lacks {', '.join(added)}"
    else:  # as listed, or entries whose files are gone: rewritten without a word
        rebuilt = None if list(prefixes) == listed else ""
    return History(directory, prefixes, rebuilt)


def write_history(history: History) -> None:
    """Writes ``history`` as the directory's state file (names relative to it, the last the latest),
    or removes the file when the history is empty. Each checkpoint gets a timestamp (its index
    file's time) after ``last_preserved_timestamp``: a CheckpointManager keeps managing only the
    checkpoints so stamped."""
    path = state_path(history.directory)
    if not history.prefixes:
        if file_system.exists(path):
            file_system.remove(path)
        return
    from google.protobuf import text_format
    from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState

    now = time.time()
    stamps = []
    for prefix in history.prefixes:
        try:
            stamp = file_system.mtime(prefix + ".index")
        except file_system.failures():
            stamp = now
        stamps.append(min(max(stamp, stamps[-1] if stamps else stamp), now))
    state = CheckpointState(model_checkpoint_path=posixpath.basename(history.prefixes[-1]),
                            all_model_checkpoint_paths=[posixpath.basename(p) for p in history.prefixes],
                            all_model_checkpoint_timestamps=stamps, last_preserved_timestamp=min(stamps) - 1.0)
    data = text_format.MessageToString(state).encode("utf-8")
    if "://" in path:  # an object store publishes an object whole
        with file_system.open_file(path, "wb") as handle:
            handle.write(data)
        return
    with file_system.open_file(path + ".tmp", "wb") as handle:
        handle.write(data)
    file_system.rename(path + ".tmp", path, overwrite=True)


def set_aside(directory: str, prefix: str) -> str:
    """Moves the files of checkpoint ``prefix`` (a checkpoint directly in ``directory``) to
    ``damaged/`` and returns their new prefix there: ``damaged/ckpt-N``, or ``damaged/ckpt-N_2``,
    ``_3``... when a checkpoint of that name was set aside before. Nothing is overwritten."""
    if posixpath.dirname(prefix) and _absolute(posixpath.dirname(prefix)) != _absolute(directory):
        raise CheckpointNameError(f"checkpoint {prefix} is not inside {directory}; nothing was moved")
    prefix = posixpath.join(directory, posixpath.basename(prefix))
    name = posixpath.basename(prefix)
    damaged = damaged_directory(directory)
    file_system.makedirs(damaged)
    target = _unused_name(name, lambda candidate: bool(file_system.glob(posixpath.join(damaged, candidate + ".*"))))
    for path in file_system.glob(prefix + ".*"):
        suffix = posixpath.basename(path)[len(name):]
        if suffix == ".index" or suffix.startswith(".data-"):
            file_system.rename(path, posixpath.join(damaged, target + suffix), overwrite=False)
    return posixpath.join(damaged, target)


def set_aside_file(directory: str, name: str) -> str:
    """Moves the file ``name`` of ``directory`` to ``damaged/`` and returns its new path there:
    ``damaged/NAME``, or ``damaged/STEM_2.EXT``, ``_3``... when a file of that name was set aside
    before (the rule of :func:`set_aside`). Nothing is overwritten."""
    damaged = damaged_directory(directory)
    file_system.makedirs(damaged)
    stem, extension = posixpath.splitext(name)
    target = _unused_name(stem, lambda candidate: file_system.exists(posixpath.join(damaged, candidate + extension)))
    moved = posixpath.join(damaged, target + extension)
    file_system.rename(posixpath.join(directory, name), moved, overwrite=False)
    return moved


def _unused_name(name: str, taken: Callable[[str], bool]) -> str:
    """``name``, or ``name_2``, ``name_3``... the first that ``taken`` (a check of a candidate) refuses."""
    target, counter = name, 1
    while taken(target):
        counter += 1
        target = f"{name}_{counter}"
    return target


def unfinished_saves(directory: str) -> list[str]:
    """The prefixes of checkpoints directly in ``directory`` whose save did not finish (a process
    killed while writing): a ``ckpt-N_temp`` directory left, or ``ckpt-N.data-*`` files without
    their ``ckpt-N.index``. By step."""
    found = set()
    for path in file_system.glob(posixpath.join(directory, "ckpt-*")):
        name = posixpath.basename(path.rstrip("/"))
        match = _UNFINISHED.match(name)
        if match and (match.group(2) == "_temp" or not file_system.exists(
                posixpath.join(directory, f"ckpt-{match.group(1)}.index"))):
            found.add(int(match.group(1)))
    return [posixpath.join(directory, f"ckpt-{step}") for step in sorted(found)]


def remove_unfinished_save(directory: str, prefix: str) -> list[str]:
    """After a save of ``prefix`` failed: removes its temporary directory (``prefix_temp*``) and, when
    no index was written, the data files it left; returns what was removed. Only paths directly in
    ``directory`` named after ``prefix`` are touched."""
    name = posixpath.basename(prefix)
    removed = []
    for path in file_system.glob(posixpath.join(directory, name + "_temp*")):
        if file_system.isdir(path):
            file_system.rmtree(path)
        else:
            file_system.remove(path)
        removed.append(path)
    if not file_system.exists(posixpath.join(directory, name + ".index")):
        for path in file_system.glob(posixpath.join(directory, name + ".data-*")):
            file_system.remove(path)
            removed.append(path)
    return removed
