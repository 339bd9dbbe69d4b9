"""The Hugging Face transformers format (trainer/conversion/huggingface_format.py) without torch: exported
names, shapes, dtypes and config fields against tables written here from transformers v5's XLNet,
round trips ours -> huggingface -> import -> ours (weights byte for byte, outputs equal), and a
named error for every bad input."""
from __future__ import annotations

import json
import posixpath
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf

import xlnet_cli
from trainer.configs.finetuning import FinetuneConfig
from trainer.conversion.huggingface_format import HuggingFaceFormatError, read_huggingface_directory
from trainer.runtime.model_dir import ModelDirectory

from support.interop_models import (
    HEADS,
    LABELS,
    SQUAD,
    assert_same_weights,
    head_inputs,
    pretraining_outputs,
    restore_model_dir,
    squad_inputs,
    squad_outputs,
    tiny_config,
    write_model_dir,
)
from support.read_only_mount import read_only_directory

D, H, DH, DI, LAYERS = 16, 2, 8, 24, 2  # interop_models.TINY

# transformers v5 XLNetLMHeadModel state dict (lm_loss.weight is tied to the word embedding and
# not saved): name -> shape, for the tiny model with vocabulary size V.
def lm_head_table(vocab_size: int) -> dict[str, tuple[int, ...]]:
    table = {"transformer.word_embedding.weight": (vocab_size, D), "transformer.mask_emb": (1, 1, D),
             "lm_loss.bias": (vocab_size,)}
    for i in range(LAYERS):
        layer = f"transformer.layer.{i}."
        table.update({f"{layer}rel_attn.{name}": (D, H, DH) for name in ("q", "k", "v", "o", "r")})
        table.update({f"{layer}rel_attn.{name}": (H, DH) for name in ("r_r_bias", "r_s_bias", "r_w_bias")})
        table.update({f"{layer}rel_attn.seg_embed": (2, H, DH), f"{layer}rel_attn.layer_norm.weight": (D,),
                      f"{layer}rel_attn.layer_norm.bias": (D,), f"{layer}ff.layer_norm.weight": (D,),
                      f"{layer}ff.layer_norm.bias": (D,), f"{layer}ff.layer_1.weight": (DI, D),
                      f"{layer}ff.layer_1.bias": (DI,), f"{layer}ff.layer_2.weight": (D, DI),
                      f"{layer}ff.layer_2.bias": (D,)})
    return table


def head_table(vocab_size: int, num_labels: int) -> dict[str, tuple[int, ...]]:
    """XLNetForSequenceClassification / XLNetForMultipleChoice: no lm_loss, a summary and logits_proj."""
    table = {name: shape for name, shape in lm_head_table(vocab_size).items() if not name.startswith("lm_loss")}
    table.update({"sequence_summary.summary.weight": (D, D), "sequence_summary.summary.bias": (D,),
                  "logits_proj.weight": (num_labels, D), "logits_proj.bias": (num_labels,)})
    return table


def question_answering_table(vocab_size: int) -> dict[str, tuple[int, ...]]:
    """XLNetForQuestionAnswering: no lm_loss; its poolers (torch Linear weights [out, in];
    answer_class.dense_1 has no bias)."""
    table = {name: shape for name, shape in lm_head_table(vocab_size).items() if not name.startswith("lm_loss")}
    table.update({"start_logits.dense.weight": (1, D), "start_logits.dense.bias": (1,),
                  "end_logits.dense_0.weight": (D, 2 * D), "end_logits.dense_0.bias": (D,),
                  "end_logits.LayerNorm.weight": (D,), "end_logits.LayerNorm.bias": (D,),
                  "end_logits.dense_1.weight": (1, D), "end_logits.dense_1.bias": (1,),
                  "answer_class.dense_0.weight": (D, 2 * D), "answer_class.dense_0.bias": (D,),
                  "answer_class.dense_1.weight": (1, D)})
    return table


