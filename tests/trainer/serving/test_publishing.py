"""Publishing a SavedModel as a numbered version (trainer/serving/publishing.py): versions, staging
directories, a version that appears whole or not at all, and abandoning an export. A whole export
through it is tested with the SavedModel (test_saved_model.py) and the command
(tests/trainer/commands/test_export.py)."""
from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Iterator

import pytest

import xlnet_cli
from trainer.runtime.storage import StorageError

from trainer.serving.publishing import (STAGING_PREFIX, abandon_export, next_version, publish_version,
                                        remove_stale_staging)

from support.bundled_data import REPO
from support.processes import exited_pid
from support.read_only_mount import read_only_directory

LEGACY = REPO / "tests" / "fixtures" / "legacy"


def write_a_saved_model(staging: str) -> str:
    saved = os.path.join(staging, "saved_model")
    os.makedirs(os.path.join(saved, "variables"))
    for name in ("saved_model.pb", "variables/variables.index"):
        with open(os.path.join(saved, name), "w") as handle:
            handle.write(name)
    return saved


def test_next_version_follows_the_highest_numbered_directory(tmp_path):
    assert next_version(tmp_path / "missing") == 1
    for name in ("1", "7", "notes"):
        (tmp_path / name).mkdir()
    assert next_version(tmp_path) == 8


def test_only_staging_directories_of_dead_exports_on_this_host_are_removed(tmp_path):
    dead = exited_pid()  # names no running process
    host = socket.gethostname()
    names = {"dead": f".export-3-{host}-{dead}-0123456789ab",
             "live": f".export-3-{host}-{os.getpid()}-0123456789ab",
             "other host": f".export-3-elsewhere.example-{dead}-0123456789ab",
             "unrecognised": ".export-3-0123456789ab"}
    for name in names.values():
        (tmp_path / name / "saved_model").mkdir(parents=True)
    assert remove_stale_staging(str(tmp_path)) == [f"{tmp_path}/{names['dead']}"]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        names[kind] for kind in ("live", "other host", "unrecognised"))


def test_a_version_is_published_whole_and_its_staging_directory_goes(tmp_path):
    target = publish_version(str(tmp_path), 3, write_a_saved_model)
    assert target == f"{tmp_path}/3"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["3"]
    assert (tmp_path / "3" / "saved_model.pb").read_text() == "saved_model.pb"
    assert abandon_export() == target  # a signal after the export completed names the version


def test_a_write_that_fails_publishes_nothing_and_leaves_no_staging_directory(tmp_path):
    staged = []

    def failing(staging: str) -> str:
        staged.append(staging)
        assert os.path.basename(staging).startswith(f"{STAGING_PREFIX}2-{socket.gethostname()}-{os.getpid()}-")
        write_a_saved_model(staging)
        raise RuntimeError("cut short")

    with pytest.raises(RuntimeError, match="cut short"):
        publish_version(str(tmp_path), 2, failing)
    assert staged and list(tmp_path.iterdir()) == []


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[Path]:
    """A read-only directory (a read-only bind mount: root writes through permission bits)."""
    with read_only_directory(tmp_path) as view:
        yield view


def test_an_output_that_is_a_file_is_a_usage_error_naming_the_flag_before_anything_is_written(tmp_path):
    (tmp_path / "output").write_text("a file")
    with pytest.raises(StorageError) as raised:
        publish_version(str(tmp_path / "output"), 1, write_a_saved_model)
    assert str(raised.value) == f"--output {tmp_path}/output cannot be written: it is a file, not a directory"
    assert raised.value.exit_code == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["output"]


def test_a_read_only_output_is_a_usage_error_naming_the_flag_and_leaves_nothing(read_only_dir):
    with pytest.raises(StorageError) as raised:
        publish_version(str(read_only_dir / "model"), 1, write_a_saved_model)
    assert re.fullmatch(re.escape(f"--output {read_only_dir}/model cannot be written: {read_only_dir}/model/"
                                  f"{STAGING_PREFIX}1-{socket.gethostname()}-{os.getpid()}-") + "[0-9a-f]{12}"
                        + re.escape(": Read-only file system"), str(raised.value))
    assert list((read_only_dir / "model").iterdir()) == []


def test_an_output_directory_the_export_created_is_removed_when_its_write_fails(tmp_path):
    def failing(staging: str) -> str:
        write_a_saved_model(staging)
        raise RuntimeError("cut short")

    with pytest.raises(RuntimeError, match="cut short"):
        publish_version(str(tmp_path / "new" / "output"), 1, failing)
    assert list((tmp_path / "new").iterdir()) == []


def test_xlnet_export_to_a_read_only_output_exits_2_with_one_line_and_writes_nothing(read_only_dir, capsys):
    output = read_only_dir / "model"
    assert xlnet_cli.main(["export", "--model-dir", str(LEGACY / "pretrained"), "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xlnet export: error: --output {output} cannot be written: {output}/{STAGING_PREFIX}1-")
    assert err.endswith(": Read-only file system\n") and err.count("\n") == 1
    assert list(output.iterdir()) == []


def test_xlnet_export_to_an_output_that_is_a_file_exits_2_naming_the_flag(tmp_path, capsys):
    (tmp_path / "output").write_text("a file")
    for export_format in ("savedmodel", "huggingface", "tf1"):
        assert xlnet_cli.main(["export", "--model-dir", str(LEGACY / "pretrained"), "--output",
                               str(tmp_path / "output"), "--format", export_format]) == 2
        assert capsys.readouterr().err == (f"xlnet export: error: --output {tmp_path}/output cannot be written: it is "
                                           "a file, not a directory\n")
    assert (tmp_path / "output").read_text() == "a file"


def test_a_format_export_to_a_read_only_output_exits_2_naming_the_flag_and_the_file(read_only_dir, capsys):
    output = read_only_dir / "model"
    assert xlnet_cli.main(["export", "--model-dir", str(LEGACY / "pretrained"), "--output", str(output),
                           "--format", "huggingface"]) == 2
    assert capsys.readouterr().err == (f"xlnet export: error: --output {output} cannot be written: "
                                       f"{output}/model.safetensors: Read-only file system\n")
    assert list(output.iterdir()) == []
