"""TensorBoard event files (trainer/runtime/event_files.py): scalars read back, a file rewritten
without the events after a step, a torn last record dropped, a file without later events untouched."""
from __future__ import annotations

import os

import tensorflow as tf

from trainer.runtime.event_files import drop_events_after, event_files, forget_events_after, scalar_events


def write_losses(directory: str, steps) -> str:
    writer = tf.summary.create_file_writer(directory)
    with writer.as_default():
        for step in steps:
            tf.summary.scalar("loss", 10.0 - step, step=step)
    writer.close()
    [path] = event_files(directory)
    return path


def test_events_after_a_step_are_dropped_and_the_rest_kept(tmp_path):
    directory = str(tmp_path / "train")
    write_losses(directory, range(1, 7))
    forget_events_after(directory, 4)
    assert [(step, tag, value) for step, tag, value in scalar_events(directory)] == [
        (step, "loss", 10.0 - step) for step in range(1, 5)]
    assert [os.path.basename(path) for path in event_files(directory)] == os.listdir(directory)  # no leftover


def test_a_file_without_later_events_is_left_as_it_is(tmp_path):
    path = write_losses(str(tmp_path / "train"), (1, 2))
    before = (os.stat(path).st_mtime_ns, open(path, "rb").read())
    drop_events_after(path, 2)
    assert (os.stat(path).st_mtime_ns, open(path, "rb").read()) == before


def test_the_torn_last_record_of_a_killed_writer_goes(tmp_path):
    directory = str(tmp_path / "train")
    path = write_losses(directory, (1, 2, 3))
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[:-5])  # the last event (step 3) cut short
    drop_events_after(path, 10)
    assert [step for step, _, _ in scalar_events(directory)] == [1, 2]
