"""A pretraining run resolved and built (trainer/launch/pretraining_run.py): the one way `xlnet
train`, `xlnet plan`, `xlnet inspect` and the benchmarks put a run together."""
from __future__ import annotations

import pytest

from tfrecords.errors import UsageError
from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.launch.pretraining_run import (PretrainingRun, build_pretraining, pretraining_configs,
                                            resolve_pretraining, with_data_vocab_size)
from trainer.models.config import model_preset


def test_pretraining_configs_are_resolve_configs_with_the_config_file_read(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"model": {"n_layer": 3}}')
    assert pretraining_configs("tiny", str(path), ["d_model=64"]) == \
        resolve_configs("tiny", None, ["n_layer=3", "d_model=64"])[:2] + ({"n_layer", "d_model"},)


def test_the_data_vocabulary_size_replaces_the_presets(tiny_data_dir):
    manifest = load_manifest(tiny_data_dir)
    model = with_data_vocab_size(model_preset("base"), manifest, explicit=set())
    assert model.vocab_size == int(manifest.vocab["vocab_size"]) == 8000 != model_preset("base").vocab_size


def test_a_vocabulary_size_the_user_set_is_kept(tiny_data_dir):
    model = model_preset("tiny").replace(vocab_size=123)
    assert with_data_vocab_size(model, load_manifest(tiny_data_dir), explicit={"vocab_size"}).vocab_size == 123


def test_resolving_checks_the_manifest_against_the_configs(tiny_data_dir, tmp_path):
    resolved = resolve_pretraining(PretrainingRun(data=(tiny_data_dir,), model_dir=str(tmp_path)))
    assert resolved.train.seq_len == int(load_manifest(tiny_data_dir).config["seq_len"])
    assert resolved.mixture(PretrainingRun(data=(tiny_data_dir,), model_dir="m")) == []
    with pytest.raises(UsageError, match="seq_len"):
        resolve_pretraining(PretrainingRun(data=(tiny_data_dir,), model_dir=str(tmp_path), overrides=("seq_len=96",)))


def test_a_directory_given_twice_is_refused_before_any_is_read(tmp_path):
    with pytest.raises(UsageError, match="the same data directory is given twice"):
        resolve_pretraining(PretrainingRun(data=(str(tmp_path / "a"), str(tmp_path / "a")), model_dir="m"))


def test_a_run_without_data_is_a_usage_error():
    with pytest.raises(UsageError, match="--data"):
        resolve_pretraining(PretrainingRun(data=(), model_dir="m"))


def test_the_built_controller_runs_the_resolved_configs(tiny_data_dir, tmp_path):
    run = PretrainingRun(data=(tiny_data_dir,), model_dir=str(tmp_path), overrides=("train_steps=1",))
    controller = build_pretraining(run, log=lambda line: None)
    resolved = resolve_pretraining(run)
    assert (controller.task.model_config, controller.config) == (resolved.model, resolved.train)
    assert (tmp_path / "model_config.json").exists() and (tmp_path / "train_config.json").exists()
