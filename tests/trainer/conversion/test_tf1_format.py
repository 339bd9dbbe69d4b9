"""`xlnet export --format tf1` (trainer/conversion/tf1_format.py): the original release layout, read back by
`xlnet import-checkpoint` into the same weights, configuration and outputs."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from trainer.conversion.tf1_checkpoint import ORIGINAL_CONFIG_KEYS
from trainer.runtime.model_dir import ModelDirectory

from support.interop_models import (
    HEADS,
    SQUAD,
    assert_same_weights,
    pretraining_outputs,
    restore_model_dir,
    tiny_config,
    write_model_dir,
)

D, H, DH, DI, LAYERS = 16, 2, 8, 24, 2  # interop_models.TINY


def release_table(vocab_size: int, untie_r: bool) -> dict[str, tuple[int, ...]]:
    """The original release's variables (xlnet-facts.md) and their shapes for the tiny model."""
    bias = (LAYERS, H, DH) if untie_r else (H, DH)
    table = {"model/transformer/word_embedding/lookup_table": (vocab_size, D),
             "model/transformer/mask_emb/mask_emb": (1, 1, D), "model/transformer/r_w_bias": bias,
             "model/transformer/r_r_bias": bias, "model/transformer/r_s_bias": bias,
             "model/transformer/seg_embed": (LAYERS, 2, H, DH), "model/lm_loss/bias": (vocab_size,)}
    for i in range(LAYERS):
        layer = f"model/transformer/layer_{i}"
        table.update({f"{layer}/rel_attn/{name}/kernel": (D, H, DH) for name in "qkvro"})
        for norm in ("rel_attn", "ff"):
            table.update({f"{layer}/{norm}/LayerNorm/gamma": (D,), f"{layer}/{norm}/LayerNorm/beta": (D,)})
        table.update({f"{layer}/ff/layer_1/kernel": (D, DI), f"{layer}/ff/layer_1/bias": (DI,),
                      f"{layer}/ff/layer_2/kernel": (DI, D), f"{layer}/ff/layer_2/bias": (D,)})
    return table


def export_tf1(model_dir, output) -> int:
    return xlnet_cli.main(["export", "--model-dir", str(model_dir), "--format", "tf1", "--output", str(output)])


def import_release(release, output, config) -> int:
    return xlnet_cli.main(["import-checkpoint", "--checkpoint", str(release / "xlnet_model.ckpt"),
                           "--config", str(release / "xlnet_config.json"), "--spm", str(release / "spiece.model"),
                           "--output", str(output), "--mem-len", str(config.mem_len),
                           "--reuse-len", str(config.reuse_len), "--clamp-len", str(config.clamp_len),
                           "--bi-data" if config.bi_data else "--no-bi-data"])


@pytest.mark.parametrize("untie_r", [True, False])
def test_release_layout_has_the_original_names_shapes_and_config(tmp_path, vocab, untie_r):
    network, _ = write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size, untie_r=untie_r), vocab)
    assert export_tf1(tmp_path / "model", tmp_path / "release") == 0
    reader = tf.train.load_checkpoint(str(tmp_path / "release" / "xlnet_model.ckpt"))
    assert {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()} == \
        release_table(vocab.vocab_size, untie_r)
    assert set(reader.get_variable_to_dtype_map().values()) == {tf.float32}
    config = json.loads((tmp_path / "release" / "xlnet_config.json").read_text())
    assert config == {"n_layer": LAYERS, "d_model": D, "n_head": H, "d_head": DH, "d_inner": DI,
                      "ff_activation": "gelu", "untie_r": untie_r, "n_token": vocab.vocab_size}
    assert set(config) == set(ORIGINAL_CONFIG_KEYS)
    np.testing.assert_array_equal(reader.get_tensor("model/transformer/layer_1/ff/layer_2/kernel"),
                                  network.blocks[1].feed_forward.layer_2.kernel.numpy())


@pytest.mark.parametrize("bi_data, clamp_len, untie_r", [(True, -1, True), (False, 5, False)])
def test_round_trip_gives_the_same_weights_and_outputs(tmp_path, vocab, bi_data, clamp_len, untie_r):
    config = tiny_config(vocab.vocab_size, bi_data=bi_data, clamp_len=clamp_len, untie_r=untie_r)
    network, _ = write_model_dir(str(tmp_path / "model"), config, vocab, seed=9)
    assert export_tf1(tmp_path / "model", tmp_path / "release") == 0
    assert import_release(tmp_path / "release", tmp_path / "imported", config) == 0
    imported, _ = restore_model_dir(str(tmp_path / "imported"))
    assert imported.config == network.config
    assert_same_weights(network, imported)
    expected, actual = pretraining_outputs(network, vocab), pretraining_outputs(imported, vocab)
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_fine_tuned_model_exports_its_encoder(tmp_path, vocab, capsys):
    network, _ = write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size), vocab,
                                 head=HEADS["classification"])
    assert export_tf1(tmp_path / "model", tmp_path / "release") == 0
    assert "the classification head is not written" in capsys.readouterr().out
    reader = tf.train.load_checkpoint(str(tmp_path / "release" / "xlnet_model.ckpt"))
    np.testing.assert_array_equal(reader.get_tensor("model/transformer/seg_embed"),
                                  network.attention_biases.seg_embed.numpy())


