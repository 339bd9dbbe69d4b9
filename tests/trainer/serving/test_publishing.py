"""Publishing a SavedModel as a numbered version (trainer/serving/publishing.py): versions, staging
directories, a version that appears whole or not at all, and abandoning an export. A whole export
through it is tested with the SavedModel (test_saved_model.py) and the command
(tests/trainer/commands/test_export.py)."""
from __future__ import annotations

import os
import socket

import pytest

from trainer.serving.publishing import (STAGING_PREFIX, abandon_export, next_version, publish_version,
                                        remove_stale_staging)

from support.processes import exited_pid


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
