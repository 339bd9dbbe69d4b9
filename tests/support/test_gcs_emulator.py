"""The GCS test fixture itself (``gcs``, ``gcs_prefix``; tests/support/gcs_emulator.py).

TensorFlow's C++ GCS filesystem (through the TLS proxy) and Beam's ``FileSystems``
(google-cloud-storage, plain HTTP) against the same emulator: what later tests rely on, with
real corpus text, exact values, faults switched on and off, and no way out to the network.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import apache_beam as beam
import pytest
import tensorflow as tf
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from support.bundled_data import CORPUS_DIR, read_corpus_documents

LINES = read_corpus_documents(CORPUS_DIR / "wiki_summaries_en.txt.gz", 1)[0][:5]
TEXT = "\n".join(LINES).encode("utf-8")


def tf_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` with tf.io.gfile (the helpers below do the same for each client)."""
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(data)


def tf_read(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def beam_write(path: str, data: bytes) -> None:
    with FileSystems.create(path) as handle:
        handle.write(data)


def beam_read(path: str) -> bytes:
    with FileSystems.open(path) as handle:
        return handle.read()


# -- TensorFlow tf.io.gfile -------------------------------------------------------------------

def test_tf_write_read_round_trip(gcs_prefix):
    tf_write(gcs_prefix + "text.txt", TEXT)
    assert tf_read(gcs_prefix + "text.txt") == TEXT
    assert tf.io.gfile.stat(gcs_prefix + "text.txt").length == len(TEXT)


def test_tf_makedirs_listdir_isdir(gcs_prefix):
    tf.io.gfile.makedirs(gcs_prefix + "a/b")
    tf_write(gcs_prefix + "a/line.txt", LINES[0].encode())
    assert sorted(tf.io.gfile.listdir(gcs_prefix + "a")) == ["b/", "line.txt"]
    assert tf.io.gfile.isdir(gcs_prefix + "a/b")
    assert not tf.io.gfile.isdir(gcs_prefix + "a/line.txt")


def test_tf_exists_right_after_delete(gcs_prefix):
    tf_write(gcs_prefix + "gone.txt", TEXT)
    assert tf.io.gfile.exists(gcs_prefix + "gone.txt")
    tf.io.gfile.remove(gcs_prefix + "gone.txt")
    assert not tf.io.gfile.exists(gcs_prefix + "gone.txt")


def test_tf_rename_directory(gcs_prefix):
    files = {"one.txt": LINES[0], "two.txt": LINES[1], "sub/three.txt": LINES[2]}
    for name, line in files.items():
        tf_write(gcs_prefix + "src/" + name, line.encode())
    tf.io.gfile.rename(gcs_prefix + "src", gcs_prefix + "dst")
    assert not tf.io.gfile.exists(gcs_prefix + "src/one.txt")
    assert {name: tf_read(gcs_prefix + "dst/" + name).decode() for name in files} == files


def test_tf_glob(gcs_prefix):
    for name in ("x1.txt", "x2.txt", "y1.txt", "x3.bin"):
        tf_write(gcs_prefix + name, TEXT)
    assert sorted(tf.io.gfile.glob(gcs_prefix + "x*.txt")) == [gcs_prefix + "x1.txt", gcs_prefix + "x2.txt"]


def test_tf_append_keeps_earlier_content(gcs_prefix):
    tf_write(gcs_prefix + "log.txt", LINES[0].encode())
    with tf.io.gfile.GFile(gcs_prefix + "log.txt", "a") as handle:
        handle.write(LINES[1].encode())
    assert tf_read(gcs_prefix + "log.txt") == (LINES[0] + LINES[1]).encode()


def test_tf_record_dataset_reads_records_written_on_gcs(gcs_prefix):
    with tf.io.TFRecordWriter(gcs_prefix + "lines.tfrecord") as writer:
        for line in LINES:
            writer.write(line.encode())
    records = [record.numpy().decode() for record in tf.data.TFRecordDataset(gcs_prefix + "lines.tfrecord")]
    assert records == LINES


def test_tf_checkpoint_manager_save_restore(gcs_prefix):
    weights = tf.Variable([1.0, 2.0, 3.0])
    checkpoint = tf.train.Checkpoint(weights=weights)
    manager = tf.train.CheckpointManager(checkpoint, gcs_prefix + "ckpt", max_to_keep=2)
    assert manager.save() == gcs_prefix + "ckpt/ckpt-1"
    weights.assign([0.0, 0.0, 0.0])
    checkpoint.restore(manager.latest_checkpoint).assert_consumed()
    assert weights.numpy().tolist() == [1.0, 2.0, 3.0]


def test_tf_summary_writer_writes_events_file(gcs_prefix):
    from trainer.runtime.model_dir import ModelDirectory

    directory = ModelDirectory(gcs_prefix + "model")
    writer = tf.summary.create_file_writer(directory.tensorboard("train"))
    with writer.as_default():
        tf.summary.scalar("loss", 1.5, step=7)
    writer.close()
    assert len(tf.io.gfile.glob(directory.tensorboard("train") + "/events.out.tfevents.*")) == 1
    assert directory.scalars("train", "loss") == {7: 1.5} and directory.scalar_tags("train") == {"loss"}


# -- Beam FileSystems -------------------------------------------------------------------------

def test_beam_create_open_round_trip(gcs_prefix):
    beam_write(gcs_prefix + "text.txt", TEXT)
    assert beam_read(gcs_prefix + "text.txt") == TEXT


def test_beam_match_glob(gcs_prefix):
    for name, line in (("x1.txt", LINES[0]), ("x2.txt", LINES[1]), ("y1.txt", LINES[2])):
        beam_write(gcs_prefix + name, line.encode())
    [result] = FileSystems.match([gcs_prefix + "x*.txt"])
    assert sorted((m.path, m.size_in_bytes) for m in result.metadata_list) == [
        (gcs_prefix + "x1.txt", len(LINES[0].encode())), (gcs_prefix + "x2.txt", len(LINES[1].encode()))]


def test_beam_rename(gcs_prefix):
    beam_write(gcs_prefix + "old.txt", TEXT)
    FileSystems.rename([gcs_prefix + "old.txt"], [gcs_prefix + "new.txt"])
    assert not FileSystems.exists(gcs_prefix + "old.txt")
    assert beam_read(gcs_prefix + "new.txt") == TEXT


def test_beam_delete(gcs_prefix):
    beam_write(gcs_prefix + "gone.txt", TEXT)
    FileSystems.delete([gcs_prefix + "gone.txt"])
    assert not FileSystems.exists(gcs_prefix + "gone.txt")


def test_beam_zero_byte_file(gcs_prefix):
    FileSystems.create(gcs_prefix + "empty.txt").close()
    [result] = FileSystems.match([gcs_prefix + "empty.txt"])
    assert [m.size_in_bytes for m in result.metadata_list] == [0]
    assert beam_read(gcs_prefix + "empty.txt") == b""


# -- Both clients on the same objects ---------------------------------------------------------

def test_tf_reads_what_beam_wrote(gcs_prefix):
    beam_write(gcs_prefix + "from_beam.txt", TEXT)
    assert tf_read(gcs_prefix + "from_beam.txt") == TEXT


def test_beam_reads_what_tf_wrote(gcs_prefix):
    tf_write(gcs_prefix + "from_tf.txt", TEXT)
    assert beam_read(gcs_prefix + "from_tf.txt") == TEXT


def test_beam_multi_processing_workers_reach_gcs(gcs_prefix):
    def write(indexed_line: tuple[int, str]) -> None:
        # Nested, so that cloudpickle ships it by value: workers cannot import test modules.
        index, line = indexed_line
        with FileSystems.create(f"{gcs_prefix}{index}.txt") as handle:
            handle.write(line.encode())

    options = PipelineOptions(flags=[], runner="FnApiRunner", direct_num_workers=2,
                              direct_running_mode="multi_processing")
    with beam.Pipeline(options=options) as pipeline:
        _ = pipeline | beam.Create(list(enumerate(LINES[:3]))) | beam.Map(write)
    assert [beam_read(f"{gcs_prefix}{i}.txt").decode() for i in range(3)] == LINES[:3]


# -- Fault injection --------------------------------------------------------------------------
# Seeds are chosen so that each test meets one or two faults (which requests fail depends only on
# the seed and the requests): TensorFlow waits 2**n s plus up to 1 s before its retry n of a call.

def write_lines(write, prefix: str, count: int = 3) -> None:
    """The first ``count`` corpus lines as ``<prefix>0.txt``, ``<prefix>1.txt``, ... with ``write``."""
    for i, line in enumerate(LINES[:count]):
        write(f"{prefix}{i}.txt", line.encode())


def read_lines(read, prefix: str, count: int = 3) -> list[str]:
    """What ``write_lines`` wrote, read back with ``read``."""
    return [read(f"{prefix}{i}.txt").decode() for i in range(count)]


def test_tf_writes_survive_503s(gcs, gcs_prefix):
    gcs.set_faults(fail_share=0.25, seed=5)
    write_lines(tf_write, gcs_prefix)
    assert gcs.fault_counts()["unavailable"] > 0
    gcs.set_faults()
    assert read_lines(tf_read, gcs_prefix) == LINES[:3]


def test_tf_reads_survive_503s(gcs, gcs_prefix):
    write_lines(tf_write, gcs_prefix)
    gcs.set_faults(fail_share=0.25, seed=6)
    assert read_lines(tf_read, gcs_prefix) == LINES[:3]
    assert gcs.fault_counts()["unavailable"] > 0


def test_beam_writes_survive_503s(gcs, gcs_prefix):
    gcs.set_faults(fail_share=0.25, seed=4)
    write_lines(beam_write, gcs_prefix)
    assert gcs.fault_counts()["unavailable"] > 0
    gcs.set_faults()
    assert read_lines(beam_read, gcs_prefix) == LINES[:3]


def test_beam_reads_survive_503s(gcs, gcs_prefix):
    write_lines(beam_write, gcs_prefix)
    gcs.set_faults(fail_share=0.25, seed=4)
    assert read_lines(beam_read, gcs_prefix) == LINES[:3]
    assert gcs.fault_counts()["unavailable"] > 0


def test_tf_writes_survive_dropped_uploads(gcs, gcs_prefix):
    gcs.set_faults(drop_upload_share=0.5, seed=4)
    write_lines(tf_write, gcs_prefix, count=2)
    assert gcs.fault_counts()["dropped_uploads"] > 0
    gcs.set_faults()
    assert read_lines(tf_read, gcs_prefix, count=2) == LINES[:2]


def test_beam_writes_survive_dropped_uploads(gcs, gcs_prefix):
    gcs.set_faults(drop_upload_share=0.5, seed=2)
    write_lines(beam_write, gcs_prefix, count=2)
    assert gcs.fault_counts()["dropped_uploads"] > 0
    gcs.set_faults()
    assert read_lines(beam_read, gcs_prefix, count=2) == LINES[:2]


# -- No network -------------------------------------------------------------------------------

def test_proxy_refuses_connect_to_other_hosts(gcs, gcs_prefix):
    with socket.create_connection(("127.0.0.1", gcs.port), timeout=10) as connection:
        connection.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        status_line = connection.makefile("rb").readline()
    assert status_line.split()[1] == b"403"
    with pytest.raises(urllib.error.URLError, match="403"):
        urllib.request.urlopen("https://example.com/", timeout=10)  # honours https_proxy, as libcurl does
    assert gcs.fault_counts()["refused_connects"] == 2


def run_python(script: str, args: list[str], env: dict[str, str]) -> str:
    """Run ``script`` in a fresh interpreter; its stdout."""
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_fresh_process_needs_only_env_and_probes_no_metadata_server(gcs, gcs_prefix):
    script = ("import sys, tensorflow as tf\n"
              "with tf.io.gfile.GFile(sys.argv[1], 'wb') as handle:\n"
              "    handle.write(sys.argv[2].encode())\n")
    run_python(script, [gcs_prefix + "child.txt", LINES[0]], {**os.environ, **gcs.env})
    assert beam_read(gcs_prefix + "child.txt") == LINES[0].encode()
    assert gcs.fault_counts()["metadata_requests"] == 0


@pytest.mark.parametrize("no_gce_check, probes", [("true", 0), (None, 1)])
def test_no_gce_check_keeps_tf_off_the_metadata_server(gcs, gcs_prefix, tmp_path, no_gce_check, probes):
    # Without a token TF looks for a GCE metadata server unless NO_GCE_CHECK is set; the probe
    # goes to GCE_METADATA_HOST, the front, which counts it instead of letting it out.
    env = {name: value for name, value in os.environ.items()
           if name not in ("GOOGLE_AUTH_TOKEN_FOR_TESTING", "GOOGLE_APPLICATION_CREDENTIALS", "NO_GCE_CHECK")}
    env["CLOUDSDK_CONFIG"] = str(tmp_path)  # no gcloud credentials either
    if no_gce_check:
        env["NO_GCE_CHECK"] = no_gce_check
    script = "import sys, tensorflow as tf\nprint(tf.io.gfile.exists(sys.argv[1]))\n"
    assert run_python(script, [gcs_prefix + "absent.txt"], env) == "False\n"
    assert gcs.fault_counts()["metadata_requests"] == probes
