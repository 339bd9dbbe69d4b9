"""The reader without TensorFlow (tfrecords/numpy_reader.py) hands out the tf.data readers' elements,
array for array: one directory (tfrecords/reader.py) and a mixture (tfrecords/mixture.py), one host
and two (an InputContext's pipelines compared one by one); a damaged or cut shard and a stream that ends
early are the tf.data reader's errors in its words, at the same element; its read-ahead thread ends
on close and on error; it imports no TensorFlow."""
from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from support.bundled_data import TINY_DATA
from tfrecords.errors import exit_code
from tfrecords.manifest import load_manifest
from tfrecords.mixture import MixtureReader, MixtureSource
from tfrecords.numpy_reader import NumpyMixtureReader, NumpyStreamReader
from tfrecords.reader import StreamReader, stream_ended_early
from tfrecords.record_files import DamagedRecordError, RecordFile
from tfrecords.stream_layout import StreamEndedEarlyError
from tfrecords.tensorflow_errors import error_text

ELEMENTS = 50
TRAIN_0 = "train-00000-of-00002.tfrecord"
REPO = Path(__file__).resolve().parents[2]


def tf_elements(dataset: tf.data.Dataset, count: int = ELEMENTS) -> list[dict[str, np.ndarray]]:
    return [{name: value.numpy() for name, value in element.items()} for element in dataset.take(count)]


def numpy_elements(reader, input_context=None, count: int = ELEMENTS) -> list[dict[str, np.ndarray]]:
    with reader.elements_for(input_context) as elements:
        return list(itertools.islice(elements, count))


def assert_same_elements(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want)):
        assert set(a) == set(b)
        for name in b:
            assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, (index, name)
            np.testing.assert_array_equal(a[name], b[name], err_msg=f"element {index}: {name}")


def pipelines(count: int) -> list[tf.distribute.InputContext]:
    """The InputContexts of ``count`` hosts, one replica each."""
    return [tf.distribute.InputContext(num_input_pipelines=count, input_pipeline_id=index,
                                       num_replicas_in_sync=count) for index in range(count)]


# ---------------------------------------------------------------------------- one directory
def stream_readers(manifest, batch: int, **options) -> tuple[StreamReader, NumpyStreamReader]:
    fields = (manifest, "train", batch, manifest.seq_len, manifest.num_predict, manifest.bi_data)
    return StreamReader(*fields, **options), NumpyStreamReader(*fields, **options)


@pytest.fixture(scope="module")
def tiny(tiny_data_dir):
    return load_manifest(tiny_data_dir)


def test_one_directory_on_one_host_with_accumulation_equals_tf_data(tiny):
    tf_reader, np_reader = stream_readers(tiny, 8, seed=3, accumulation_steps=2)
    assert_same_elements(numpy_elements(np_reader), tf_elements(tf_reader.dataset()))


def test_one_directory_on_two_hosts_from_a_later_step_equals_tf_data_host_by_host(tiny):
    tf_reader, np_reader = stream_readers(tiny, 8, seed=1, start_step=17)
    for context in pipelines(2):
        assert_same_elements(numpy_elements(np_reader, context), tf_elements(tf_reader.dataset(context)))


def test_resampled_masks_past_the_first_epoch_equal_tf_data(small_data_dir):
    manifest = load_manifest(small_data_dir)
    tf_reader, np_reader = stream_readers(manifest, 8, seed=5, resample_masks=True, start_step=60)
    got = numpy_elements(np_reader, count=30)
    assert_same_elements(got, tf_elements(tf_reader.dataset(), 30))
    stored = numpy_elements(stream_readers(manifest, 8, seed=5, start_step=60)[1], count=30)
    assert any(not np.array_equal(a["is_masked"], b["is_masked"]) for a, b in zip(got, stored))


def test_host_batches_concatenate_the_hosts_replicas_on_the_batch_axis(tiny):
    _, np_reader = stream_readers(tiny, 8, accumulation_steps=2)
    with np_reader.elements(2, range(2)) as elements:
        replicas = list(itertools.islice(elements, 6))
    with np_reader.host_batches(2, range(2)) as batches:
        hosts = list(itertools.islice(batches, 3))
    for step, host in enumerate(hosts):
        for name, value in host.items():
            np.testing.assert_array_equal(
                value, np.concatenate([replicas[2 * step][name], replicas[2 * step + 1][name]], 1))
        assert host["input_ids"].shape == (2, 8, tiny.seq_len)


# ---------------------------------------------------------------------------------- a mixture
def mixture_readers(mixture_dirs: dict[str, str], batch: int, **options):
    names, weights = ("wiki-a", "bible"), (1, 2)
    sources = [MixtureSource(mixture_dirs[name], load_manifest(mixture_dirs[name]), weight / sum(weights))
               for name, weight in zip(names, weights)]
    arguments = (sources, batch, TINY_DATA["seq_len"], TINY_DATA["bi_data"])
    return MixtureReader(*arguments, seed=3, **options), NumpyMixtureReader(*arguments, seed=3, **options)


@pytest.mark.xdist_group("mixture")
def test_a_mixture_on_one_host_equals_tf_data(mixture_dirs):
    tf_reader, np_reader = mixture_readers(mixture_dirs, 4)
    assert_same_elements(numpy_elements(np_reader), tf_elements(tf_reader.dataset()))


