"""Every shard a manifest names stays inside its data directory (tfrecords/manifest.py): a name with
'..', an absolute path or another scheme is a DataError (exit 3) naming the manifest and the name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfrecords.errors import DataError, exit_code
from tfrecords.manifest import ShardNameError, load_manifest


def manifest_naming(tiny_data_dir: str, directory: Path, name) -> str:
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    values["splits"]["train"]["shards"][1]["file"] = name
    (directory / "manifest.json").write_text(json.dumps(values))
    return str(directory)


def test_a_shard_name_with_dot_dot_is_a_data_error_naming_the_manifest_and_the_name(tiny_data_dir, tmp_path):
    directory = manifest_naming(tiny_data_dir, tmp_path, "../data/x.tfrecord")
    with pytest.raises(ShardNameError) as error:
        load_manifest(directory)
    assert exit_code(error.value) == 3 and isinstance(error.value, DataError)
    assert str(error.value) == (f"{tmp_path}/manifest.json: splits.train.shards[1] names '../data/x.tfrecord', not a "
                                f"file inside the data directory {tmp_path} (it has an empty, '.' or '..' part); "
                                "shard names must be relative to the manifest, without '..'")


@pytest.mark.parametrize("name, problem", [
    ("/etc/x.tfrecord", "it is an absolute path"),
    ("gs://other-bucket/x.tfrecord", "it names another location (a scheme or drive)"),
    ("file:x.tfrecord", "it names another location (a scheme or drive)"),
    ("sub/../../x.tfrecord", "it has an empty, '.' or '..' part"),
    ("..\\x.tfrecord", "it holds a backslash"),
    ("", "it is empty"),
    (7, "found a number"),
])
def test_a_shard_name_outside_the_data_directory_is_refused(tiny_data_dir, tmp_path, name, problem):
    directory = manifest_naming(tiny_data_dir, tmp_path, name)
    with pytest.raises(ShardNameError) as error:
        load_manifest(directory)
    assert f"splits.train.shards[1] names {name!r}, not a file inside the data directory" in str(error.value)
    assert problem in str(error.value)


def test_a_shard_in_a_subdirectory_of_the_data_directory_is_accepted(tiny_data_dir, tmp_path):
    directory = manifest_naming(tiny_data_dir, tmp_path, "train/x.tfrecord")
    assert load_manifest(directory).split("train").shards[1].file == "train/x.tfrecord"
