"""A fine-tuning run's configurations (trainer/launch/finetuning_run.py): the preset chosen, the
command's own flags over --set, the architecture of --init-checkpoint fixed."""
from __future__ import annotations

import pytest

from tfrecords.errors import UsageError
from trainer.launch.finetuning_run import FinetuneSettings, check_settings, finetuning_configs, matching_preset
from trainer.models.config import MODEL_PRESETS, model_preset


def test_the_preset_matching_an_architecture_is_chosen():
    assert matching_preset(model_preset("large"), MODEL_PRESETS) == "large"
    assert matching_preset(model_preset("base").replace(n_layer=5), MODEL_PRESETS) == "base"
    assert matching_preset(None, MODEL_PRESETS) == "tiny"


def test_the_commands_flags_win_over_set():
    settings = FinetuneSettings(task="classification", preset="tiny", overrides=("max_seq_length=64",),
                                max_seq_length=96)
    assert settings.flag_changes() == {"task": "classification", "max_seq_length": 96}
    _, config = finetuning_configs(settings, vocab_size=1000)
    assert (config.task, config.max_seq_length) == ("classification", 96)


def test_a_baseline_model_takes_the_vocabulary_size_given():
    model, _ = finetuning_configs(FinetuneSettings(task="regression", preset="tiny"), vocab_size=1234)
    assert model.vocab_size == 1234 and model.mem_len == 0  # whole sequences: no memory


def test_the_architecture_of_an_init_checkpoint_cannot_change():
    settings = FinetuneSettings(task="classification", overrides=("model.d_model=64",))
    with pytest.raises(UsageError, match=r"cannot change the architecture of --init-checkpoint \(d_model\)"):
        finetuning_configs(settings, base_model=model_preset("tiny"))


def test_a_refused_squad_window_is_named_before_any_file_is_read():
    with pytest.raises(ValueError, match="max_query_length"):
        check_settings(FinetuneSettings(task="squad", max_seq_length=64, max_query_length=64))


# ------------------------------------------------------------------------------ long documents
def test_one_segment_reads_without_memory_whatever_mem_len_says():
    model, config = finetuning_configs(FinetuneSettings(task="classification", overrides=("mem_len=32",)),
                                       base_model=model_preset("tiny"))
    assert config.max_segments == 1 and model == model_preset("tiny").replace(bi_data=False, mem_len=0)


def test_several_segments_read_with_the_memory_of_the_init_checkpoint_or_the_one_set():
    settings = FinetuneSettings(task="classification", overrides=("max_segments=4",))
    model, _ = finetuning_configs(settings, base_model=model_preset("tiny"))
    assert (model.mem_len, model.reuse_len, model.bi_data) == (model_preset("tiny").mem_len, 0, False)
    set_memory = FinetuneSettings(task="classification", overrides=("max_segments=4", "mem_len=200"))
    assert finetuning_configs(set_memory, base_model=model_preset("tiny"))[0].mem_len == 200


def test_several_segments_without_memory_are_refused_naming_both_settings():
    settings = FinetuneSettings(task="multiple-choice", overrides=("max_segments=3", "mem_len=0"))
    with pytest.raises(UsageError, match=r"max_segments 3 reads the earlier segments .* mem_len is 0: set a memory "
                                         r"length with --set mem_len=M"):
        check_settings(settings)
    fine_tuned = model_preset("tiny").replace(mem_len=0)  # a model directory fine-tuned on one segment
    with pytest.raises(UsageError, match="mem_len is 0"):
        finetuning_configs(FinetuneSettings(task="classification", overrides=("max_segments=2",)),
                           base_model=fine_tuned)
