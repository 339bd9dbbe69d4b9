"""Importing an original TF1 XLNet release: a synthetic checkpoint in the original layout, written
with tf.compat.v1, must load and reproduce the NumPy reference."""
import json

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from pipeline.vocab import load_vocab
from trainer.conversion.tf1_checkpoint import CheckpointImportError, import_original
from trainer.models.network import build_network
from trainer.runtime.model_dir import ModelDirectory

from support import reference_numpy

RELEASE_CONFIG = {"n_layer": 2, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 24, "ff_activation": "gelu",
                  "untie_r": True, "n_token": 8000}  # n_token = the conftest vocabulary's size


def write_release(directory, weights, config=RELEASE_CONFIG):
    """xlnet_model.ckpt written by a TF1 Saver with the original variable names, and xlnet_config.json."""
    with tf.Graph().as_default():
        variables = [tf.compat.v1.get_variable(name, initializer=tf.constant(value)) for name, value in weights.items()]
        tf.compat.v1.get_variable("global_step", initializer=tf.constant(0, tf.int64))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            prefix = tf.compat.v1.train.Saver(variables).save(session, str(directory / "xlnet_model.ckpt"),
                                                              write_meta_graph=False)
    (directory / "xlnet_config.json").write_text(json.dumps(config))
    return prefix, str(directory / "xlnet_config.json")


def reference_config(**changes):
    values = dict(RELEASE_CONFIG, vocab=RELEASE_CONFIG["n_token"], attn_type="bi", bi_data=True, clamp_len=-1,
                  mem_len=6, reuse_len=4)
    values.update(changes)
    return values


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    weights = reference_numpy.random_weights(reference_config(), seed=11)
    prefix, config_path = write_release(tmp_path_factory.mktemp("release"), weights)
    return prefix, config_path, weights


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(9, 8000, [2, 8]).astype(np.int32)
    segments = np.array([[0, 0, 0, 0, 1, 1, 1, 2]] * 2, np.int32)
    perm_mask = (rng.random([2, 8, 8]) < 0.5).astype(np.float32)
    target_mapping = np.eye(8, dtype=np.float32)[[[1, 4, 6]] * 2]
    mems = [rng.normal(0, 1, [2, 5, 16]).astype(np.float32) for _ in range(2)]
    return ids, segments, perm_mask, target_mapping, mems


def test_imported_release_reproduces_the_reference(release):
    prefix, config_path, weights = release
    network = import_original(prefix, config_path, mem_len=6, reuse_len=4, bi_data=True)
    ids, segments, perm_mask, target_mapping, mems = inputs()
    logits, new_mems = network(ids, segments, perm_mask, target_mapping, mems)
    expected = reference_numpy.forward(weights, reference_config(), ids, segments, perm_mask, target_mapping, mems)
    np.testing.assert_allclose(logits.numpy(), expected["logits"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new_mems[1].numpy(), expected["new_mems"][1], rtol=1e-5, atol=1e-5)


def test_missing_variable_is_named(tmp_path, release):
    weights = dict(release[2])
    del weights["model/transformer/layer_1/rel_attn/r/kernel"]
    prefix, config_path = write_release(tmp_path, weights)
    with pytest.raises(CheckpointImportError, match="missing variable model/transformer/layer_1/rel_attn/r/kernel"):
        import_original(prefix, config_path)


def test_misshaped_variable_is_named(tmp_path, release):
    weights = dict(release[2])
    weights["model/transformer/seg_embed"] = np.zeros([2, 3, 2, 8], np.float32)
    prefix, config_path = write_release(tmp_path, weights)
    with pytest.raises(CheckpointImportError,
                       match=r"model/transformer/seg_embed has shape \[2, 3, 2, 8\], the config needs \[2, 2, 2, 8\]"):
        import_original(prefix, config_path)


def test_config_without_a_required_key_is_named(tmp_path, release):
    config = {k: v for k, v in RELEASE_CONFIG.items() if k != "n_token"}
    prefix, config_path = write_release(tmp_path, release[2], config)
    with pytest.raises(CheckpointImportError, match="lacks n_token"):
        import_original(prefix, config_path)


def test_import_command_writes_a_model_directory(tmp_path, release, spm_model):
    prefix, config_path, weights = release
    output = tmp_path / "model"
    status = xlnet_cli.main(["import-checkpoint", "--checkpoint", prefix, "--config", config_path, "--spm", spm_model,
                             "--output", str(output), "--mem-len", "6", "--reuse-len", "4"])
    assert status == 0
    config = ModelDirectory(output).model_config
    assert (config.n_layer, config.vocab_size, config.mem_len, config.reuse_len) == (2, 8000, 6, 4)
    assert json.loads((output / "special_ids.json").read_text()) == load_vocab(spm_model).special_ids.to_dict()
    assert (output / "spiece.model").read_bytes() == open(spm_model, "rb").read()
    restored = build_network(config)
    tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(str(output / "checkpoints"))) \
        .assert_existing_objects_matched()
    np.testing.assert_array_equal(restored.attention_biases.seg_embed.numpy(), weights["model/transformer/seg_embed"])


