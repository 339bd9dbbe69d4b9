"""Checkpoints of the JAX engine's state with Orbax's CheckpointManager (as MaxText and Keras keep theirs).

One checkpoint per saved step, ``CHECKPOINTS/<step>/``: ``state`` (the step's StepState pytree of
trainer/runtime/jax_step.py: weights, the non-trainable variables with dropout's seed generators,
the optimizer's slots and step counter, the Transformer-XL memory) written by Orbax's
StandardSave, and ``position``, a small JSON document (where the reader is, the run's step) beside
it, so that a resumed run reads on from the record after the checkpoint's.

What it promises, as docs/reliability.md does for the TensorFlow checkpoints:

* **Atomic publish.** Orbax writes a step under a temporary name and renames it once complete; a
  write killed half-way leaves no ``<step>/``, and what it left is removed, with a warning, when
  the directory is next opened.
* **Asynchronous writes.** ``save`` returns once the arrays are copied off the device; the write goes
  on in the background, one at a time; ``wait`` returns once it is on disk (raising its error).
* **Keep N.** The newest ``keep`` checkpoints stay; older ones are deleted once a newer one is complete.
* **Damaged checkpoints set aside.** A checkpoint that cannot be read (a flipped byte in its data,
  a missing or truncated file) is moved, never deleted, to ``CHECKPOINTS/damaged/<step>``, and the
  one before it is restored; when none reads, UnreadableCheckpointError (exit status 3). A
  checkpoint whose arrays do not have the state's shapes (another model configuration) is not
  damage: it is a UsageError naming the first differing array, and nothing is moved.
* **A full disk stops the run in one sentence.** A write that fails for want of space is a
  CheckpointSaveError (exit status 3) naming the checkpoint, its partial files removed and the one
  the same command resumes from, the TensorFlow engine's words (trainer/runtime/training_stops.py).
"""
from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import sys
import traceback
from typing import Any, Callable, Mapping, NamedTuple, Optional

from tfrecords.errors import UsageError
from tfrecords.tensorflow_errors import error_text
from trainer.runtime import file_system
from trainer.runtime.event_files import is_full_disk
from trainer.runtime.jax_processes import wait_for_every_process
from trainer.runtime.training_stops import UnreadableCheckpointError, checkpoint_save_stopped

DAMAGED = "damaged"
# What Orbax names a step while writing it (renamed to the step once complete).
UNFINISHED_MARK = ".orbax-checkpoint-tmp"


class Restored(NamedTuple):
    """A checkpoint read back: its step, the state (the arrays laid out like the template's) and its position."""

    step: int
    state: Any
    position: dict


