"""The training configuration against the model (trainer/configs/training.py): the permutation-block
rule is tfrecords.record_config.undivided_parts, reported with the configuration's field names."""
from __future__ import annotations

import pytest

from tfrecords.errors import UsageError
from trainer.configs.training import TrainConfig, train_preset
from trainer.models.config import model_preset


def test_the_tiny_preset_fits_its_model():
    train_preset("tiny").check_model(model_preset("tiny"))


def test_a_perm_size_that_leaves_a_part_undivided_is_a_usage_error_naming_the_fields():
    train = train_preset("tiny").replace(perm_size=48)
    with pytest.raises(UsageError) as error:
        train.check_model(model_preset("tiny"))
    assert str(error.value) == ("training config does not fit the model config: train.perm_size (48) must divide "
                                "model.reuse_len (64) and seq_len - reuse_len (64)")


def test_an_impossible_field_value_is_a_usage_error():
    with pytest.raises(UsageError, match="invalid training config: perm_size must be positive, got 0"):
        TrainConfig(perm_size=0)


def test_profile_steps_is_off_by_default_and_names_the_window_it_traces():
    assert TrainConfig().profile_window is None
    assert TrainConfig(profile_steps="10:12").profile_window == (10, 12)
    assert TrainConfig(profile_steps="7:7").profile_window == (7, 7)


def test_a_profile_window_that_starts_after_the_last_step_is_refused_naming_the_run_length():
    from trainer.configs.overrides import resolve_configs

    with pytest.raises(UsageError) as error:
        resolve_configs("tiny", None, ["train_steps=20", "profile_steps=100:200"])
    assert ("profile_steps 100:200 starts after the run's last step (train_steps 20): nothing would be traced; "
            "choose a START of at most 20 (set by --set profile_steps=100:200)") in str(error.value)
    assert TrainConfig(train_steps=20, profile_steps="20:200").profile_window == (20, 200)  # traces step 20


@pytest.mark.parametrize("value", ["5:3", "x", "0:2", "3", "3:", "-1:2", "2:3:4"])
def test_a_profile_window_that_is_not_start_colon_end_is_a_usage_error_set_by_its_flag(value):
    from trainer.configs.overrides import resolve_configs

    with pytest.raises(UsageError) as error:
        resolve_configs("tiny", None, [f"profile_steps={value}"])
    assert str(error.value) == (f"invalid training config: profile_steps must be START:END, whole steps with 1 <= "
                                f"START <= END (e.g. 100:105), got {value!r} (set by --set profile_steps={value})")