# XLNetConfig fields (transformers v5) and what our export of the tiny model writes in them.
def config_table(vocab) -> dict:
    ids = vocab.special_ids
    return {"model_type": "xlnet", "architectures": ["XLNetLMHeadModel"], "vocab_size": vocab.vocab_size,
            "d_model": D, "n_layer": LAYERS, "n_head": H, "d_head": DH, "d_inner": DI, "ff_activation": "gelu_new",
            "attn_type": "bi", "initializer_range": 0.02, "layer_norm_eps": 1e-12, "dropout": 0.1, "mem_len": None,
            "reuse_len": None, "use_mems_eval": True, "use_mems_train": False, "bi_data": False, "clamp_len": -1,
            "same_length": False, "summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh",
            "summary_last_dropout": 0.1, "start_n_top": 5, "end_n_top": 5, "pad_token_id": ids.pad,
            "bos_token_id": ids.bos, "eos_token_id": ids.eos, "tie_word_embeddings": True, "dtype": "float32",
            "xlnet_pretraining": {"bi_data": True, "mem_len": 6, "reuse_len": 4, "dropatt": 0.1}}


def export(model_dir, output, *flags) -> Path:
    assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--format", "huggingface",
                           "--output", str(output), *flags]) == 0
    return Path(output)


def import_dir(source, output, *flags) -> int:
    return xlnet_cli.main(["import-checkpoint", "--huggingface", str(source), "--output", str(output), *flags])


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab):
    """A tiny pretrained model directory and its huggingface export."""
    base = tmp_path_factory.mktemp("hf")
    network, _ = write_model_dir(str(base / "model"), tiny_config(vocab.vocab_size), vocab)
    return network, base / "model", export(base / "model", base / "hf")


@pytest.fixture
def copy_of(exported, tmp_path):
    """A writable copy of the export to break."""
    target = tmp_path / "hf"
    shutil.copytree(exported[2], target)
    return target


def rewrite_tensors(directory: Path, change) -> None:
    tensors = safetensors.numpy.load_file(str(directory / "model.safetensors"))
    change(tensors)
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def rewrite_config(directory: Path, **changes) -> None:
    values = json.loads((directory / "config.json").read_text())
    values.update(changes)
    (directory / "config.json").write_text(json.dumps(values))


def import_error(source, tmp_path, capsys, status: int = 2) -> str:
    """The one line of an import refused with ``status`` (2: a directory we cannot use; 3: damaged or forged)."""
    assert import_dir(source, tmp_path / "imported") == status
    assert not (tmp_path / "imported" / "checkpoints").exists()  # nothing written on a bad input
    return capsys.readouterr().err


# ------------------------------------------------------------------------------- the format
def test_exported_tensors_have_the_transformers_names_shapes_and_dtype(exported, vocab):
    tensors = safetensors.numpy.load_file(str(exported[2] / "model.safetensors"))
    assert {name: tensor.shape for name, tensor in tensors.items()} == lm_head_table(vocab.vocab_size)
    assert {tensor.dtype for tensor in tensors.values()} == {np.dtype(np.float32)}


def test_exported_safetensors_metadata_names_the_pytorch_format(exported):
    from safetensors import safe_open

    with safe_open(str(exported[2] / "model.safetensors"), "np") as handle:
        assert handle.metadata() == {"format": "pt"}


def test_exported_config_has_the_xlnet_config_fields(exported, vocab):
    assert json.loads((exported[2] / "config.json").read_text()) == config_table(vocab)


def test_exported_tokenizer_files_carry_the_casing_and_special_pieces(exported):
    tokenizer = json.loads((exported[2] / "tokenizer_config.json").read_text())
    assert tokenizer == {"tokenizer_class": "XLNetTokenizer", "do_lower_case": False, "remove_space": True,
                         "keep_accents": False, "padding_side": "left", "bos_token": "<s>", "eos_token": "</s>",
                         "unk_token": "<unk>", "sep_token": "<sep>", "pad_token": "<pad>", "cls_token": "<cls>",
                         "mask_token": "<mask>", "additional_special_tokens": ["<eop>", "<eod>"]}
    assert (exported[2] / "spiece.model").read_bytes() == (exported[1] / "spiece.model").read_bytes()


