"""A manifest that does not describe its records is found before training (tfrecords/verification.py
check_stream_starts: the first record of every stream parsed, the record count checked), and a stream
that ends early mid-run stops the reader naming the shard and the stream (tfrecords/reader.py,
tfrecords/mixture.py), instead of a ParseExample traceback or a silently short epoch.

On a copy of the ``small_data_dir`` fixture (train shards of 228 and 298 records, seq_len 64,
reuse_len 32; shard 0 holds streams 0, 2, 4, 6 from records 0, 69, 114, 183)."""
from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import tensorflow as tf

from tfrecords.errors import DataError, exit_code
from tfrecords.manifest import load_manifest
from tfrecords.mixture import MixtureReader, MixtureSource
from tfrecords.reader import StreamReader, stream_ended_early
from tfrecords.verification import DamagedDataError, check_shard_files, check_stream_starts

TRAIN_0 = "train-00000-of-00002.tfrecord"


@pytest.fixture
def data(small_data_dir, tmp_path) -> Path:
    return Path(shutil.copytree(small_data_dir, tmp_path / "data"))


def edit_manifest(directory: Path, change) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    change(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))


def promise_ten_more_records_of_stream_6(manifest) -> None:
    shard = manifest["splits"]["train"]["shards"][0]
    shard["streams"][-1]["records"] += 10
    shard["records"] += 10


def start_up_refusal(directory: Path) -> str:
    with pytest.raises(DamagedDataError) as error:
        check_stream_starts(load_manifest(str(directory)))
    assert exit_code(error.value) == 3
    return str(error.value)


def test_a_manifest_whose_seq_len_disagrees_with_the_records_is_refused_at_start_up_naming_seq_len(data):
    edit_manifest(data, lambda m: m["config"].update(seq_len=128, reuse_len=64))
    message = start_up_refusal(data)
    assert message.startswith(f"damaged data in {data}: {data / TRAIN_0}: record 0, the first of stream 0: "
                              "input_ids holds 64 values, the manifest's seq_len is 128 (seq_len); ")


def test_a_manifest_whose_reuse_len_leaves_no_room_for_the_records_layout_is_refused_naming_reuse_len(data):
    edit_manifest(data, lambda m: m["config"].update(reuse_len=48))
    assert start_up_refusal(data).startswith(
        f"damaged data in {data}: {data / TRAIN_0}: record 0, the first of stream 0: its second part (B) starts at "
        "position 45, too early for the manifest's reuse_len 48 (reuse_len: the context, one token of A and <sep> "
        "come before B); ")


def test_a_manifest_promising_more_records_than_a_stream_holds_is_refused_at_start_up(data):
    edit_manifest(data, promise_ten_more_records_of_stream_6)
    assert start_up_refusal(data) == (
        f"damaged data in {data}: {data / TRAIN_0}: the file ends after 228 records, the manifest lists 238 "
        "(records): stream 6 (55 records from record 183) holds only 45; "
        f"run `xlnet inspect {data} --verify` to check every record")


def test_a_shard_holding_more_records_than_its_manifest_lists_is_refused_at_start_up(data):
    def fewer(manifest):
        shard = manifest["splits"]["train"]["shards"][0]
        shard["streams"][-1]["records"] -= 10
        shard["records"] -= 10

    edit_manifest(data, fewer)
    assert f"{data / TRAIN_0}: holds more than the 218 records the manifest lists (records)" in start_up_refusal(data)


def test_a_stream_listed_where_another_stream_starts_is_refused_at_start_up(data):
    def swap(manifest):
        streams = manifest["splits"]["train"]["shards"][0]["streams"]
        streams[0]["stream_id"], streams[1]["stream_id"] = streams[1]["stream_id"], streams[0]["stream_id"]

    edit_manifest(data, swap)
    assert (f"{data / TRAIN_0}: record 0, the first of stream 2: holds stream_id 0, stream_pos 0; the manifest's "
            "stream layout puts stream_id 2, stream_pos 0 there") in start_up_refusal(data)


def test_an_intact_directory_passes_the_start_up_checks(data):
    manifest = load_manifest(str(data))
    assert check_shard_files(manifest) is True and check_stream_starts(manifest) is None


def first_error(dataset: tf.data.Dataset, limit: int) -> tuple[int, tf.errors.OpError | None]:
    """(batches read before the error, the error) within ``limit`` batches."""
    read = 0
    try:
        for _ in itertools.islice(dataset, limit):
            read += 1
    except tf.errors.OpError as error:
        return read, error
    return read, None


def test_a_stream_that_ends_early_mid_run_stops_the_reader_naming_the_shard_and_stream(data):
    edit_manifest(data, promise_ten_more_records_of_stream_6)
    reader = StreamReader(load_manifest(str(data)), "train", 8, 64, 10, True, seed=0)
    read, error = first_error(reader.dataset(), 100)
    assert read == 45 and stream_ended_early(error)  # stream 6 (backward partner of stream 2) holds 45 records
    assert (f"{data / TRAIN_0}: stream 6 ends before the records its manifest lists (55 from record 183)"
            in error.message)


def test_a_shard_cut_short_in_a_mixture_stops_the_reader_naming_the_shard_and_stream(data, small_data_dir):
    path = data / TRAIN_0
    records = [bytes(record.numpy()) for record in tf.data.TFRecordDataset(str(path))]
    with tf.io.TFRecordWriter(str(path)) as writer:  # whole records 0..99: stream 2 (69..113) holds 31
        for record in records[:100]:
            writer.write(record)
    sources = [MixtureSource(str(data), load_manifest(str(data)), 0.5),
               MixtureSource(small_data_dir, load_manifest(small_data_dir), 0.5)]
    read, error = first_error(MixtureReader(sources, 8, 64, True, seed=0).dataset(), 200)
    assert error is not None and stream_ended_early(error)
    # the first batch to miss a record: a backward row reading stream 6 (reverses stream 2), cut off entirely
    assert f"{path}: stream 6 ends before the records its manifest lists (45 from record 183)" in error.message


def test_other_reader_errors_are_not_taken_for_a_short_stream():
    assert not stream_ended_early(tf.errors.InvalidArgumentError(None, None, "Key: input_ids. Can't parse"))
    assert not stream_ended_early(DataError("ends before the records its manifest lists"))
