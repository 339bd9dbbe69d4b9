"""Checking a data directory against its manifest (tfrecords/verification.py), on a real data directory
(the ``small_data_dir`` fixture: 2 train shards of 228 and 298 records, 1 valid shard of 56, seq_len 64,
vocabulary of 1000), damaged one way per test. `xlnet inspect --verify` prints these reports
(tests/trainer/commands/test_inspect.py); `xlnet train` runs the cheap check at start-up."""
from __future__ import annotations

import json
import shutil
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfrecords.manifest import load_manifest
from tfrecords.schema import parse_records
from tfrecords.verification import DamagedDataError, check_shard_files, each_in_threads, verify_data_directory

TRAIN_0, TRAIN_1 = "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"
VALID = "valid-00000-of-00001.tfrecord"
RECORDS = {TRAIN_0: 228, TRAIN_1: 298, VALID: 56}


@pytest.fixture
def data(small_data_dir, tmp_path) -> Path:
    """A copy of the small data directory, for one test to damage."""
    return Path(shutil.copytree(small_data_dir, tmp_path / "data"))


def record_offsets(path: Path) -> list[int]:
    """Where each record's frame starts in a TFRecord file (frame: length u64, its CRC, data, data CRC)."""
    content, offsets, position = path.read_bytes(), [], 0
    while position < len(content):
        offsets.append(position)
        (length,) = struct.unpack("<Q", content[position:position + 8])
        position += 8 + 4 + length + 4
    return offsets


def truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def edit_manifest(directory: Path, change) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    change(manifest)
    (directory / "manifest.json").write_text(json.dumps(manifest))


def shard_report(report, file: str):
    (shard,) = [shard for shard in report.shards if shard.path.endswith(file)]
    return shard


def test_an_intact_directory_passes_both_checks(data):
    manifest = load_manifest(str(data))
    assert check_shard_files(manifest) is True  # sizes were checked
    report = verify_data_directory(manifest)
    assert report.damaged == [] and report.notes == ()
    assert [(shard.split, Path(shard.path).name, shard.records_read) for shard in report.shards] == [
        ("train", TRAIN_0, 228), ("train", TRAIN_1, 298), ("valid", VALID, 56)]
    size = sum((data / file).stat().st_size for file in RECORDS)
    assert report.summary() == f"verified {data}: 3 shard(s), 582 records in {size} bytes: all intact"


def test_a_shard_truncated_inside_a_record_is_named_with_that_record(data):
    path = data / TRAIN_0
    size = path.stat().st_size
    truncate(path, record_offsets(path)[100] + 20)  # inside record 100's frame
    shard = shard_report(verify_data_directory(load_manifest(str(data))), TRAIN_0)
    assert (shard.first_bad_record, shard.records_read, shard.size) == (100, 100, record_offsets(path)[100] + 20)
    assert shard.problems[0].startswith("first bad record 100: unreadable (")
    assert shard.problems[1] == f"{record_offsets(path)[100] + 20} bytes, the manifest says {size}"
    assert shard.describe() == f"DAMAGED {path}: " + "; ".join(shard.problems)


def test_a_shard_cut_at_a_record_boundary_is_named_by_the_count_it_lacks(data):
    path = data / TRAIN_1
    truncate(path, record_offsets(path)[200])  # whole records 0..199: every frame reads
    shard = shard_report(verify_data_directory(load_manifest(str(data))), TRAIN_1)
    assert (shard.first_bad_record, shard.records_read) == (200, 200)
    assert shard.problems[0] == ("first bad record 200: the file ends after 200 records, the manifest says 298 "
                                 "(stream 5 ends early: the manifest lists 87 records of it from record 149)")


def test_the_cheap_check_refuses_a_shard_of_another_size_without_reading_a_record(data):
    path = data / TRAIN_0
    size = path.stat().st_size
    truncate(path, size - 100)
    with pytest.raises(DamagedDataError) as raised:
        check_shard_files(load_manifest(str(data)))
    assert str(raised.value) == (f"damaged data in {data}: {path}: expected {size} bytes, found {size - 100} bytes; "
                                 f"run `xlnet inspect {data} --verify` to check every record")


def test_a_missing_shard_is_reported_missing_by_both_checks(data):
    size = (data / VALID).stat().st_size
    (data / VALID).unlink()
    manifest = load_manifest(str(data))
    with pytest.raises(DamagedDataError, match=f"{data / VALID}: expected {size} bytes, found no such file"):
        check_shard_files(manifest)
    report = verify_data_directory(manifest)
    shard = shard_report(report, VALID)
    assert (shard.size, shard.records_read, shard.first_bad_record) == (None, 0, None)
    assert shard.problems == ("missing (the manifest lists it, the directory lacks it)",)
    assert [Path(damaged.path).name for damaged in report.damaged] == [VALID]
    assert report.summary().endswith(": 1 of 3 shard(s) damaged (1 missing)")