def test_exported_tokenizer_json_holds_every_piece_and_xlnets_layout(exported, vocab):
    tokenizer = json.loads((exported[2] / "tokenizer.json").read_text(encoding="utf-8"))
    processor = vocab.processor()
    assert tokenizer["model"]["vocab"] == [[processor.id_to_piece(i), processor.get_score(i)]
                                           for i in range(vocab.vocab_size)]
    assert [step["type"] for step in tokenizer["normalizer"]["normalizers"]] == \
        ["Replace", "Replace", "NFKD", "StripAccents", "Precompiled"]
    ids = vocab.special_ids
    assert tokenizer["post_processor"]["special_tokens"]["<cls>"]["ids"] == [ids.cls]
    assert [token["id"] for token in tokenizer["added_tokens"]] == sorted(
        [ids.unk, ids.bos, ids.eos, ids.cls, ids.sep, ids.pad, ids.mask, ids.eod, ids.eop])


def test_precompiled_charsmap_is_sentencepieces_normalisation_table(vocab):
    """The table starts with the byte size of its double-array trie, which must fit inside it."""
    from trainer.conversion.huggingface_tokenizer import precompiled_charsmap

    table = precompiled_charsmap(vocab.model_proto)
    assert len(table) > 4 and int.from_bytes(table[:4], "little") < len(table)
    assert table in vocab.model_proto


def test_uncased_model_exports_do_lower_case(tmp_path, vocab):
    write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size), vocab, uncased=True)
    output = export(tmp_path / "model", tmp_path / "hf")
    assert json.loads((output / "tokenizer_config.json").read_text())["do_lower_case"] is True
    normalizers = json.loads((output / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]["normalizers"]
    assert {"type": "Lowercase"} in normalizers


def test_linear_weights_are_transposed_and_biases_sliced_per_layer(exported):
    network, _, output = exported
    tensors = safetensors.numpy.load_file(str(output / "model.safetensors"))
    block = network.blocks[1]
    np.testing.assert_array_equal(tensors["transformer.layer.1.ff.layer_1.weight"],
                                  block.feed_forward.layer_1.kernel.numpy().T)
    np.testing.assert_array_equal(tensors["transformer.layer.1.rel_attn.o"], block.attention.o_kernel.numpy())
    np.testing.assert_array_equal(tensors["transformer.layer.1.rel_attn.r_s_bias"],
                                  network.attention_biases.r_s_bias.numpy()[1])
    np.testing.assert_array_equal(tensors["transformer.layer.1.rel_attn.seg_embed"],
                                  network.attention_biases.seg_embed.numpy()[1])


def test_export_refuses_an_output_that_holds_an_export(exported, capsys):
    assert xlnet_cli.main(["export", "--model-dir", str(exported[1]), "--format", "huggingface",
                           "--output", str(exported[2])]) == 2
    assert "already holds an export" in capsys.readouterr().err


def test_export_refuses_a_head_size_transformers_cannot_load(tmp_path, vocab, capsys):
    write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size, d_head=4), vocab)
    assert xlnet_cli.main(["export", "--model-dir", str(tmp_path / "model"), "--format", "huggingface",
                           "--output", str(tmp_path / "hf")]) == 2
    assert "d_head 4" in capsys.readouterr().err


