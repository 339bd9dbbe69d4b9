"""Under TensorFlow's op determinism (train.deterministic) the reader's features map runs
sequentially, as tf.data's make_deterministic rewrite would make it, and so TensorFlow's error
line about the rewritten map ("NodeDef mentions attribute use_unbounded_threadpool ...") is never
printed; the batches are the same as without determinism (tfrecords/reader.py batched_features).
A real process: op determinism is process-wide and must not leak into other tests."""
from __future__ import annotations

import hashlib
import os
import subprocess
import textwrap

import pytest
from support.processes import start

from tfrecords.manifest import load_manifest
from tfrecords.reader import StreamReader

BATCHES = 6


def digest(dataset) -> str:
    """A hash of the first BATCHES batches' features, in order."""
    hashed = hashlib.sha256()
    for features in dataset.take(BATCHES):
        for name in sorted(features):
            hashed.update(name.encode() + features[name].numpy().tobytes())
    return hashed.hexdigest()


READ_DETERMINISTICALLY = textwrap.dedent("""
    import sys
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    from tfrecords.manifest import load_manifest
    from tfrecords.reader import StreamReader
    from test_reader_op_determinism import digest
    reader = StreamReader(load_manifest(sys.argv[1]), "train", 4, 64, 10, True, seed=3, resample_masks=True)
    print(digest(reader.dataset()))
""")


@pytest.mark.slow  # a TensorFlow process: 6 s
def test_a_deterministic_run_reads_the_same_batches_without_tensorflows_rewrite_error_line(small_data_dir):
    process = start(["-c", READ_DETERMINISTICALLY, small_data_dir], stderr=subprocess.PIPE,
                    env={"PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), "tests", "."])})  # digest from here
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "use_unbounded_threadpool" not in err and "NodeDef mentions attribute" not in err
    reader = StreamReader(load_manifest(small_data_dir), "train", 4, 64, 10, True, seed=3, resample_masks=True)
    assert out.strip() == digest(reader.dataset())
