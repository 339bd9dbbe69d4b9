"""TensorBoard event files: their scalars read back, and a file rewritten without later steps.

A writer of tf.summary (one per directory: tensorboard/train, tensorboard/eval of a model
directory) appends ``tf.compat.v1.Event`` records to ``events.out.tfevents.*`` files, one new file
per process. Reading them back serves the tests and the benchmarks (ModelDirectory.scalars); a
resumed run rewrites them without the events of the steps it will log again
(ModelDirectory.forget_steps_after), so that the curves do not double. Every path goes through
tf.io.gfile (local or gs://).
"""
from __future__ import annotations

import posixpath
from typing import Iterator

import tensorflow as tf

EVENT_FILES = "events.out.tfevents.*"


def event_files(directory: str) -> list[str]:
    """The event files of one writer's ``directory``, sorted by name (so in the order written)."""
    return sorted(tf.io.gfile.glob(posixpath.join(directory, EVENT_FILES)))


def scalar_events(directory: str) -> Iterator[tuple[int, str, float]]:
    """(step, tag, value) of every scalar in the event files of ``directory``, in file order,
    whether written as a tensor (tf.summary) or as a simple value (TF1 summaries)."""
    for path in event_files(directory):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                yield int(event.step), value.tag, number


def forget_events_after(directory: str, step: int) -> None:
    """Rewrites every event file of ``directory`` without its summaries of steps after ``step``."""
    for path in event_files(directory):
        drop_events_after(path, step)


def drop_events_after(path: str, step: int) -> None:
    """Rewrites one TensorBoard event file without its events of steps after ``step`` (left as it
    is when it has none). A file cut short by a killed run keeps the events before the cut."""
    kept, dropped = [], 0
    try:
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            if event.HasField("summary") and event.step > step:
                dropped += 1
            else:
                kept.append(record.numpy())
    except tf.errors.DataLossError:
        dropped += 1  # the torn last record of a killed writer
    if not dropped:
        return
    # not named *tfevents*: a rewrite cut short must not be read as another event file
    name = ".rewrite-" + posixpath.basename(path).replace("tfevents", "tmp")
    temporary = posixpath.join(posixpath.dirname(path), name)
    with tf.io.TFRecordWriter(temporary) as writer:
        for record in kept:
            writer.write(record)
    tf.io.gfile.rename(temporary, path, overwrite=True)
