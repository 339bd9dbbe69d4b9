"""Asynchronous checkpoints: a snapshot taken between two loops of steps, written in a background
thread while the next steps run (``--set async_checkpoint=true``).

The controller saves through a tf.train.CheckpointManager either way, so numbering, the state file
``checkpoints/checkpoint`` and ``keep_checkpoints`` follow one rule. With asynchronous checkpoints
the manager is given a :class:`BackgroundWrites` in place of the run's tf.train.Checkpoint:

* :meth:`BackgroundWrites._write` (what the manager calls) first waits for the write before it,
  then takes the snapshot on the calling thread: every value the checkpoint holds, read as it is
  at this step. A read of a TensorFlow variable on the host shares the variable's buffer, and an
  update of a variable whose buffer is shared writes to a new one (copy on write), so taking the
  snapshot copies nothing: the next step's updates pay for one copy of the state instead. On an
  accelerator the read is the copy to host memory.
* A background thread writes the snapshot as tf.train.Checkpoint does (a temporary
  ``ckpt-N_temp/`` directory, then ``ckpt-N.index`` and ``ckpt-N.data-*`` renamed into place),
  then runs the manager's callback: only then does the state file name ``ckpt-N`` and the
  checkpoints beyond ``keep_checkpoints`` go. A process killed during the write leaves the state
  file naming the checkpoint before, which a resume reads (trainer/runtime/checkpoint_history.py).
* :meth:`BackgroundWrites.sync` waits for the write in flight and raises :class:`SaveFailed`
  (the checkpoint's prefix and TensorFlow's error) if it failed: an error of the background write
  is raised at the next save or when the run waits for its last checkpoint, never lost. The
  thread is not a daemon: a process leaving on an error still finishes the write in flight.

TensorFlow's own asynchronous checkpointing
(``tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)``) is not used: in
TensorFlow 2.21 with Keras 3 its second save raises ValueError (Keras variables create a
tf.Variable in its copy-to-host tf.function, which tf.function refuses after the first call),
it keeps a second copy of the whole state in host memory, and :meth:`tf.train.Checkpoint.sync`
drops the error of a failed background write (it surfaces only at the next save, or at
interpreter exit from an atexit hook).
"""
from __future__ import annotations

import os
import posixpath
import sys
import threading
import time
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.checkpoint import functional_saver
from tensorflow.python.training.saving import saveable_object

from trainer.runtime import checkpoint_history

# The writing thread's niceness (Linux): see benchmarks/checkpoints.py and docs/benchmarks.md, "Checkpoints".
WRITER_NICENESS = 0


class SaveFailed(Exception):
    """The background write of checkpoint ``prefix`` raised ``error`` (a tf.errors.OpError or other);
    ``removed`` are the partial files of the write, removed when it failed."""

    def __init__(self, prefix: str, error: BaseException, removed: list[str]):
        super().__init__(f"writing checkpoint {prefix} failed: {error}")
        self.prefix, self.error, self.removed = prefix, error, removed


class BackgroundWrites:
    """The checkpoint a tf.train.CheckpointManager writes through when checkpoints are asynchronous.

    Args:
      checkpoint: the run's tf.train.Checkpoint (restores go to it directly).
      on_written: called on the writing thread with (prefix, seconds the write took, CPU seconds
        of the writing thread) once a checkpoint is complete and recorded in the state file.
      nice: the writing thread's niceness on Linux (0: as the training threads; 19: CPU time only
        when they leave some), measured in benchmarks/checkpoints.py.
    """

    def __init__(self, checkpoint: tf.train.Checkpoint,
                 on_written: Callable[[str, float, float], None] | None = None, nice: int = WRITER_NICENESS):
        self._checkpoint, self._on_written, self._nice = checkpoint, on_written, nice
        self._thread: threading.Thread | None = None
        self._failure: SaveFailed | None = None

    @property
    def save_counter(self) -> tf.Variable:
        """The checkpoint's save counter (the manager counts saves on it, as on a tf.train.Checkpoint)."""
        return self._checkpoint.save_counter

    @property
    def writing(self) -> bool:
        """Whether a write is in flight."""
        return self._thread is not None and self._thread.is_alive()

    def _write(self, file_prefix: str, options: tf.train.CheckpointOptions | None = None) -> str:
        """Snapshots the checkpoint's values and writes them to ``file_prefix`` in the background;
        returns ``file_prefix`` at once. The callbacks of ``options`` (the manager's bookkeeping)
        run after the write. Raises SaveFailed first if the write before this one failed."""
        self.sync()
        tensors, registered = snapshot(self._checkpoint)
        callbacks = list(options.experimental_write_callbacks or []) if options else []
        io_options = tf.train.CheckpointOptions(experimental_io_device=options.experimental_io_device) \
            if options else None
        self._thread = threading.Thread(target=self._run, args=(file_prefix, tensors, registered, callbacks,
                                                                io_options),
                                        name=f"checkpoint-writer {file_prefix}", daemon=False)
        self._thread.start()
        return file_prefix

    def sync(self) -> None:
        """Waits for the write in flight; raises SaveFailed if it failed (once)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _run(self, prefix: str, tensors, registered, callbacks: list[Callable[[str], Any]],
             options: tf.train.CheckpointOptions | None) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        if self._nice and sys.platform.startswith("linux"):  # per thread on Linux (per process elsewhere)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
        try:
            tf.io.gfile.makedirs(posixpath.dirname(prefix))
            functional_saver.MultiDeviceSaver(tensors, registered).save(tf.constant(prefix), options=options)
            for callback in callbacks:
                callback(prefix)
        except BaseException as error:  # raised on the training thread by the next sync()
            self._failure = SaveFailed(prefix, error, _remove_unfinished(prefix))
            return
        if self._on_written is not None:
            self._on_written(prefix, time.perf_counter() - began, time.thread_time() - cpu)


def snapshot(checkpoint: tf.train.Checkpoint) -> tuple[dict, dict]:
    """Every value ``checkpoint`` saves, read now, in the form TensorFlow's saver takes:
    ({trackable: {checkpoint key: tensor or {slice: tensor}}}, registered savers); the object graph
    is among them. The tensors are immutable values: training on does not change them."""
    serialized, _, registered, _ = checkpoint._saver._gather_serialized_tensors(None)  # noqa: SLF001

    def read(value):
        if isinstance(value, dict):
            return {key: read(item) for key, item in value.items()}
        if isinstance(value, saveable_object.SaveSpec):
            # a callable spec reads its variable when called: read it now, not on the writing thread
            tensor = value.tensor
            return saveable_object.SaveSpec(_constant(tensor) if tensor is None else tensor, value.slice_spec,
                                            value.name, value.dtype, value.device)
        return value

    for trackable, tensors in serialized.items():  # an identity-keyed map (variables are not hashable)
        serialized[trackable] = {key: read(value) for key, value in tensors.items()}
    return serialized, registered


def _remove_unfinished(prefix: str) -> list[str]:
    """Removes what the failed write of ``prefix`` left (on a full disk, its room is needed at once)."""
    try:
        return checkpoint_history.remove_unfinished_save(posixpath.dirname(prefix), prefix)
    except tf.errors.OpError:
        return []  # removed again when the run stops or starts (Controller._checkpoint_manager)


def _constant(value):
    """A callable returning ``value`` (a SaveSpec of a value that is None must be callable)."""
    return lambda: value
