"""Reading a trained model back (trainer/runtime/restore.py): the one restore of a model directory's
network and head, the checkpoint it reads, the vocabulary check and the text casing."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.restore import (
    RestoreError,
    checkpoint_to_read,
    open_model_directory,
    resolve_uncased,
    restore_model,
    vocabulary_is_uncased,
)

from support.interop_models import HEADS, SQUAD, tiny_config, write_model_dir


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, vocab) -> str:
    path = str(tmp_path_factory.mktemp("restore") / "pretrained")
    write_model_dir(path, tiny_config(vocab.vocab_size, mem_len=6, bi_data=True), vocab, seed=3)
    return path


def assert_same_values(expected, actual) -> None:
    assert [w.path for w in expected.weights] == [w.path for w in actual.weights]
    for mine, theirs in zip(expected.weights, actual.weights):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy(), err_msg=mine.path)


def test_a_pretrained_directory_restores_its_network_for_whole_sequences(pretrained, vocab):
    written, _ = write_model_dir(pretrained + "-again", tiny_config(vocab.vocab_size, mem_len=6, bi_data=True), vocab,
                                 seed=3)
    restored = restore_model(ModelDirectory(pretrained))
    assert restored.head is None and restored.head_spec is None
    assert (restored.network.config.mem_len, restored.network.config.bi_data) == (0, False)
    assert restored.checkpoint == ModelDirectory(pretrained).latest_checkpoint()
    assert_same_values(written, restored.network)


def test_whole_sequence_false_keeps_the_recorded_memory_and_bi_data(pretrained):
    restored = restore_model(ModelDirectory(pretrained), whole_sequence=False)
    assert (restored.network.config.mem_len, restored.network.config.bi_data) == (6, True)


@pytest.mark.parametrize("task", ["classification", "regression", "multiple-choice", "squad"])
def test_a_fine_tuned_directory_restores_the_head_its_files_name(tmp_path, vocab, task):
    spec = SQUAD if task == "squad" else HEADS[task]
    _, written = write_model_dir(str(tmp_path / task), tiny_config(vocab.vocab_size), vocab, seed=4, head=spec)
    restored = restore_model(ModelDirectory(str(tmp_path / task)))
    assert restored.head_spec == spec
    assert type(restored.head) is type(written) and restored.head.network is restored.network
    assert_same_values(written, restored.head)


def test_a_classification_directory_without_labels_is_refused_by_the_one_check(tmp_path, vocab):
    write_model_dir(str(tmp_path / "m"), tiny_config(vocab.vocab_size), vocab, head=HEADS["classification"])
    (tmp_path / "m" / ModelDirectory.LABELS).unlink()
    with pytest.raises(RestoreError, match="is a classification model without labels.json"):
        restore_model(ModelDirectory(str(tmp_path / "m")))


def test_the_checkpoint_read_is_the_latest_or_the_one_given(pretrained, tmp_path):
    directory = ModelDirectory(pretrained)
    latest = directory.latest_checkpoint()
    assert checkpoint_to_read(directory) == latest
    assert checkpoint_to_read(directory, latest) == latest
    with pytest.raises(RestoreError, match=r"--checkpoint '.*ckpt-99' not found \(expected .*ckpt-99.index\)"):
        checkpoint_to_read(directory, latest.rsplit("-", 1)[0] + "-99")
    shutil.copytree(pretrained, tmp_path / "empty", ignore=shutil.ignore_patterns("checkpoints"))
    with pytest.raises(RestoreError, match="has no checkpoint under checkpoints/"):
        restore_model(ModelDirectory(str(tmp_path / "empty")))


def test_the_newest_checkpoint_is_the_tensorflow_engines_latest_else_the_newest_orbax_step(pretrained, tmp_path):
    directory = ModelDirectory(pretrained)
    assert directory.newest_checkpoint() == directory.latest_checkpoint()
    shutil.copytree(pretrained, tmp_path / "jax", ignore=shutil.ignore_patterns("checkpoints"))
    jax_trained = ModelDirectory(str(tmp_path / "jax"))
    assert jax_trained.newest_checkpoint() is None
    for step in (3, 12, 9):  # by number: "9" sorts after "12" as text
        (tmp_path / "jax" / "checkpoints" / str(step)).mkdir(parents=True)
    newest = str(tmp_path / "jax" / "checkpoints" / "12")
    assert jax_trained.newest_checkpoint() == newest
    assert checkpoint_to_read(jax_trained) == newest


def test_a_checkpoint_of_another_architecture_is_named(pretrained, tmp_path, vocab):
    shutil.copytree(pretrained, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "model_config.json").read_text())
    (tmp_path / "m" / "model_config.json").write_text(json.dumps({**config, "n_layer": 3}))
    with pytest.raises(RestoreError, match="does not match model_config.json"):
        restore_model(ModelDirectory(str(tmp_path / "m")))


def test_opening_checks_that_the_files_describe_one_vocabulary(pretrained, tmp_path):
    shutil.copytree(pretrained, tmp_path / "m")
    ids = json.loads((tmp_path / "m" / "special_ids.json").read_text())
    (tmp_path / "m" / "special_ids.json").write_text(json.dumps({**ids, "mask": ids["mask"] + 1}))
    with pytest.raises(RestoreError, match="special_ids.json disagrees .* on mask"):
        open_model_directory(str(tmp_path / "m"))
    with pytest.raises(RestoreError, match="lacks model_config.json"):
        open_model_directory(str(tmp_path))


def test_casing_is_detected_from_the_vocabulary(vocab, corpus_sample, tmp_path):
    from pipeline.vocab import VocabConfig, train_vocab

    uncased = train_vocab(VocabConfig(inputs=(corpus_sample,), output_prefix=str(tmp_path / "uncased"),
                                      vocab_size=1000, input_sentence_size=3000, uncased=True, num_threads=2))
    assert vocabulary_is_uncased(vocab.model_proto) is False
    assert vocabulary_is_uncased(uncased.model_proto) is True


def test_casing_recorded_by_training_is_used_unless_a_flag_overrides_it(tmp_path, pretrained):
    assert resolve_uncased(pretrained) == (False, "detected from the vocabulary")  # no text_normalization.json
    (tmp_path / "text_normalization.json").write_text('{"uncased": true}')
    assert resolve_uncased(tmp_path) == (True, "text_normalization.json")
    assert resolve_uncased(tmp_path, flag=False) == (False, "--cased")
    (tmp_path / "text_normalization.json").write_text('{"uncased": "yes"}')
    with pytest.raises(RestoreError, match="text_normalization.json"):
        resolve_uncased(tmp_path)