# ------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("bi_data, clamp_len, untie_r", [(True, -1, True), (False, 5, False), (True, 3, False)])
def test_round_trip_gives_the_same_weights_config_and_outputs(tmp_path, vocab, bi_data, clamp_len, untie_r):
    config = tiny_config(vocab.vocab_size, bi_data=bi_data, clamp_len=clamp_len, untie_r=untie_r)
    network, _ = write_model_dir(str(tmp_path / "model"), config, vocab, seed=7)
    export(tmp_path / "model", tmp_path / "hf")
    assert import_dir(tmp_path / "hf", tmp_path / "imported") == 0
    imported, head = restore_model_dir(str(tmp_path / "imported"))
    assert head is None and imported.config == network.config
    assert_same_weights(network, imported)
    expected, actual = pretraining_outputs(network, vocab), pretraining_outputs(imported, vocab)
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("task", sorted(HEADS))
def test_fine_tuned_round_trip_keeps_the_head(tmp_path, vocab, task):
    network, head = write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size), vocab, seed=5,
                                    head=HEADS[task])
    output = export(tmp_path / "model", tmp_path / "hf")
    tensors = safetensors.numpy.load_file(str(output / "model.safetensors"))
    assert {name: t.shape for name, t in tensors.items()} == head_table(vocab.vocab_size, HEADS[task].num_labels)
    assert import_dir(output, tmp_path / "imported") == 0
    imported, imported_head = restore_model_dir(str(tmp_path / "imported"))
    assert (imported_head.task, imported_head.num_labels) == (head.task, head.num_labels)
    # The head classes of transformers have no LM output layer: its bias comes back zero, unused.
    assert_same_weights(head, imported_head, skip=("xlnet/lm_bias",))
    assert not imported.lm_bias.numpy().any()
    inputs = head_inputs(vocab, task)
    np.testing.assert_allclose(imported_head(inputs).numpy(), head(inputs).numpy(), rtol=1e-6, atol=1e-6)


def test_classification_export_names_the_labels(tmp_path, vocab):
    write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size), vocab, head=HEADS["classification"])
    values = json.loads((export(tmp_path / "model", tmp_path / "hf") / "config.json").read_text())
    assert values["architectures"] == ["XLNetForSequenceClassification"]
    assert values["id2label"] == {str(i): label for i, label in enumerate(LABELS)}
    assert values["problem_type"] == "single_label_classification"
    assert import_dir(tmp_path / "hf", tmp_path / "imported") == 0
    assert json.loads((tmp_path / "imported" / "labels.json").read_text()) == list(LABELS)


def test_regression_and_multiple_choice_use_their_transformers_classes(tmp_path, vocab):
    for task, architecture in (("regression", "XLNetForSequenceClassification"),
                               ("multiple-choice", "XLNetForMultipleChoice")):
        write_model_dir(str(tmp_path / task), tiny_config(vocab.vocab_size), vocab, head=HEADS[task])
        values = json.loads((export(tmp_path / task, tmp_path / f"{task}-hf") / "config.json").read_text())
        assert values["architectures"] == [architecture]
        assert values.get("problem_type") == ("regression" if task == "regression" else None)


def test_classification_model_without_labels_is_refused_by_file_name(tmp_path, vocab, capsys):
    write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size), vocab, head=HEADS["classification"])
    (tmp_path / "model" / "labels.json").unlink()
    assert xlnet_cli.main(["export", "--model-dir", str(tmp_path / "model"), "--format", "huggingface",
                           "--output", str(tmp_path / "hf")]) == 2
    assert "is a classification model without labels.json" in capsys.readouterr().err


@pytest.fixture(scope="module")
def squad_export(tmp_path_factory, vocab):
    """A tiny fine-tuned SQuAD model directory (beam widths 3 and 2) and its huggingface export."""
    base = tmp_path_factory.mktemp("hf-squad")
    _, head = write_model_dir(str(base / "model"), tiny_config(vocab.vocab_size), vocab, seed=11, head=SQUAD)
    return head, base / "model", export(base / "model", base / "hf")


