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
