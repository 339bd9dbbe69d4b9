"""The steps every training run shares (trainer/launch/run_setup.py): the --config file, the
settings a resumed run changes."""
from __future__ import annotations

import json

import pytest

from tfrecords.errors import UsageError
from trainer.configs.training import train_preset
from trainer.launch.run_setup import read_config_file, settings_replacement
from trainer.runtime.model_dir import ModelDirectory


def test_a_config_file_is_read_with_its_path_named(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"train": {"learning_rate": 5e-4}}))
    config = read_config_file(str(path))
    assert (config.values, config.source) == ({"train": {"learning_rate": 5e-4}}, str(path))


def test_no_config_flag_reads_nothing():
    assert read_config_file(None) is None


def test_a_config_file_that_is_missing_or_not_json_is_a_usage_error_naming_the_flag(tmp_path):
    with pytest.raises(UsageError, match=f"--config {tmp_path / 'none.json'}: file not found"):
        read_config_file(str(tmp_path / "none.json"))
    (tmp_path / "bad.json").write_text("{model: 1}")
    with pytest.raises(UsageError, match=f"--config {tmp_path / 'bad.json'} is not valid JSON"):
        read_config_file(str(tmp_path / "bad.json"))


def test_first_settings_are_saved_at_once(tmp_path):
    model_dir = ModelDirectory(str(tmp_path))
    assert settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train_preset("tiny"), log=print) is None
    assert json.loads((tmp_path / model_dir.TRAIN_CONFIG).read_text()) == json.loads(json.dumps(train_preset("tiny").to_dict()))


def test_changed_settings_are_logged_and_saved_only_after_the_first_checkpoint(tmp_path):
    model_dir, lines = ModelDirectory(str(tmp_path)), []
    settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train_preset("tiny"), log=lines.append)
    changed = train_preset("tiny").replace(learning_rate=7e-4)
    replace = settings_replacement(model_dir, model_dir.TRAIN_CONFIG, changed, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("resuming with other settings than") and "learning_rate" in lines[0]
    saved = json.loads((tmp_path / model_dir.TRAIN_CONFIG).read_text())
    assert saved["learning_rate"] == train_preset("tiny").learning_rate
    replace(20)
    assert json.loads((tmp_path / model_dir.TRAIN_CONFIG).read_text())["learning_rate"] == 7e-4
    assert lines[1].startswith("saved the new settings in")


def test_unchanged_settings_leave_nothing_to_do(tmp_path):
    model_dir = ModelDirectory(str(tmp_path))
    settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train_preset("tiny"), log=print)
    assert settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train_preset("tiny"), log=print) is None