def test_squad_export_has_the_question_answering_names_shapes_and_config(squad_export, vocab):
    head, _, output = squad_export
    tensors = safetensors.numpy.load_file(str(output / "model.safetensors"))
    assert {name: t.shape for name, t in tensors.items()} == question_answering_table(vocab.vocab_size)
    assert {t.dtype for t in tensors.values()} == {np.dtype(np.float32)}
    # A fine-tuned directory records its whole-sequence configuration (no memory, bi_data off).
    expected = {**config_table(vocab), "architectures": ["XLNetForQuestionAnswering"], "start_n_top": 3,
                "end_n_top": 2, "xlnet_pretraining": {"bi_data": False, "mem_len": 0, "reuse_len": 4, "dropatt": 0.1}}
    assert json.loads((output / "config.json").read_text()) == expected
    # Keras kernels [in, out] -> torch [out, in]; the concatenated inputs keep their order.
    np.testing.assert_array_equal(tensors["end_logits.dense_0.weight"], head.end_logits.dense_0.kernel.numpy().T)
    np.testing.assert_array_equal(tensors["answer_class.dense_1.weight"],
                                  head.answer_class.dense_1.kernel.numpy().T)
    np.testing.assert_array_equal(tensors["end_logits.LayerNorm.weight"], head.end_logits.layer_norm.gamma.numpy())


def test_squad_round_trip_keeps_the_head_beam_and_log_probs(squad_export, tmp_path, vocab):
    head, _, output = squad_export
    assert import_dir(output, tmp_path / "imported") == 0
    assert ModelDirectory(str(tmp_path / "imported")).finetune_config == \
        FinetuneConfig(task="squad", start_n_top=3, end_n_top=2)
    imported, imported_head = restore_model_dir(str(tmp_path / "imported"))
    assert (imported_head.start_n_top, imported_head.end_n_top) == (3, 2)
    assert_same_weights(head, imported_head, skip=("xlnet/lm_bias",))
    assert not imported.lm_bias.numpy().any()
    inputs = squad_inputs(vocab)
    expected, actual = squad_outputs(head, inputs), squad_outputs(imported_head, inputs)
    assert sorted(actual) == sorted(expected)
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_squad_tensor_problems_are_named(squad_export, tmp_path, capsys):
    source = tmp_path / "hf"
    shutil.copytree(squad_export[2], source)

    def break_head(tensors):
        tensors["end_logits.dense_0.weight"] = np.ascontiguousarray(tensors["end_logits.dense_0.weight"].T)
        tensors["answer_class.dense_1.bias"] = np.zeros(1, np.float32)  # transformers' has no bias
        del tensors["start_logits.dense.bias"]

    rewrite_tensors(source, break_head)
    error = import_error(source, tmp_path, capsys)
    assert f"tensor end_logits.dense_0.weight has shape [{2 * D}, {D}], the config needs [{D}, {2 * D}]" in error
    assert "unexpected tensor answer_class.dense_1.bias" in error and "missing tensor start_logits.dense.bias" in error


def test_squad_config_problems_are_named(squad_export, tmp_path, capsys):
    source = tmp_path / "hf"
    shutil.copytree(squad_export[2], source)
    rewrite_config(source, end_n_top=0)
    assert "end_n_top 0 is not supported" in import_error(source, tmp_path, capsys)
    rewrite_config(source, architectures=None)
    assert 'add e.g. "architectures": ["XLNetForQuestionAnswering"]' in import_error(source, tmp_path, capsys)


