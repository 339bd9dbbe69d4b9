"""Resolving a run's configurations (trainer/configs/overrides.py): presets, --config files, --set
overrides, and the checks between the model and the training configuration."""
from __future__ import annotations

import re

import pytest

from trainer.configs.finetuning import FinetuneConfig
from trainer.configs.overrides import ConfigFile, parse_overrides, resolve_configs
from trainer.configs.training import TrainConfig, train_preset
from trainer.models.config import model_preset


def test_presets_share_the_model_preset_names():
    for name in ("tiny", "base", "large"):
        model, train, _ = resolve_configs(name)
        assert model == model_preset(name) and train == train_preset(name)


def test_set_overrides_are_typed_by_the_config_fields():
    model, train = parse_overrides(["model.n_layer=3", "learning_rate=2e-4", "jit_compile=true", "decay=cosine"])
    assert model == {"n_layer": 3}
    assert train == {"learning_rate": 2e-4, "jit_compile": True, "decay": "cosine"}


@pytest.mark.parametrize("item, message", [("nope=1", "no such field"),
                                           ("n_layer=two", "--set n_layer=two: expected an integer$"),
                                           ("learning_rate=fast", "--set learning_rate=fast: expected a number$"),
                                           ("train.n_layer=2", "TrainConfig has no field"),
                                           ("jit_compile=maybe", "true or false"), ("n_layer", "key=value")])
def test_bad_set_override_names_the_problem(item, message):
    with pytest.raises(ValueError, match=message):
        parse_overrides([item])


@pytest.mark.parametrize("item, suggestion", [
    ("learning_rte=1e-3", "did you mean learning_rate or end_learning_rate?"),  # nearest first
    ("model.n_layr=3", "did you mean model.n_layer?"),
    ("train.n_layer=3", "did you mean model.n_layer?"),  # the right name in the other configuration
    ("modle.d_model=64", "did you mean model.d_model?"),
])
def test_unknown_set_key_suggests_the_nearest_field_names(item, suggestion):
    key = item.split("=")[0]
    with pytest.raises(ValueError, match=f"^{re.escape(f'--set {key}: ')}.*; {re.escape(suggestion)}$"):
        parse_overrides([item])


def test_unknown_set_key_of_fine_tuning_suggests_its_own_fields():
    with pytest.raises(ValueError, match="did you mean max_seq_length, max_answer_length or max_query_length\\?$"):
        parse_overrides(["max_seq_lenght=64"], FinetuneConfig, "finetune")


def test_unknown_set_key_close_to_no_field_suggests_nothing():
    with pytest.raises(ValueError, match="no such field in ModelConfig or TrainConfig \\(use model.NAME or "
                                         "train.NAME\\)$"):
        parse_overrides(["colour=blue"])


def test_config_file_applies_between_preset_and_set():
    values = {"model": {"n_layer": 3, "d_model": 96}, "train": {"learning_rate": 5e-4}}
    model, train, explicit = resolve_configs("tiny", ConfigFile(values, "run.json"), ["d_model=64"])
    assert (model.n_layer, model.d_model, train.learning_rate) == (3, 64, 5e-4)
    assert explicit == {"n_layer", "d_model"}


def test_inconsistent_model_and_train_configs_are_refused():
    with pytest.raises(ValueError, match="perm_size"):
        resolve_configs("tiny", None, ["perm_size=48"])
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="float8")


def test_the_remat_setting_takes_the_modes_the_layers_implement():
    from trainer.configs.training import REMAT_MODES
    from trainer.layers.remat import REMAT_MODES as IMPLEMENTED

    assert REMAT_MODES == IMPLEMENTED
    with pytest.raises(ValueError, match="remat must be one of none, attention, full, got 'some'"):
        resolve_configs("tiny", None, ["remat=some"])


def test_the_mixture_is_set_by_its_flags_not_by_set():
    with pytest.raises(ValueError, match="--set mixture: mixture is set with --data and --mixture-weights"):
        resolve_configs("tiny", None, ["mixture=a"])