def test_a_flipped_byte_fails_the_crc_of_its_record(data):
    path = data / VALID
    content = bytearray(path.read_bytes())
    content[record_offsets(path)[30] + 12 + 5] ^= 0xFF  # a byte of record 30's data
    path.write_bytes(bytes(content))
    shard = shard_report(verify_data_directory(load_manifest(str(data))), VALID)
    assert (shard.first_bad_record, shard.records_read) == (30, 30)
    assert len(shard.problems) == 1 and shard.problems[0].startswith("first bad record 30: unreadable (")


def test_a_record_where_the_stream_layout_does_not_put_it_is_named(data):
    def swap_first_two_stream_ids(manifest):  # the records stay; the manifest now places stream 2 first
        streams = manifest["splits"]["train"]["shards"][0]["streams"]
        streams[0]["stream_id"], streams[1]["stream_id"] = streams[1]["stream_id"], streams[0]["stream_id"]

    edit_manifest(data, swap_first_two_stream_ids)
    shard = shard_report(verify_data_directory(load_manifest(str(data))), TRAIN_0)
    assert shard.first_bad_record == 0
    assert shard.problems == ("first bad record 0: stream_id 0, the manifest's layout puts stream_id 2 here",)


def test_a_token_id_outside_the_vocabulary_is_named_with_its_record(data):
    edit_manifest(data, lambda manifest: manifest["vocab"].update(vocab_size=100))
    ids = parse_records(tf.constant([bytes(r.numpy()) for r in tf.data.TFRecordDataset(str(data / VALID))]),
                        64)["input_ids"].numpy()
    first_row = int(np.flatnonzero((ids >= 100).any(axis=1))[0])
    first_id = int(ids[first_row][ids[first_row] >= 100][0])
    shard = shard_report(verify_data_directory(load_manifest(str(data))), VALID)
    assert shard.problems == (f"first bad record {first_row}: token id {first_id} outside the vocabulary (size 100)",)


def test_records_beyond_the_manifests_count_are_named(data):
    path = data / VALID
    content = path.read_bytes()
    path.write_bytes(content + content[record_offsets(path)[55]:])  # record 55 once more
    shard = shard_report(verify_data_directory(load_manifest(str(data))), VALID)
    assert shard.first_bad_record == 56
    assert shard.problems == ("first bad record 56: more records than the manifest's 56",
                              f"{path.stat().st_size} bytes, the manifest says {len(content)}")


def test_a_record_of_another_length_is_named(data):
    path = data / VALID
    content = path.read_bytes()
    with tf.io.TFRecordWriter(str(data / "short.tfrecord")) as writer:
        writer.write(tf.train.Example(features=tf.train.Features(feature={
            "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * 32))})).SerializeToString())
    path.write_bytes(content[:record_offsets(path)[10]] + (data / "short.tfrecord").read_bytes()
                     + content[record_offsets(path)[11]:])  # record 10 replaced
    shard = shard_report(verify_data_directory(load_manifest(str(data))), VALID)
    assert shard.first_bad_record == 10
    assert shard.problems[0].startswith("first bad record 10: not a record of seq_len 64 (")


def test_a_manifest_without_sizes_or_vocab_size_is_verified_with_notes_saying_what_was_not_checked(data):
    def older(manifest):
        del manifest["vocab"]["vocab_size"]
        for split in manifest["splits"].values():
            for shard in split["shards"]:
                del shard["bytes"]

    edit_manifest(data, older)
    manifest = load_manifest(str(data))
    assert check_shard_files(manifest) is False  # existence only
    report = verify_data_directory(manifest)
    assert report.damaged == []
    assert report.notes == ("token ids not checked: the manifest records no vocab_size",
                            "file sizes not checked: the manifest records none (written before sizes were recorded)")


def test_the_first_shard_is_checked_on_the_calling_thread_before_any_other_starts():
    # TensorFlow's lazy start-up must not be entered from several threads at once (issue 40's SIGSEGV)
    seen = []

    def work(item: int) -> int:
        seen.append((item, threading.current_thread() is threading.main_thread()))
        return item * 10

    assert each_in_threads(work, list(range(6)), threads=4) == [0, 10, 20, 30, 40, 50]
    assert seen[0] == (0, True)
    assert all(not on_main for _, on_main in seen[1:])