def test_sharded_checkpoint_imports_like_a_single_file(tmp_path, exported, vocab):
    tensors = safetensors.numpy.load_file(str(exported[2] / "model.safetensors"))
    source = tmp_path / "sharded"
    shutil.copytree(exported[2], source)
    (source / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, shard_names in shards.items():
        safetensors.numpy.save_file({n: tensors[n] for n in shard_names}, str(source / file), metadata={"format": "pt"})
    weight_map = {name: file for file, shard_names in shards.items() for name in shard_names}
    (source / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert import_dir(source, tmp_path / "imported") == 0
    assert_same_weights(exported[0], restore_model_dir(str(tmp_path / "imported"))[0])


def test_bare_xlnet_model_without_prefix_imports(copy_of, tmp_path, exported):
    """XLNetModel.save_pretrained: no "transformer." prefix and no lm_loss; the output bias is zero."""
    def bare(tensors):
        del tensors["lm_loss.bias"]
        tensors.update({name.removeprefix("transformer."): tensors.pop(name) for name in list(tensors)})

    rewrite_tensors(copy_of, bare)
    rewrite_config(copy_of, architectures=["XLNetModel"])
    assert import_dir(copy_of, tmp_path / "imported") == 0
    imported, _ = restore_model_dir(str(tmp_path / "imported"))
    np.testing.assert_array_equal(imported.word_embedding.embeddings.numpy(),
                                  exported[0].word_embedding.embeddings.numpy())
    assert not imported.lm_bias.numpy().any()


def test_a_saved_tied_output_weight_is_accepted(copy_of, tmp_path):
    rewrite_tensors(copy_of, lambda t: t.update({"lm_loss.weight": t["transformer.word_embedding.weight"]}))
    assert import_dir(copy_of, tmp_path / "imported") == 0


def test_import_reads_the_casing_from_the_tokenizer_config(copy_of, tmp_path):
    values = json.loads((copy_of / "tokenizer_config.json").read_text())
    (copy_of / "tokenizer_config.json").write_text(json.dumps(dict(values, do_lower_case=True)))
    assert import_dir(copy_of, tmp_path / "imported") == 0
    assert json.loads((tmp_path / "imported" / "text_normalization.json").read_text()) == {"uncased": True}


@pytest.mark.parametrize("theirs, ours", [("gelu", "gelu_exact"), ("gelu_new", "gelu"), ("relu", "relu")])
def test_activation_names_map_both_ways(copy_of, tmp_path, theirs, ours):
    rewrite_config(copy_of, ff_activation=theirs)
    assert import_dir(copy_of, tmp_path / "imported") == 0
    assert restore_model_dir(str(tmp_path / "imported"))[0].config.ff_activation == ours
    values = json.loads((export(tmp_path / "imported", tmp_path / "again") / "config.json").read_text())
    assert values["ff_activation"] == theirs


def test_old_vocabulary_size_name_n_token_is_read(copy_of, tmp_path, vocab):
    values = json.loads((copy_of / "config.json").read_text())
    values["n_token"] = values.pop("vocab_size")
    (copy_of / "config.json").write_text(json.dumps(values))
    assert import_dir(copy_of, tmp_path / "imported") == 0
    assert restore_model_dir(str(tmp_path / "imported"))[0].config.vocab_size == vocab.vocab_size


def test_flags_override_the_recorded_settings(copy_of, tmp_path):
    assert import_dir(copy_of, tmp_path / "imported", "--mem-len", "9", "--no-bi-data", "--clamp-len", "4") == 0
    imported, _ = restore_model_dir(str(tmp_path / "imported"))
    assert (imported.config.mem_len, imported.config.bi_data, imported.config.clamp_len) == (9, False, 4)


def test_export_to_and_import_from_a_bucket(exported, gcs_prefix):
    remote = posixpath.join(gcs_prefix, "hf")
    assert xlnet_cli.main(["export", "--model-dir", str(exported[1]), "--format", "huggingface",
                           "--output", remote]) == 0
    assert sorted(tf.io.gfile.listdir(remote)) == sorted(path.name for path in exported[2].iterdir())
    output = posixpath.join(gcs_prefix, "model")
    assert import_dir(remote, output) == 0
    assert_same_weights(exported[0], restore_model_dir(output)[0])


# ------------------------------------------------------------------------------- bad inputs
def test_missing_tensor_is_named(copy_of, tmp_path, capsys):
    rewrite_tensors(copy_of, lambda t: t.pop("transformer.layer.1.rel_attn.r"))
    assert "missing tensor transformer.layer.1.rel_attn.r" in import_error(copy_of, tmp_path, capsys)


def test_extra_tensor_is_named(copy_of, tmp_path, capsys):
    extra = "transformer.layer.2.rel_attn.q"  # a third layer in a two-layer model
    rewrite_tensors(copy_of, lambda t: t.update({extra: t["transformer.layer.0.rel_attn.q"]}))
    assert "unexpected tensor transformer.layer.2.rel_attn.q" in import_error(copy_of, tmp_path, capsys)


def test_wrong_shape_is_named(copy_of, tmp_path, capsys):
    wrong = np.zeros((D, DI), np.float32)
    rewrite_tensors(copy_of, lambda t: t.update({"transformer.layer.0.ff.layer_1.weight": wrong}))
    assert (f"tensor transformer.layer.0.ff.layer_1.weight has shape [{D}, {DI}], the config needs [{DI}, {D}]"
            in import_error(copy_of, tmp_path, capsys))


def test_untied_output_weight_is_refused(copy_of, tmp_path, capsys):
    rewrite_tensors(copy_of, lambda t: t.update({"lm_loss.weight": t["transformer.word_embedding.weight"] + 1}))
    assert "lm_loss.weight differs" in import_error(copy_of, tmp_path, capsys)


def test_missing_spiece_model_is_named(copy_of, tmp_path, capsys):
    (copy_of / "spiece.model").unlink()
    assert "lacks spiece.model" in import_error(copy_of, tmp_path, capsys)


def test_vocab_size_mismatch_is_named(copy_of, tmp_path, capsys):
    rewrite_config(copy_of, vocab_size=32000)
    assert "has 8000 pieces but" in import_error(copy_of, tmp_path, capsys)


@pytest.mark.parametrize("field, value, message", [
    ("attn_type", "uni", "attn_type 'uni'"), ("same_length", True, "same_length true"),
    ("ff_activation", "swish", "ff_activation 'swish'"), ("layer_norm_eps", 1e-5, "layer_norm_eps 1e-05"),
    ("model_type", "bert", "model_type 'bert'"), ("architectures", ["XLNetForQuestionAnsweringSimple"],
     "XLNetForQuestionAnsweringSimple is not supported: its qa_outputs layer"),
    ("summary_type", "mean", "summary_type 'mean'")])
def test_unsupported_config_value_is_named(copy_of, tmp_path, capsys, field, value, message):
    rewrite_config(copy_of, **{field: value})
    if field == "summary_type":
        rewrite_config(copy_of, architectures=["XLNetForMultipleChoice"])
    assert message in import_error(copy_of, tmp_path, capsys)


@pytest.mark.parametrize("field, value, message", [
    ("d_model", "abc", 'd_model: expected an integer, got "abc"'),
    ("vocab_size", None, "vocab_size: expected an integer, got null"),
    ("layer_norm_eps", "x", 'layer_norm_eps: expected a finite number, got "x"'),
    ("clamp_len", "inf", 'clamp_len: expected an integer, got "inf"'),
    ("n_head", 2.5, "n_head: expected an integer, got 2.5"),
    ("dropout", True, "dropout: expected a finite number, got true"),
    ("n_token", [1], "n_token: expected an integer, got [1]")])
def test_a_number_of_another_type_is_named_with_the_file_and_the_type_expected(copy_of, tmp_path, capsys, field,
                                                                                value, message):
    rewrite_config(copy_of, **{field: value})
    error = import_error(copy_of, tmp_path, capsys)
    assert error == f"xlnet import-checkpoint: error: {copy_of / 'config.json'}: {message}\n"


def test_pytorch_bin_only_directory_says_how_to_get_safetensors(copy_of, tmp_path, capsys):
    (copy_of / "model.safetensors").rename(copy_of / "pytorch_model.bin")
    error = import_error(copy_of, tmp_path, capsys)
    assert "holds pytorch_model.bin but no model.safetensors" in error and "save_pretrained" in error


def test_truncated_safetensors_is_named_as_truncated_or_damaged_exit_3(copy_of, tmp_path, capsys):
    weights = copy_of / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:len(data) // 2])  # a download cut short
    error = import_error(copy_of, tmp_path, capsys, status=3)
    assert f"{weights} is truncated or damaged ({len(data) // 2} bytes" in error
    assert "bfloat16" not in error and len(error.strip().splitlines()) == 1


def test_bfloat16_safetensors_asks_for_a_float32_copy(copy_of, tmp_path, capsys):
    import safetensors.tensorflow

    tensors = safetensors.numpy.load_file(str(copy_of / "model.safetensors"))
    (copy_of / "model.safetensors").write_bytes(safetensors.tensorflow.save(
        {name: tf.cast(value, tf.bfloat16) for name, value in tensors.items()}, metadata={"format": "pt"}))
    error = import_error(copy_of, tmp_path, capsys)
    assert f"{copy_of / 'model.safetensors'} holds bfloat16 tensors" in error
    assert "float32 copy" in error and "truncated" not in error


def test_missing_config_is_named(copy_of, tmp_path, capsys):
    (copy_of / "config.json").unlink()
    assert "config.json: file not found" in import_error(copy_of, tmp_path, capsys)


def test_mixing_huggingface_and_release_flags_is_refused(exported, tmp_path, capsys):
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", str(exported[2]), "--spm", "x",
                           "--output", str(tmp_path / "m")]) == 2
    assert "drop --spm" in capsys.readouterr().err


