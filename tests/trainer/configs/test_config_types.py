"""--config and --set values checked against the configuration dataclasses' field types and ranges
(trainer/configs/overrides.py, JsonConfig.from_dict in trainer/models/config.py) before anything is
written: the UsageError names the file or flag, the field, the value and the expected type."""
from __future__ import annotations

import pytest

from tfrecords.errors import UsageError
from trainer.configs.finetuning import FinetuneConfig, finetune_preset
from trainer.configs.overrides import ConfigFile, resolve_configs, resolve_model_and
from trainer.configs.training import TrainConfig
from trainer.models.config import ModelConfig, model_preset


def refusal(values=None, overrides=()) -> str:
    with pytest.raises(UsageError) as error:
        resolve_configs("tiny", ConfigFile(values, "run.json") if values is not None else None, list(overrides))
    return str(error.value)


def test_a_word_for_an_integer_in_a_config_file_names_the_file_field_value_and_type():
    assert refusal({"model": {"n_layer": "two"}}) == '--config run.json: model.n_layer: expected an integer, got "two"'


def test_true_is_not_an_integer():
    assert refusal({"model": {"n_layer": True}}) == "--config run.json: model.n_layer: expected an integer, got true"


def test_a_fraction_for_an_integer_is_refused_before_tensorflow_sees_it():
    assert refusal({"model": {"n_layer": 2.7}}) == "--config run.json: model.n_layer: expected an integer, got 2.7"


def test_a_word_for_a_fine_tuning_learning_rate_names_the_file():
    with pytest.raises(UsageError) as error:
        resolve_model_and(model_preset("tiny"), finetune_preset("tiny"),
                          ConfigFile({"finetune": {"learning_rate": "fast"}}, "ft.json"), [], "finetune")
    assert str(error.value) == '--config ft.json: finetune.learning_rate: expected a finite number, got "fast"'


def test_nan_in_a_config_file_is_not_a_finite_number():
    assert refusal({"train": {"learning_rate": float("nan")}}) == ("--config run.json: train.learning_rate: "
                                                                   "expected a finite number, got NaN")


def test_set_nan_is_refused_naming_the_flag():
    assert refusal(overrides=["learning_rate=nan"]) == "--set learning_rate=nan: expected a finite number"


def test_set_infinity_is_refused_naming_the_flag():
    assert refusal(overrides=["model.dropout=inf"]) == "--set model.dropout=inf: expected a finite number"


def test_an_integer_is_taken_for_a_float_field_and_held_as_a_float():
    _, train, _ = resolve_configs("tiny", ConfigFile({"train": {"learning_rate": 1}}, "run.json"))
    assert train.learning_rate == 1.0 and type(train.learning_rate) is float


def test_a_bool_field_takes_only_true_or_false():
    assert refusal({"train": {"jit_compile": 1}}) == "--config run.json: train.jit_compile: expected true or false, got 1"


def test_a_string_field_takes_only_a_string():
    assert refusal({"train": {"decay": 3}}) == '--config run.json: train.decay: expected a string, got 3'


def test_a_mixture_of_the_wrong_shape_is_refused_by_type():
    assert refusal({"train": {"mixture": [["a", "x"]]}}) == (
        '--config run.json: train.mixture: expected a list, each a list [a string, a finite number], '
        'got [["a", "x"]]')


def test_an_unknown_field_in_a_config_file_names_the_file():
    assert refusal({"model": {"n_lay": 2}}) == "--config run.json: ModelConfig has no field model.n_lay"


def test_a_value_out_of_range_names_the_flag_that_set_it():
    assert refusal(overrides=["learning_rate=-1"]) == ("invalid training config: learning_rate must be positive, "
                                                       "got -1.0 (set by --set learning_rate=-1)")


def test_a_value_out_of_range_names_the_file_that_set_it():
    assert refusal({"model": {"dropout": 1.5}}) == ("invalid model config: dropout must be in [0, 1), got 1.5 "
                                                    "(set by --config run.json)")


def test_adam_settings_out_of_range_are_refused():
    assert refusal(overrides=["adam_beta_1=1", "adam_epsilon=0"]) == (
        "invalid training config: adam_epsilon must be positive, got 0.0 (set by --set adam_epsilon=0); "
        "adam_beta_1 must be in [0, 1), got 1.0 (set by --set adam_beta_1=1)")


def test_from_dict_checks_types_for_every_config():
    for cls, values, problem in [(ModelConfig, {"d_model": "64"}, 'd_model: expected an integer, got "64"'),
                                 (TrainConfig, {"seq_len": False}, "seq_len: expected an integer, got false"),
                                 (FinetuneConfig, {"layer_decay_rate": None},
                                  "layer_decay_rate: expected a finite number, got null")]:
        with pytest.raises(UsageError) as error:
            cls.from_dict(values)
        assert str(error.value) == f"invalid {cls.CONFIG_KIND} config: {problem}"


def test_a_config_built_in_code_is_type_checked_too():
    with pytest.raises(UsageError, match='^invalid model config: n_layer: expected an integer, got "2"$'):
        ModelConfig(n_layer="2")