@pytest.mark.xdist_group("mixture")
def test_a_mixture_on_two_hosts_with_accumulation_from_a_later_step_equals_tf_data_host_by_host(mixture_dirs):
    tf_reader, np_reader = mixture_readers(mixture_dirs, 8, accumulation_steps=2, start_step=9)
    for context in pipelines(2):
        assert_same_elements(numpy_elements(np_reader, context), tf_elements(tf_reader.dataset(context)))


# ---------------------------------------------------------------------------- damaged shards
@pytest.fixture
def data(small_data_dir, tmp_path) -> Path:
    return Path(shutil.copytree(small_data_dir, tmp_path / "data"))


def first_errors(directory: Path, limit: int = 100) -> tuple[tuple[int, BaseException], tuple[int, BaseException]]:
    """((elements read, error) of the tf.data reader, the same of the NumPy reader) on ``directory``."""
    tf_reader, np_reader = stream_readers(load_manifest(str(directory)), 8, seed=0)
    results = []
    for elements in (iter(tf_reader.dataset()), np_reader.elements()):
        read = 0
        try:
            for _ in itertools.islice(elements, limit):
                read += 1
        except (tf.errors.OpError, DamagedRecordError, StreamEndedEarlyError) as error:
            results.append((read, error))
        else:
            pytest.fail(f"no error in {limit} elements")
    return results[0], results[1]


def record_offset(path: Path, index: int) -> int:
    with RecordFile(str(path)) as records:
        records.skip(index)
        return records.offset


def test_a_flipped_byte_in_a_shard_is_tf_datas_corrupted_record_at_the_same_element(data):
    path = data / TRAIN_0
    offset = record_offset(path, 9)  # stream 0's record 9: forward row 0, element 9
    damaged = bytearray(path.read_bytes())
    damaged[offset + 30] ^= 0x10
    path.write_bytes(bytes(damaged))
    (tf_read, tf_error), (np_read, np_error) = first_errors(data)
    assert tf_read == np_read == 9
    said = error_text(tf_error).removeprefix("DataLossError: ")
    assert said == f"corrupted record at {offset + 12}"
    assert str(np_error).startswith(f"{path}: {said} ") and exit_code(np_error) == 3


def test_a_shard_cut_inside_a_record_is_tf_datas_truncated_record_at_the_same_element(data):
    path = data / TRAIN_0
    offset = record_offset(path, 20)
    path.write_bytes(path.read_bytes()[:offset + 40])
    (tf_read, tf_error), (np_read, np_error) = first_errors(data)
    assert tf_read == np_read and isinstance(tf_error, tf.errors.DataLossError)
    assert f"truncated record at {offset}" in error_text(tf_error)
    assert str(np_error).startswith(f"{path}: truncated record at {offset} ") and exit_code(np_error) == 3


def test_a_stream_that_ends_early_is_tf_datas_error_in_its_words_at_the_same_element(data):
    manifest = json.loads((data / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["shards"][0]
    shard["streams"][-1]["records"] += 10  # stream 6 promised 55 records, it holds 45
    shard["records"] += 10
    (data / "manifest.json").write_text(json.dumps(manifest))
    (tf_read, tf_error), (np_read, np_error) = first_errors(data)
    assert tf_read == np_read == 45 and stream_ended_early(tf_error)
    words = f"{data / TRAIN_0}: stream 6 ends before the records its manifest lists (55 from record 183)"
    assert words in tf_error.message and str(np_error) == words and exit_code(np_error) == 3


# ------------------------------------------------------------------------------ the thread
def reader_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "numpy-reader"]


def test_the_read_ahead_thread_stops_on_close(small_data_dir):
    _, np_reader = stream_readers(load_manifest(small_data_dir), 8)
    elements = np_reader.elements(depth=2)
    next(elements)
    assert elements.running
    elements.close()
    assert not elements.running and not reader_threads()
    with pytest.raises(StopIteration):
        next(elements)


def test_the_read_ahead_thread_stops_on_error_and_the_error_reaches_the_consumer(data):
    (data / TRAIN_0).write_bytes(b"\x00" * 40)
    _, np_reader = stream_readers(load_manifest(str(data)), 8)
    elements = np_reader.elements()
    with pytest.raises(DamagedRecordError, match="corrupted record at 0"):
        next(elements)
    assert not elements.running and not reader_threads()


def test_the_time_waiting_for_input_is_counted(small_data_dir):
    _, np_reader = stream_readers(load_manifest(small_data_dir), 8)
    with np_reader.elements() as elements:
        assert elements.wait_seconds == 0.0
        list(itertools.islice(elements, 5))
        assert elements.wait_seconds > 0.0


def test_the_reader_imports_no_tensorflow(small_data_dir):
    script = (
        "import sys\n"
        "from tfrecords.numpy_reader import NumpyStreamReader\n"
        "from tfrecords.record_files import load_local_manifest\n"
        f"manifest = load_local_manifest({small_data_dir!r})\n"
        "reader = NumpyStreamReader(manifest, 'train', 8, manifest.seq_len, manifest.num_predict, manifest.bi_data)\n"
        "with reader.host_batches() as batches:\n"
        "    assert next(batches)['input_ids'].shape == (1, 8, manifest.seq_len)\n"
        "print(sorted(name for name in ('tensorflow', 'apache_beam') if name in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