def test_an_incomplete_release_names_the_missing_flags(tmp_path, capsys):
    assert xlnet_cli.main(["import-checkpoint", "--checkpoint", "x/xlnet_model.ckpt",
                           "--output", str(tmp_path / "m")]) == 2
    assert "needs --config, --spm as well (or pass --huggingface DIR)" in capsys.readouterr().err


def test_an_output_with_checkpoints_is_refused(exported, capsys):
    assert import_dir(exported[2], exported[1]) == 2
    assert "already holds checkpoints" in capsys.readouterr().err


def test_reader_checks_every_tensor_before_assigning(copy_of, vocab):
    """The Python API: a bad tensor leaves the target network untouched."""
    from trainer.models.network import build_network

    model = read_huggingface_directory(str(copy_of))
    model.tensors.pop("lm_loss.bias")  # the reader refuses a directory without it; a caller's tensors may lack it
    network = build_network(model.config)
    before = [w.numpy().copy() for w in network.trainable_weights]
    with pytest.raises(HuggingFaceFormatError, match="missing tensor lm_loss.bias"):
        model.load_into(network)
    for old, weight in zip(before, network.trainable_weights):
        np.testing.assert_array_equal(old, weight.numpy())


def test_more_layers_in_the_config_than_in_the_weights_is_refused_before_building(copy_of, tmp_path, capsys):
    rewrite_config(copy_of, n_layer=100000)  # building it would take minutes
    started = time.monotonic()
    error = import_error(copy_of, tmp_path, capsys)
    assert error == (f"xlnet import-checkpoint: error: {copy_of}/config.json: n_layer 100000, but its weights hold "
                     "2 layers (transformer.layer.0 to transformer.layer.1); correct n_layer\n")
    assert time.monotonic() - started < 30


