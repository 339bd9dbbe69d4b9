"""Whole-file reads and writes and their errors (trainer/runtime/storage.py): every filesystem failure is
one sentence naming the path (and the flag, where the caller knows it): a StorageError (exit 2) for a path
that cannot be used, a StorageUnreachableError (exit 3) for storage that does not answer."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
import tensorflow as tf

from tfrecords.errors import exit_code
from trainer.runtime.storage import (StorageError, StorageUnreachableError, failures_named, read_bytes, read_json,
                                     storage_failure, write_bytes, write_json)

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import output_of, start
from support.read_only_mount import read_only_directory
from support.unreachable_storage import unreachable_gcs_environment


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[Path]:
    """A read-only directory (a read-only bind mount: root writes through permission bits)."""
    with read_only_directory(tmp_path) as view:
        yield view


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(StorageError) as raised:
        read_bytes(str(tmp_path / "missing.json"))
    assert str(raised.value) == f"{tmp_path}/missing.json: file not found"


def test_reading_a_directory_is_a_usage_error_naming_it(tmp_path):
    with pytest.raises(StorageError) as raised:
        read_json(str(tmp_path))
    assert str(raised.value) == f"{tmp_path} cannot be read: Is a directory"
    assert exit_code(raised.value) == 2


def test_writing_under_a_file_is_a_usage_error_naming_the_path(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError) as raised:
        write_json(str(tmp_path / "file" / "config.json"), {})
    assert str(raised.value) == f"{tmp_path}/file/config.json cannot be written: Not a directory"


def test_writing_to_a_read_only_filesystem_is_a_usage_error_and_writes_nothing(read_only_dir):
    with pytest.raises(StorageError) as raised:
        write_bytes(str(read_only_dir / "model" / "a.bin"), b"x")
    assert str(raised.value) == f"{read_only_dir}/model/a.bin cannot be written: Read-only file system"
    assert list((read_only_dir / "model").iterdir()) == []


def test_an_enclosing_flag_is_named_with_the_file_that_was_refused(read_only_dir):
    with pytest.raises(StorageError) as raised:
        with failures_named(str(read_only_dir / "model"), "written", "--output"):
            write_bytes(str(read_only_dir / "model" / "a.bin"), b"x")
    assert str(raised.value) == (f"--output {read_only_dir}/model cannot be written: "
                                 f"{read_only_dir}/model/a.bin: Read-only file system")


def test_retries_given_up_are_unreachable_storage_exit_3_naming_the_flag_and_path():
    error = tf.errors.AbortedError(None, None, "All 10 retry attempts failed. The last failure: Error executing an "
                                   "HTTP request: libcurl code 7 meaning 'Could not connect to server'\n\t when "
                                   "reading metadata of gs://b/data/manifest.json")
    failure = storage_failure(error, "gs://b/data", "read", "--data")
    assert isinstance(failure, StorageUnreachableError) and exit_code(failure) == 3
    assert str(failure) == ("--data gs://b/data cannot be reached: All 10 retry attempts failed. The last failure: "
                            "Error executing an HTTP request: libcurl code 7 meaning 'Could not connect to server' "
                            "(no network, or the storage service is down; the command line may be right, try again "
                            "later)")


def test_a_host_that_cannot_be_resolved_is_unreachable_storage():
    error = tf.errors.FailedPreconditionError(None, None, "Error executing an HTTP request: libcurl code 6 meaning "
                                              "'Could not resolve hostname', error details: Could not resolve host: "
                                              "storage.googleapis.com")
    assert isinstance(storage_failure(error, "gs://b/m/run.lock", "written"), StorageUnreachableError)


def test_xlnet_train_with_data_on_unreachable_storage_exits_3_with_one_line(tmp_path):
    """TensorFlow's GCS client pointed at a port nobody listens on (its https proxy, as the emulator
    is reached): each request fails to connect; retries bounded by GCS_RETRY_CONFIG_* (read at import)."""
    environment, closed = unreachable_gcs_environment()
    model_dir = tmp_path / "model"
    args = ["xlnet_cli.py", "train", "--data", "gs://xlnet-unreachable/data", "--model-dir", str(model_dir),
            "--preset", "tiny", *[arg for item in SMALL_DATA_TRAINING for arg in ("--set", item)]]
    process = start(args, env={**environment, "TF_CPP_MIN_LOG_LEVEL": None}, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE)
    [err] = output_of(process, timeout=120)
    assert process.returncode == 3, err
    assert re.fullmatch(
        re.escape("xlnet train: error: --data gs://xlnet-unreachable/data cannot be reached: All 1 retry attempts "
                  "failed. The last failure: Error executing an HTTP request: libcurl code 7 meaning 'Could not "
                  f"connect to server', error details: Failed to connect to 127.0.0.1 port {closed} after ")
        + r"\d+ ms" + re.escape(": Could not connect to server (no network, or the storage service is down; the "
                                 "command line may be right, try again later)\n"), err), err
    assert not model_dir.exists()