# run_squad.py's head (function_builder.get_qa_outputs), top-level scopes, tf.layers kernels [in, out].
SQUAD_TABLE = {"start_logits/dense/kernel": (D, 1), "start_logits/dense/bias": (1,),
               "end_logits/dense_0/kernel": (2 * D, D), "end_logits/dense_0/bias": (D,),
               "end_logits/LayerNorm/gamma": (D,), "end_logits/LayerNorm/beta": (D,),
               "end_logits/dense_1/kernel": (D, 1), "end_logits/dense_1/bias": (1,),
               "answer_class/dense_0/kernel": (2 * D, D), "answer_class/dense_0/bias": (D,),
               "answer_class/dense_1/kernel": (D, 1)}


def squad_release(tmp_path, vocab):
    """A SQuAD model directory and its tf1 export: (network, head, release directory)."""
    network, head = write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size), vocab, seed=9, head=SQUAD)
    assert export_tf1(tmp_path / "model", tmp_path / "release") == 0
    return network, head, tmp_path / "release"


def test_squad_model_round_trips_run_squads_head(tmp_path, vocab, capsys):
    from trainer.conversion.tf1_format import question_answering_variable_map

    network, head, release = squad_release(tmp_path, vocab)
    assert "with the squad head under run_squad.py's names" in capsys.readouterr().out
    reader = tf.train.load_checkpoint(str(release / "xlnet_model.ckpt"))
    assert reader.get_variable_to_shape_map() == {**{name: list(shape) for name, shape in SQUAD_TABLE.items()},
                                                  **{name: list(shape) for name, shape in
                                                     release_table(vocab.vocab_size, True).items()}}
    assert import_release(release, tmp_path / "imported", network.config) == 0
    assert "imported the squad head" in capsys.readouterr().out
    finetuned = ModelDirectory(str(tmp_path / "imported")).finetune_config
    # run_squad.py's checkpoint has no beam widths: its flag defaults, not SQUAD's 3 and 2.
    assert (finetuned.task, finetuned.start_n_top, finetuned.end_n_top) == ("squad", 5, 5)
    imported_network, imported_head = restore_model_dir(str(tmp_path / "imported"))
    assert_same_weights(network, imported_network)
    expected, actual = question_answering_variable_map(head), question_answering_variable_map(imported_head)
    assert set(expected) == set(SQUAD_TABLE)
    for name, variable in expected.items():
        np.testing.assert_array_equal(actual[name].numpy(), variable.numpy(), err_msg=name)
    # what `xlnet export` reads of a squad directory (finetune_config.json and a checkpoint with
    # ``head``) is all there; tests/trainer/serving/test_answer_signature.py exports such a directory


def test_checkpoint_with_part_of_run_squads_head_is_refused(tmp_path, vocab):
    import re
    import shutil

    from trainer.conversion.format_import import import_to_model_dir
    from trainer.conversion.tf1_checkpoint import CheckpointImportError, read_original_checkpoint
    from trainer.conversion.tf1_format import write_original_checkpoint

    _, _, release = squad_release(tmp_path, vocab)
    weights = read_original_checkpoint(str(release / "xlnet_model.ckpt"))
    del weights["end_logits/LayerNorm/beta"]
    partial = tmp_path / "partial"
    partial.mkdir()
    prefix = write_original_checkpoint(str(partial / "xlnet_model.ckpt"), weights)
    for name in ("xlnet_config.json", "spiece.model"):
        shutil.copy(release / name, partial / name)
    with pytest.raises(CheckpointImportError,
                       match=re.escape(f"checkpoint {prefix} holds part of run_squad.py's squad head but lacks "
                                       "end_logits/LayerNorm/beta:")):
        import_to_model_dir(prefix, str(partial / "xlnet_config.json"), str(partial / "spiece.model"),
                            str(tmp_path / "imported"))
    assert not (tmp_path / "imported" / "model_config.json").exists()  # refused before anything is written


def test_export_to_a_bucket_imports_back(tmp_path, vocab, gcs_prefix):
    import posixpath

    config = tiny_config(vocab.vocab_size)
    network, _ = write_model_dir(str(tmp_path / "model"), config, vocab)
    release = posixpath.join(gcs_prefix, "release")
    assert export_tf1(tmp_path / "model", release) == 0
    for name in tf.io.gfile.listdir(release):
        tf.io.gfile.copy(posixpath.join(release, name), str(tmp_path / name))
    assert import_release(tmp_path, tmp_path / "imported", config) == 0
    assert_same_weights(network, restore_model_dir(str(tmp_path / "imported"))[0])


def test_exact_gelu_has_no_original_name(vocab):
    """The original knows the tanh GELU and relu only; an exact-GELU model is refused by name."""
    from types import SimpleNamespace

    from trainer.conversion.tf1_format import TF1FormatError, original_config

    config = tiny_config(vocab.vocab_size)
    assert original_config(SimpleNamespace(config=config.replace(ff_activation="relu")))["ff_activation"] == "relu"
    with pytest.raises(TF1FormatError, match="ff_activation 'gelu_exact'"):
        original_config(SimpleNamespace(config=config.replace(ff_activation="gelu_exact")))