class OrbaxCheckpoints:
    """The checkpoints under ``directory`` (local or gs://): save, wait, restore the newest that reads."""

    def __init__(self, directory: str, *, keep: int, asynchronous: bool = True,
                 warn: Callable[[str], None] = print, chief: bool = True):
        import orbax.checkpoint as ocp  # the JAX engine's dependency only

        if keep < 1:
            raise UsageError(f"keep_checkpoints must be at least 1, got {keep}")
        self._ocp, self.directory, self.warn, self.chief = ocp, directory, warn, chief
        # With several processes (trainer/runtime/jax_processes.py) every one writes its shards into
        # the same checkpoints; only the chief removes or moves one, the others waiting for it.
        if chief:
            self._remove_unfinished_writes()
        wait_for_every_process("orbax-unfinished-writes-removed")
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=asynchronous,
                                               create=True, cleanup_tmp_directories=True)
        # The handlers named, so that a checkpoint's metadata can be read before its arrays (_check_shapes).
        handlers = {"state": ocp.StandardCheckpointHandler(), "position": ocp.JsonCheckpointHandler()}
        self._manager = ocp.CheckpointManager(orbax_path(directory), options=options, item_handlers=handlers)
        _quiet_orbax_leftovers()

    def steps(self) -> list[int]:
        """The steps of the complete checkpoints, oldest first."""
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, position: Mapping[str, Any]) -> None:
        """Starts writing ``state`` and ``position`` as the checkpoint of ``step`` (after the write before
        it has finished); with asynchronous writes it returns before the files are written."""
        args = self._ocp.args
        with self._full_disk_stops_the_run():
            saved = self._manager.save(step, args=args.Composite(state=args.StandardSave(state),
                                                                 position=args.JsonSave(dict(position))), force=True)
        if not saved:
            raise RuntimeError(f"Orbax did not save step {step} under {self.directory}")

    def wait(self) -> None:
        """Returns once every checkpoint saved is complete on disk; raises the error of a write that failed
        (a full disk: CheckpointSaveError, the write's partial files removed)."""
        with self._full_disk_stops_the_run():
            self._manager.wait_until_finished()

    def restore_latest(self, template: Any) -> Optional[Restored]:
        """The newest checkpoint that reads, its arrays laid out as ``template``'s (a state of the same
        structure: shapes, dtypes and shardings); None when there is none. Each newer one that does not
        read is set aside to ``damaged/`` with a warning."""
        set_aside = []
        for step in reversed(self.steps()):
            self._check_shapes(step, template)
            try:
                restored = self._restore(step, template)
            except Exception as error:  # noqa: BLE001 (Orbax and tensorstore raise many kinds for a damaged file)
                moved = self._set_aside(step)
                set_aside.append(step)
                reason = " ".join(f"{type(error).__name__}: {error}".split())[:200]
                self.warn(f"warning: checkpoint {posixpath.join(self.directory, str(step))} cannot be read "
                          f"({reason}); moved it to {moved}")
                continue
            if set_aside:
                self.warn(f"warning: resuming from step {step} instead of step {set_aside[0]}")
            return restored
        if set_aside:
            raise UnreadableCheckpointError(
                f"no checkpoint under {self.directory} can be read: steps {', '.join(map(str, set_aside))} were moved "
                f"to {posixpath.join(self.directory, DAMAGED)}; start again in a new --model-dir or put a readable "
                "checkpoint back")
        return None

    def close(self) -> None:
        """Waits for the write in flight, then releases Orbax's threads."""
        self._manager.close()

    def __enter__(self) -> "OrbaxCheckpoints":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --------------------------------------------------------------------------- helpers
    def _restore(self, step: int, template: Any) -> Restored:
        import jax

        args = self._ocp.args
        abstract = jax.tree.map(self._ocp.utils.to_shape_dtype_struct, template)
        out = self._manager.restore(step, args=args.Composite(state=args.StandardRestore(abstract),
                                                              position=args.JsonRestore()))
        if not isinstance(out.position, dict):
            raise ValueError(f"position is {type(out.position).__name__}, not a JSON object")
        return Restored(step, out.state, out.position)

    def _check_shapes(self, step: int, template: Any) -> None:
        """A UsageError when the checkpoint of ``step`` holds arrays of other shapes or dtypes than
        ``template`` (a checkpoint of another configuration, not a damaged one). Metadata that cannot be
        read is left to the restore, which sets the checkpoint aside."""
        import jax

        try:
            stored = self._manager.item_metadata(step)["state"]
            stored_leaves = jax.tree_util.tree_leaves_with_path(stored)
        except Exception:  # noqa: BLE001 (damaged metadata: the restore reports it)
            return
        wanted = jax.tree_util.tree_leaves_with_path(template)
        stored_by_path = {_path_name(path): leaf for path, leaf in stored_leaves}
        for path, leaf in wanted:
            name = _path_name(path)
            have = stored_by_path.get(name)
            if have is None:
                continue  # a structure Orbax records differently: the restore decides
            shape, dtype = tuple(getattr(have, "shape", ()) or ()), str(getattr(have, "dtype", ""))
            if shape != tuple(leaf.shape) or (dtype and dtype != str(leaf.dtype)):
                raise UsageError(
                    f"checkpoint {posixpath.join(self.directory, str(step))} holds state{name} of shape {shape} "
                    f"{dtype}, the model being built has {tuple(leaf.shape)} {leaf.dtype}: it was written for another "
                    "model configuration (--preset, --config, --set)")

    @contextlib.contextmanager
    def _full_disk_stops_the_run(self):
        """A write that failed for want of space (in the background, raised by the next save or wait)
        becomes a CheckpointSaveError naming it, what it left removed, as the TensorFlow engine's
        (trainer/runtime/training_stops.py); any other error passes unchanged."""
        try:
            yield
        except Exception as error:  # noqa: BLE001 (tensorstore tells a full disk as a ValueError)
            if not is_full_disk(error):
                raise
            removed = self._remove_unfinished() if self.chief else []
            unfinished = [name[:-len(UNFINISHED_MARK)] for name in removed if name.endswith(UNFINISHED_MARK)]
            checkpoint = posixpath.join(self.directory, unfinished[0]) if unfinished else self.directory
            self._manager.reload()
            steps = self.steps()
            raise checkpoint_save_stopped(checkpoint, error_text(error), removed, self.directory,
                                          posixpath.join(self.directory, str(steps[-1])) if steps else None) from None

    def _remove_unfinished_writes(self) -> None:
        """Removes what writes that did not finish left (a killed run's ``<step>.orbax-checkpoint-tmp``),
        which Orbax's own clean-up leaves in place, naming it."""
        left = self._remove_unfinished()
        if left:
            self.warn(f"warning: removed {', '.join(left)} under {self.directory}: what a "
                      "checkpoint write that did not finish left (a killed or failed run)")

    def _remove_unfinished(self) -> list[str]:
        """Removes every ``<step>.orbax-checkpoint-tmp`` under the directory; their names."""
        from etils import epath

        root = epath.Path(self.directory)
        if not root.exists():
            return []
        left = sorted(path for path in root.iterdir() if UNFINISHED_MARK in path.name)
        for path in left:
            path.rmtree() if path.is_dir() else path.unlink()
        return [path.name for path in left]

    def _set_aside(self, step: int) -> str:
        """Moves the checkpoint of ``step`` to ``damaged/<step>`` (a number suffix if that is taken); the
        manager then lists the steps as they now are."""
        from etils import epath  # Orbax's own paths: local or gs:// alike (never pathlib's, which drops "//")

        source = epath.Path(posixpath.join(self.directory, str(step)))
        damaged = epath.Path(posixpath.join(self.directory, DAMAGED))
        target, suffix = damaged / str(step), 1
        if self.chief:
            damaged.mkdir(parents=True, exist_ok=True)
            while target.exists():
                target, suffix = damaged / f"{step}.{suffix}", suffix + 1
            source.rename(target)
        wait_for_every_process(f"orbax-set-aside-{step}")
        self._manager.reload()
        return str(target)


