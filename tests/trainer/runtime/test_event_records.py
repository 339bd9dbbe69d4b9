"""TensorBoard events without TensorFlow (trainer/runtime/event_records.py, event_files.EventFileWriter):
what the writer writes reads back, a tf.summary file reads back, a torn last event is left out."""
from __future__ import annotations

from tfrecords.record_files import frame_record
from trainer.runtime.event_files import EventFileWriter, scalar_events
from trainer.runtime.event_records import decode_event, encode_event, framed_records


def test_an_encoded_event_decodes_to_its_step_and_scalars():
    event = decode_event(encode_event(12.5, 7, {"loss": 2.25, "plm_accuracy": 0.5}))
    assert event.step == 7 and event.scalars == (("loss", 2.25), ("plm_accuracy", 0.5)) and event.summary


def test_the_file_version_event_has_no_summary():
    assert not decode_event(encode_event(1.0, file_version="brain.Event:2")).summary


def test_a_torn_last_record_ends_the_records_and_says_so():
    whole = frame_record(b"first") + frame_record(b"second")
    assert framed_records(whole) == ([b"first", b"second"], True)
    assert framed_records(whole[:-3]) == ([b"first"], False)


def test_what_the_writer_writes_reads_back_in_order(tmp_path):
    writer = EventFileWriter(str(tmp_path / "train"))
    writer.write(2, {"loss": 7.5})
    writer.write(4, {"loss": 7.0, "grad_norm": 1.5})
    assert list(scalar_events(str(tmp_path / "train"))) == [(2, "loss", 7.5), (4, "loss", 7.0), (4, "grad_norm", 1.5)]


def test_a_tf_summary_scalar_reads_back(tmp_path):
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default(step=3):
        tf.summary.scalar("loss", 1.25)
    writer.flush()
    assert list(scalar_events(str(tmp_path))) == [(3, "loss", 1.25)]
