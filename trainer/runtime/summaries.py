"""TensorBoard summaries of a run, as Orbit's SummaryManager: one writer per kind, scalars at a step.

The chief writes ``MODEL_DIR/tensorboard/train`` (after each loop of steps: the loop's mean loss
and metrics, learning rate, gradient norm, tokens/s, examples/s, peak memory, the task's own
scalars) and ``MODEL_DIR/tensorboard/eval`` (each evaluation's metrics); other workers write
nothing. The events are written without TensorFlow (event_files.EventFileWriter), by both
engines alike. Each write is flushed, so TensorBoard and a resumed run's rewrite
(trainer/runtime/event_files.py) see whole loops; a full disk stops the run with one sentence
(event_files.full_disk_stops_the_run).
"""
from __future__ import annotations

from typing import Mapping

from trainer.runtime import event_files
from trainer.runtime.model_dir import ModelDirectory

WRITERS = ("train", "eval")


class SummaryManager:
    """The TensorBoard writers of one run.

    Args:
      model_dir: the run's model directory (``tensorboard/<writer>`` under it).
      enabled: False on a worker other than the chief: its writers write nothing.
    """

    def __init__(self, model_dir: ModelDirectory, enabled: bool = True):
        self._model_dir = model_dir
        self._writers = {name: event_files.EventFileWriter(model_dir.tensorboard(name)) for name in WRITERS} \
            if enabled else None

    def write(self, writer: str, step: int, scalars: Mapping[str, float]) -> None:
        """Writes ``scalars`` (tag -> value, in that order) at ``step`` with writer ``writer``
        ("train" or "eval"), flushed."""
        if self._writers is None:
            return
        with self._full_disk_stops_the_run(self._model_dir.tensorboard(writer)):
            self._writers[writer].write(step, scalars)

    def _full_disk_stops_the_run(self, path: str):
        """A full disk while the events under ``path`` are written: a LogWriteError (exit status 3)."""
        return event_files.full_disk_stops_the_run(path, self._model_dir.path, self._model_dir.latest_checkpoint)
