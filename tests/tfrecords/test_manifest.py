"""tfrecords/manifest.py: loading and validation; pipeline/data_directory.py: atomic saving."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.data_directory import read_manifest, save_manifest
from tfrecords.manifest import Manifest, ManifestError, load_manifest


def test_loaded_manifest_exposes_the_data_shape(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    assert (manifest.seq_len, manifest.reuse_len, manifest.num_predict, manifest.perm_size) == (128, 64, 21, 64)
    assert manifest.bi_data and manifest.num_streams == 16 and manifest.compression_type == ""
    locations = manifest.split("train").stream_locations()
    assert sorted(locations) == list(range(32))
    assert manifest.shard_path(manifest.split("train").shards[0]).startswith(tiny_data_dir)


def test_missing_manifest_is_reported_with_its_path(tmp_path):
    with pytest.raises(ManifestError, match="manifest.json not found"):
        load_manifest(str(tmp_path))


def test_unknown_split_is_reported(tiny_data_dir):
    with pytest.raises(ManifestError, match="no split 'test'"):
        load_manifest(tiny_data_dir).split("test")


def test_inconsistent_stream_bookkeeping_is_refused(tiny_data_dir, tmp_path):
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    values["splits"]["train"]["shards"][0]["streams"][1]["first_record_index_in_file"] += 1
    (tmp_path / "manifest.json").write_text(json.dumps(values))
    with pytest.raises(ManifestError, match="expected"):
        load_manifest(str(tmp_path))


def test_other_format_version_is_refused(tiny_data_dir, tmp_path):
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    values["format_version"] = 99
    (tmp_path / "manifest.json").write_text(json.dumps(values))
    with pytest.raises(ManifestError, match="format_version 99"):
        load_manifest(str(tmp_path))


def test_save_replaces_atomically_and_leaves_no_temporary_file(tiny_data_dir, tmp_path):
    manifest = load_manifest(tiny_data_dir)
    save_manifest(manifest, str(tmp_path))
    save_manifest(manifest, str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    reloaded = Manifest.from_dict(json.loads((tmp_path / "manifest.json").read_text()))
    assert reloaded == manifest
    assert reloaded.split("valid").totals == manifest.split("valid").totals


def test_pipeline_and_trainer_read_the_same_manifest(tiny_data_dir):
    # The pipeline reads through Beam's FileSystems, the trainer through tf.io.gfile.
    assert read_manifest(tiny_data_dir) == load_manifest(tiny_data_dir)
    assert read_manifest(tiny_data_dir).directory == load_manifest(tiny_data_dir).directory == tiny_data_dir


def test_pipeline_reports_a_missing_manifest_like_the_trainer(tmp_path):
    with pytest.raises(ManifestError, match="manifest.json not found"):
        read_manifest(str(tmp_path))


LEGACY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "data"


@pytest.mark.parametrize("text, found", [("[1, 2]", "a list"), ('"manifest"', "a string"), ("null", "null")])
def test_manifest_that_is_not_a_json_object_is_refused_naming_the_file(tmp_path, text, found):
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ManifestError) as error:
        load_manifest(str(tmp_path))
    assert str(error.value) == (f"{tmp_path / 'manifest.json'} is not a valid manifest: the manifest must be a "
                                f"JSON object, found {found}")


def test_a_nested_entry_that_is_not_an_object_is_refused_naming_where(tiny_data_dir, tmp_path):
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    values["splits"]["train"]["shards"][1] = ["train-00001-of-00004.tfrecord"]
    (tmp_path / "manifest.json").write_text(json.dumps(values))
    with pytest.raises(ManifestError, match=r"manifest.json is not a valid manifest: splits.train.shards\[1\] must "
                                            "be a JSON object, found a list"):
        load_manifest(str(tmp_path))


def test_a_missing_field_is_named(tiny_data_dir, tmp_path):
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    del values["vocab"]
    (tmp_path / "manifest.json").write_text(json.dumps(values))
    with pytest.raises(ManifestError, match="manifest.json is not a valid manifest: it lacks the field 'vocab'"):
        load_manifest(str(tmp_path))


def test_manifest_without_shard_sizes_loads_and_saves_unchanged(tmp_path):
    manifest = load_manifest(str(LEGACY_DATA))
    assert all(shard.bytes is None for split in manifest.splits.values() for shard in split.shards)
    assert '"bytes"' not in manifest.to_json()
    assert json.loads(manifest.to_json()) == json.loads((LEGACY_DATA / "manifest.json").read_text())


@pytest.mark.parametrize("size", [-1, "12", True])
def test_a_shard_size_that_is_not_a_file_size_is_refused(tiny_data_dir, tmp_path, size):
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    values["splits"]["valid"]["shards"][0]["bytes"] = size
    (tmp_path / "manifest.json").write_text(json.dumps(values))
    with pytest.raises(ManifestError, match="valid-00000-of-00002.tfrecord: bytes must be a file size"):
        load_manifest(str(tmp_path))


def test_a_manifest_that_is_not_utf8_is_refused_naming_the_file_by_both_readers(tiny_data_dir, tmp_path):
    (tmp_path / "manifest.json").write_bytes(b'{"format_version": \xff\xfe}')
    for read in (load_manifest, read_manifest):  # the trainer's (tf.io.gfile) and the pipeline's (Beam)
        with pytest.raises(ManifestError) as error:
            read(str(tmp_path))
        assert str(error.value) == (f"{tmp_path / 'manifest.json'} is not a valid manifest: 'utf-8' codec can't "
                                    "decode byte 0xff in position 19: invalid start byte")