def orbax_path(directory: str) -> str:
    """``directory`` as Orbax takes it: a local path made absolute (its tensorstore refuses a relative
    one, "Checkpoint path should be absolute", so a relative --model-dir failed at the first save), a
    gs:// URL as it is."""
    return directory if file_system.has_scheme(directory) else os.path.abspath(directory)


def read_network_weights(directory: str, step: int) -> list:
    """The network's weights (``StepState.trainable``: the pretrainer's trainable variables in order,
    which are its network's) of the JAX engine's checkpoint ``step`` under ``directory``, as NumPy
    arrays: what export, fine-tuning and the TensorFlow engine's --init-checkpoint read of a model
    directory the JAX engine trained. An unreadable checkpoint is an UnreadableCheckpointError."""
    import numpy as np

    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise UsageError(f"{directory} holds the JAX engine's Orbax checkpoints; reading them needs Orbax: "
                         "pip install \"xlnet-pretrain[jax]\"") from None
    handlers = {"state": ocp.StandardCheckpointHandler(), "position": ocp.JsonCheckpointHandler()}
    _quiet_orbax_leftovers()
    manager = ocp.CheckpointManager(orbax_path(directory), item_handlers=handlers)
    try:
        state = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore())).state
        weights = state["trainable"] if isinstance(state, dict) else state[0]
        return [np.asarray(value) for value in weights]
    except Exception as error:  # noqa: BLE001 (Orbax and tensorstore raise many kinds for a damaged file)
        reason = " ".join(f"{type(error).__name__}: {error}".split())[:200]
        raise UnreadableCheckpointError(f"checkpoint {posixpath.join(directory, str(step))} cannot be read "
                                        f"({reason})") from None
    finally:
        manager.close()


class _ClosedLoopCallbacksIgnored:
    """An unraisable-exception hook passing everything to the one it replaced but the RuntimeError("Event
    loop is closed") of tensorstore's callbacks: reading a damaged checkpoint, tensorstore completes the
    reads still in flight after Orbax has closed the event loop they report to, a traceback on standard
    error about nothing that matters (the restore's own error is what is reported)."""

    def __init__(self, previous: Callable) -> None:
        self.previous = previous

    def __call__(self, unraisable) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            self.previous(unraisable)


class _ErrorsOrbaxAlreadyRaised(logging.Filter):
    """Passes every record but two kinds, each a copy, with its traceback, of an error Orbax raises to
    the save, wait or restore that told it (a full disk in one sentence, a damaged checkpoint set aside
    with a warning, anything else as itself):

    * Orbax's writing thread logging the full disk that ended it (absl's logger), before the save or
      wait that raises it again;
    * asyncio's "Task exception was never retrieved" for one of Orbax's own tasks, collected unasked:
      the other arrays' reads or writes of a gather whose first error was raised (a full disk fails
      every write in flight, a damaged file every read of it), left unasked when Orbax closed its loop.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        said = str(record.msg)
        if "_SignalingThread" in said:
            return not is_full_disk(error)
        if said.startswith("Task exception was never retrieved"):
            return not _raised_in_orbax(error)
        return True


def _raised_in_orbax(error: BaseException) -> bool:
    """Whether ``error``'s traceback passes through Orbax's own modules."""
    return any(str(frame.f_globals.get("__name__", "")).startswith("orbax.")
               for frame, _ in traceback.walk_tb(error.__traceback__))


def _quiet_orbax_leftovers() -> None:
    """What Orbax leaves behind an error it raised, told already by the save, wait or restore, is not
    printed for as long as the process lives (``_ErrorsOrbaxAlreadyRaised``, ``_ClosedLoopCallbacksIgnored``):
    a failed gather's tasks and reads finish or are collected whenever they do, often after the
    checkpoints are closed and the command has said why it stopped. Installed once (again if the hook
    was replaced since)."""
    for name in ("absl", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(added, _ErrorsOrbaxAlreadyRaised) for added in logger.filters):
            logger.addFilter(_ErrorsOrbaxAlreadyRaised())
    if not isinstance(sys.unraisablehook, _ClosedLoopCallbacksIgnored):
        sys.unraisablehook = _ClosedLoopCallbacksIgnored(sys.unraisablehook)


def _path_name(path: tuple) -> str:
    """A pytree path as ``.field[index]``, the same whether the tree is the NamedTuple itself (attribute
    keys) or Orbax's record of it (dictionary keys)."""
    parts = []
    for key in path:
        if hasattr(key, "idx"):
            parts.append(f"[{key.idx}]")
        else:
            parts.append(f".{getattr(key, 'name', getattr(key, 'key', key))}")
    return "".join(parts)
