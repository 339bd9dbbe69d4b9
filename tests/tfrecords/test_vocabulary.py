"""The vocabulary's checksum and the one check of a vocabulary against a manifest
(tfrecords/vocabulary.py), on the bundled data."""
from __future__ import annotations

import hashlib
from pathlib import Path

from tfrecords.manifest import load_manifest, vocabulary_path
from tfrecords.reader import file_sha256
from tfrecords.vocabulary import is_tokenised_with, parse_vocab, vocabulary_sha256


def test_the_checksum_is_the_hex_sha256_of_the_model_bytes():
    assert vocabulary_sha256(b"") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_the_manifest_records_the_checksum_of_its_vocabulary_file(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    model = Path(vocabulary_path(manifest)).read_bytes()
    assert vocabulary_sha256(model) == manifest.vocab["sha256"] == hashlib.sha256(model).hexdigest()


def test_parsing_and_reading_a_file_give_the_same_checksum(tiny_data_dir):
    path = vocabulary_path(load_manifest(tiny_data_dir))
    assert parse_vocab(Path(path).read_bytes(), path).sha256 == file_sha256(path)


def test_records_match_the_vocabulary_they_were_tokenised_with(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    assert is_tokenised_with(manifest.vocab, file_sha256(vocabulary_path(manifest)))


def test_records_do_not_match_another_vocabulary():
    assert not is_tokenised_with({"sha256": "a" * 64}, "b" * 64)


def test_a_manifest_without_a_checksum_matches_no_vocabulary():
    assert not is_tokenised_with({"path": "spiece.model", "vocab_size": 8000}, "b" * 64)
