"""Opening a data directory for `xlnet inspect` (trainer/inspection/records.py): its vocabulary is
checked against the manifest's checksum (tfrecords.vocabulary.is_tokenised_with)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfrecords.verification import DamagedDataError
from trainer.inspection.records import DataDirectory


def manifest_copy(tiny_data_dir: str, tmp_path: Path, vocab_changes: dict) -> str:
    """A directory holding only tiny_data_dir's manifest, its vocab entry changed (the entry keeps the
    vocabulary's absolute path, so the model is still found)."""
    values = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    values["vocab"] = {key: value for key, value in {**values["vocab"], **vocab_changes}.items()
                       if value is not None}
    (tmp_path / "manifest.json").write_text(json.dumps(values))
    return str(tmp_path)


def test_the_vocabulary_the_data_was_tokenised_with_opens(tiny_data_dir):
    data = DataDirectory.open(tiny_data_dir)
    assert len(data.pieces) == data.vocab.vocab_size


def test_another_vocabulary_is_damaged_data_named_with_both_checksums(tiny_data_dir, tmp_path):
    directory = manifest_copy(tiny_data_dir, tmp_path, {"sha256": "0" * 64})
    with pytest.raises(DamagedDataError, match=f"was tokenised with sha256 {'0' * 64}: the records cannot be "
                                               "decoded with it"):
        DataDirectory.open(directory)


def test_a_manifest_without_a_checksum_is_damaged_data(tiny_data_dir, tmp_path):
    directory = manifest_copy(tiny_data_dir, tmp_path, {"sha256": None})
    with pytest.raises(DamagedDataError, match="was tokenised with sha256 None"):
        DataDirectory.open(directory)