def test_import_command_rejects_a_vocabulary_of_another_size(tmp_path, release, spm_model, capsys):
    prefix, _, weights = release
    _, config_path = write_release(tmp_path, weights, dict(RELEASE_CONFIG, n_token=32000))
    status = xlnet_cli.main(["import-checkpoint", "--checkpoint", prefix, "--config", config_path, "--spm", spm_model,
                             "--output", str(tmp_path / "model")])
    assert status == 2
    assert "has 8000 pieces but --config" in capsys.readouterr().err


def test_import_command_reads_the_release_from_and_writes_the_model_directory_to_the_bucket(release, spm_model,
                                                                                            gcs_prefix):
    import posixpath

    prefix, config_path, weights = release
    remote = posixpath.join(gcs_prefix, "release")
    for local in tf.io.gfile.glob(prefix + ".*") + [config_path, spm_model]:
        tf.io.gfile.copy(local, posixpath.join(remote, posixpath.basename(local)), overwrite=True)
    output = posixpath.join(gcs_prefix, "model")
    status = xlnet_cli.main(["import-checkpoint", "--checkpoint", posixpath.join(remote, "xlnet_model.ckpt"),
                             "--config", posixpath.join(remote, "xlnet_config.json"),
                             "--spm", posixpath.join(remote, posixpath.basename(spm_model)), "--output", output,
                             "--mem-len", "6", "--reuse-len", "4"])
    assert status == 0
    config = ModelDirectory(output).model_config
    assert (config.n_layer, config.mem_len, config.reuse_len) == (2, 6, 4)
    restored = build_network(config)
    tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(posixpath.join(output, "checkpoints"))) \
        .assert_existing_objects_matched()
    np.testing.assert_array_equal(restored.attention_biases.seg_embed.numpy(), weights["model/transformer/seg_embed"])


def test_import_command_refuses_more_layers_in_the_config_than_the_checkpoint_holds_before_building(
        tmp_path, release, spm_model, capsys):
    prefix, _, weights = release
    _, config_path = write_release(tmp_path, weights, dict(RELEASE_CONFIG, n_layer=100000))
    status = xlnet_cli.main(["import-checkpoint", "--checkpoint", prefix, "--config", config_path, "--spm", spm_model,
                             "--output", str(tmp_path / "model")])
    assert status == 2
    assert capsys.readouterr().err == (f"xlnet import-checkpoint: error: --config {config_path}: n_layer 100000, but "
                                       f"checkpoint {prefix} holds 2 layers (model/transformer/layer_0 to layer_1); "
                                       "correct n_layer\n")
    assert not (tmp_path / "model").exists()