def test_a_larger_d_model_in_the_config_than_in_the_weights_is_refused_before_building(copy_of, tmp_path, capsys):
    rewrite_config(copy_of, d_model=D * 1024, d_head=D * 1024 // 2, n_head=2)
    error = import_error(copy_of, tmp_path, capsys)
    assert error == (f"xlnet import-checkpoint: error: {copy_of}/config.json: vocab_size and d_model make "
                     f"transformer.word_embedding.weight [8000, {D * 1024}], but its weights hold [8000, {D}]; "
                     "correct vocab_size and d_model\n")


def test_an_import_to_an_output_that_is_a_file_exits_2_naming_the_flag(exported, tmp_path, capsys):
    (tmp_path / "output").write_text("a file")
    assert import_dir(exported[2], tmp_path / "output") == 2
    assert capsys.readouterr().err == (f"xlnet import-checkpoint: error: --output {tmp_path}/output cannot be "
                                       "written: it is a file, not a directory\n")
    assert (tmp_path / "output").read_text() == "a file"


def test_an_import_to_a_read_only_output_exits_2_naming_the_flag_and_writes_nothing(exported, tmp_path, capsys):
    with read_only_directory(tmp_path) as view:
        assert import_dir(exported[2], view / "model") == 2
        assert capsys.readouterr().err == (f"xlnet import-checkpoint: error: --output {view}/model cannot be written: "
                                           f"{view}/model/model_config.json: Read-only file system\n")
        assert list((view / "model").iterdir()) == []
