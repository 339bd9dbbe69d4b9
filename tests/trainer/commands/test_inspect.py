"""`xlnet inspect DATA_DIR --verify` (trainer/commands/inspect.py, tfrecords/verification.py) on damaged
copies of the tiny data directory: every record read back and checked against the manifest."""
from __future__ import annotations

import json
import posixpath
import shutil
import struct
from pathlib import Path

import pytest

import xlnet_cli
from tfrecords.manifest import load_manifest


@pytest.fixture
def data_copy(tiny_data_dir, tmp_path) -> Path:
    """A copy of the session's tiny data directory that a test may damage."""
    return Path(shutil.copytree(tiny_data_dir, tmp_path / "data"))


def first_train_shard(data_dir: Path) -> tuple[Path, int]:
    """The first training shard's path and record count (it holds records)."""
    shard = load_manifest(str(data_dir)).split("train").shards[0]
    assert shard.records > 2
    return data_dir / shard.file, shard.records


def record_at(path: Path, offset: int) -> int:
    """Index of the record whose TFRecord frame (length, CRCs, data) holds byte ``offset``."""
    data, position, index = path.read_bytes(), 0, 0
    while position < len(data):
        (length,) = struct.unpack("<Q", data[position:position + 8])
        position += 8 + 4 + length + 4
        if offset < position:
            return index
        index += 1
    raise AssertionError(f"offset {offset} is past the last record of {path}")


def inspect(capsys, *args: str) -> tuple[int, str, str]:
    code = xlnet_cli.main(["inspect", *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def test_intact_data_directory_verifies_with_exit_0(data_copy, capsys):
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    manifest = load_manifest(str(data_copy))
    records = sum(split.totals["records"] for split in manifest.splits.values())
    assert code == 0
    assert out.strip().splitlines() == [f"verified {data_copy}: 6 shard(s), {records} records in "
                                        f"{sum(p.stat().st_size for p in data_copy.glob('*.tfrecord'))} bytes: "
                                        "all intact"]


def test_shard_truncated_by_100_bytes_is_named_with_its_first_bad_record(data_copy, capsys):
    shard, _ = first_train_shard(data_copy)
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-100])
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: first bad record {record_at(shard, size - 100)}: unreadable (DataLossError: " \
           "truncated record" in out
    assert f"{size - 100} bytes, the manifest says {size}" in out
    assert out.strip().splitlines()[-1].endswith("1 of 6 shard(s) damaged")


def test_flipped_byte_in_the_middle_is_named_with_its_record(data_copy, capsys):
    shard, _ = first_train_shard(data_copy)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x10
    shard.write_bytes(bytes(data))
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: first bad record {record_at(shard, middle)}: unreadable (DataLossError: " \
           "corrupted record" in out
    assert "bytes, the manifest says" not in out  # same size: only the CRC tells


def test_missing_shard_is_damage(data_copy, capsys):
    shard, _ = first_train_shard(data_copy)
    shard.unlink()
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: missing" in out
    assert out.strip().splitlines()[-1].endswith("1 of 6 shard(s) damaged (1 missing)")


def test_records_out_of_the_manifests_stream_layout_are_named(data_copy, capsys):
    import tensorflow as tf

    shard, records = first_train_shard(data_copy)
    rows = [record.numpy() for record in tf.data.TFRecordDataset(str(shard))]
    rows[1], rows[2] = rows[2], rows[1]  # intact framing and CRCs, wrong places
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for row in rows:
            writer.write(row)
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: first bad record 1: stream_pos 2, the manifest's layout puts stream_pos 1 here" in out


def test_token_ids_outside_the_manifests_vocabulary_are_named(data_copy, capsys):
    values = json.loads((data_copy / "manifest.json").read_text())
    values["vocab"]["vocab_size"] = 10  # every record holds pieces above the special ids
    (data_copy / "manifest.json").write_text(json.dumps(values))
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert "first bad record 0: token id" in out and "outside the vocabulary (size 10)" in out


def test_without_a_mode_says_only_verify_exists(data_copy, capsys):
    code, out, err = inspect(capsys, str(data_copy))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"xlnet inspect: error: choose a mode; only --verify exists so far: "
                                        f"xlnet inspect {data_copy} --verify"]


def test_a_directory_without_manifest_is_a_usage_error_naming_it(tmp_path, capsys):
    code, _, err = inspect(capsys, str(tmp_path), "--verify")
    assert code == 2 and f"{tmp_path}/manifest.json not found" in err


def test_intact_copy_on_cloud_storage_verifies(tiny_data_dir, gcs_prefix, capsys):
    import tensorflow as tf

    remote = posixpath.join(gcs_prefix, "data")
    tf.io.gfile.makedirs(remote)
    for path in sorted(Path(tiny_data_dir).iterdir()):
        tf.io.gfile.copy(str(path), posixpath.join(remote, path.name))
    code, out, _ = inspect(capsys, remote, "--verify")
    assert code == 0
    assert out.startswith(f"verified {remote}: 6 shard(s)") and out.strip().endswith("all intact")
