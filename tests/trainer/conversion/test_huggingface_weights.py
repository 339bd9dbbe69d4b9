"""load_huggingface_network (trainer/conversion/huggingface_weights.py): a Hugging Face directory written by
our export loads into a network on any Keras backend with the same variables and logits, and a bad directory
gets the import command's named errors. The JAX side runs in a fresh process (KERAS_BACKEND=jax), fed and
read through .npz files, against the TensorFlow result computed here."""
from __future__ import annotations

import json
import posixpath
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from trainer.conversion.huggingface_weights import (
    HuggingFaceFormatError,
    load_huggingface_network,
    read_huggingface_config,
    read_huggingface_weights,
)

from support.backends import run_on_backend

# support.backends imports this file under JAX (tensorflow_loaded, outputs_under_jax): what imports TensorFlow
# (the export path, the tiny models of support.interop_models) is imported inside the TensorFlow side's functions.
REPO = Path(__file__).resolve().parents[3]
# A tiny model trained by `xlnet train` (TensorFlow) by tests/fixtures/make_legacy_model_dirs.sh.
TRAINED = REPO / "tests" / "fixtures" / "legacy" / "pretrained"


def write_export(directory: Path, vocab, head=None, **changes):
    """A tiny random network (or a fine-tuned one with ``head``) written by the export path; returns
    (network, head model or None)."""
    from support.interop_models import tiny_config, write_model_dir
    from trainer.conversion.huggingface_format import write_huggingface_directory

    config = tiny_config(vocab.vocab_size, **changes)
    network, head_model = write_model_dir(str(directory / "model"), config, vocab, seed=3, head=head)
    write_huggingface_directory(str(directory / "hf"), network, network.config, vocab.special_ids.to_dict(),
                                vocab.model_proto, uncased=False, head=head_model, head_spec=head)
    return network, head_model


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab):
    base = tmp_path_factory.mktemp("hf-weights")
    network, _ = write_export(base, vocab)
    return network, base / "hf"


@pytest.fixture
def copy_of(exported, tmp_path):
    """A writable copy of the export to break."""
    shutil.copytree(exported[1], tmp_path / "hf")
    return tmp_path / "hf"


def rewrite_tensors(directory: Path, change) -> None:
    tensors = safetensors.numpy.load_file(str(directory / "model.safetensors"))
    change(tensors)
    safetensors.numpy.save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def load_error(directory) -> str:
    with pytest.raises(HuggingFaceFormatError) as raised:
        load_huggingface_network(str(directory))
    return str(raised.value)


# -------------------------------------------------------------------------- the TensorFlow backend
def test_loaded_network_has_the_same_config_variables_and_outputs(exported, vocab):
    from support.interop_models import assert_same_weights, pretraining_outputs

    network, directory = exported
    loaded = load_huggingface_network(str(directory), pretraining=True)
    assert loaded.config == network.config
    assert_same_weights(network, loaded)
    expected, actual = pretraining_outputs(network, vocab), pretraining_outputs(loaded, vocab)
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def test_tied_biases_come_back_tied(tmp_path, vocab):
    from support.interop_models import assert_same_weights

    network, _ = write_export(tmp_path, vocab, untie_r=False)
    loaded = load_huggingface_network(str(tmp_path / "hf"))
    assert loaded.config.untie_r is False and loaded.config == network.config.replace(bi_data=False)
    assert_same_weights(network, loaded)


@pytest.mark.parametrize("untie_r", [True, False])
def test_the_config_read_alone_is_the_one_read_with_the_weights(tmp_path, vocab, untie_r):
    write_export(tmp_path, vocab, untie_r=untie_r)
    config = read_huggingface_config(str(tmp_path / "hf"))
    assert config.untie_r is untie_r and config == read_huggingface_weights(str(tmp_path / "hf")).config


def test_the_config_read_alone_reads_the_header_and_the_attention_biases_only(exported, monkeypatch):
    from trainer.conversion import safetensors_files

    read, real = [], safetensors_files.read_range
    monkeypatch.setattr(safetensors_files, "read_range", lambda *args: read.append(args[2]) or real(*args))
    read_huggingface_config(str(exported[1]))
    weights = exported[1] / "model.safetensors"
    header_bytes = int.from_bytes(weights.read_bytes()[:8], "little")
    header = json.loads(weights.read_bytes()[8:8 + header_bytes])
    biases = [end - begin for name, entry in header.items() if name.endswith(("r_w_bias", "r_r_bias", "r_s_bias"))
              for begin, end in [entry["data_offsets"]]]
    assert len(biases) == 3 * exported[0].config.n_layer
    assert sorted(read) == sorted([8, header_bytes] + biases)


def test_a_fine_tuned_directory_loads_its_encoder_with_a_zero_output_bias(tmp_path, vocab):
    from support.interop_models import HEADS, assert_same_weights

    network, _ = write_export(tmp_path, vocab, head=HEADS["classification"])
    loaded = load_huggingface_network(str(tmp_path / "hf"))
    assert_same_weights(network, loaded, skip=("xlnet/lm_bias",))
    assert not loaded.lm_bias.numpy().any()


def test_dtype_and_remat_reach_the_network(exported):
    from support.interop_models import assert_same_weights

    loaded = load_huggingface_network(str(exported[1]), dtype="mixed_bfloat16", remat="full")
    assert loaded.dtype_policy.name == "mixed_bfloat16" and loaded.remat == "full"
    assert_same_weights(exported[0], loaded)


@pytest.mark.parametrize("head_name", [None, "bare", "classification", "regression", "multiple-choice", "squad"])
def test_the_shapes_checked_before_building_are_the_built_models(vocab, head_name):
    """expected_shapes (from the config alone, before anything is built) and the bindings of the built network and
    head: the same names and shapes, so that the check before building is the check after it."""
    from support.interop_models import HEADS, SQUAD, tiny_config
    from trainer.conversion.huggingface_weights import expected_shapes, model_bindings
    from trainer.models.heads import build_head
    from trainer.models.network import build_network

    config = tiny_config(vocab.vocab_size, untie_r=head_name != "bare")
    spec = {"squad": SQUAD, **HEADS}.get(head_name)
    network = build_network(config)
    head = None if spec is None else build_head(spec, network)
    for prefix in ("transformer.", ""):
        built = {binding.name: binding.shape
                 for binding in model_bindings(network, head, prefix, lm_head=head_name is None)}
        assert expected_shapes(config, spec, prefix, lm_head=head_name is None) == built


# ------------------------------------------------------------------------ inference unless asked
def test_a_loaded_network_is_for_inference_with_bi_data_off_whatever_the_pretraining_block_says(exported):
    network, directory = exported
    values = json.loads((directory / "config.json").read_text())
    assert (values["bi_data"], values["xlnet_pretraining"]["bi_data"]) == (False, True)  # as the export writes
    assert load_huggingface_network(str(directory)).config == network.config.replace(bi_data=False)


def test_a_loaded_network_encodes_a_batch_of_one_and_identical_rows_identically(exported, vocab):
    from support.interop_models import text_inputs

    loaded = load_huggingface_network(str(exported[1]))
    ids, segments = text_inputs(vocab, batch=1)
    alone = np.asarray(loaded.encode(ids, segments)[0])
    twice = np.asarray(loaded.encode(np.repeat(ids, 2, axis=0), np.repeat(segments, 2, axis=0))[0])
    np.testing.assert_array_equal(twice[0], twice[1])
    np.testing.assert_allclose(twice[0], alone[0], rtol=0, atol=1e-6)


def test_pretraining_true_gives_the_recorded_pretraining_configuration(exported):
    loaded = load_huggingface_network(str(exported[1]), pretraining=True)
    assert loaded.config.bi_data is True and loaded.config == exported[0].config


# ---------------------------------------------------------------------------------- bad input
def test_a_missing_directory_is_named(tmp_path):
    assert f"{str(tmp_path / 'none')!r} is not a directory" in load_error(tmp_path / "none")


def test_a_missing_config_is_named(copy_of):
    (copy_of / "config.json").unlink()
    assert "config.json: file not found (a Hugging Face model directory has config.json)" in load_error(copy_of)


def test_missing_weights_are_named(copy_of):
    (copy_of / "model.safetensors").unlink()
    assert "has neither model.safetensors nor model.safetensors.index.json" in load_error(copy_of)


def test_missing_extra_and_mis_shaped_tensors_are_named_together(copy_of):
    def damage(tensors):
        del tensors["transformer.layer.1.rel_attn.r"]
        tensors["transformer.layer.0.extra"] = np.zeros(2, np.float32)
        tensors["transformer.layer.0.ff.layer_1.bias"] = np.zeros(3, np.float32)

    rewrite_tensors(copy_of, damage)
    error = load_error(copy_of)
    assert "does not fit the model" in error and "missing tensor transformer.layer.1.rel_attn.r" in error
    assert "unexpected tensor transformer.layer.0.extra" in error
    assert "tensor transformer.layer.0.ff.layer_1.bias has shape [3], the config needs [24]" in error


def test_more_layers_in_the_config_than_in_the_weights_is_refused_before_building(copy_of):
    values = json.loads((copy_of / "config.json").read_text())
    (copy_of / "config.json").write_text(json.dumps({**values, "n_layer": 40}))
    assert "n_layer 40, but its weights hold 2 layers" in load_error(copy_of)


def test_a_config_that_is_not_xlnet_is_named(copy_of):
    values = json.loads((copy_of / "config.json").read_text())
    (copy_of / "config.json").write_text(json.dumps({**values, "model_type": "bert"}))
    assert "model_type 'bert' is not 'xlnet'" in load_error(copy_of)


def test_a_bucket_directory_loads_through_tensorflows_file_system(exported, gcs_prefix):
    import tensorflow as tf

    from support.interop_models import assert_same_weights

    remote = posixpath.join(gcs_prefix, "hf")
    for path in exported[1].iterdir():
        tf.io.gfile.copy(str(path), posixpath.join(remote, path.name))
    assert_same_weights(exported[0], load_huggingface_network(remote))


def test_a_bucket_path_without_tensorflow_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # find_spec: not installed
    error = load_error("gs://bucket/xlnet-hf")
    assert error.startswith("gs://bucket/xlnet-hf is not a local path") and "TensorFlow is not installed" in error


# ----------------------------------------------------------------------------------- on JAX
def tensorflow_loaded(inputs: dict) -> dict:
    """Under JAX: whether this file's imports (the portable module's among them) loaded TensorFlow."""
    return {"tensorflow_loaded": np.array("tensorflow" in sys.modules)}


@pytest.mark.slow  # a fresh process importing JAX (about 6 s)
def test_the_portable_module_imports_without_tensorflow_under_jax():
    assert not run_on_backend(tensorflow_loaded, {})["tensorflow_loaded"]


def network_outputs(network, inputs: dict) -> dict:
    """Two-stream logits with memory and a permutation mask, the new memory and the content stream (the
    outputs of support.interop_models.pretraining_outputs), on any backend."""
    mems = [inputs[f"mem_{i}"] for i in range(network.config.n_layer)]
    logits, new_mems = network(inputs["ids"], inputs["segments"], inputs["perm_mask"], inputs["target_mapping"], mems)
    hidden, _ = network.encode(inputs["ids"], inputs["segments"])
    return {"logits": logits, "hidden": hidden, **{f"new_mems_{i}": mem for i, mem in enumerate(new_mems)}}


def outputs_under_jax(inputs: dict, directory: str) -> dict:
    """Under JAX: the export loaded, its outputs, and whether TensorFlow was loaded on the way."""
    import keras

    assert keras.backend.backend() == "jax"
    outputs = network_outputs(load_huggingface_network(directory), inputs)
    return {**outputs, "tensorflow_loaded": np.array("tensorflow" in sys.modules)}


def jax_inputs(vocab, config, seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs of support.interop_models.pretraining_outputs, as arrays."""
    from support.interop_models import text_inputs

    ids, segments = text_inputs(vocab)
    rng = np.random.default_rng(seed)
    batch, length = ids.shape
    inputs = {"ids": ids, "segments": segments,
              "perm_mask": (rng.random([batch, length, length]) < 0.4).astype(np.float32),
              "target_mapping": np.eye(length, dtype=np.float32)[[[1, 5, 8]] * batch]}
    inputs.update({f"mem_{i}": rng.normal(0, 1, [batch, 3, config.d_model]).astype(np.float32)
                   for i in range(config.n_layer)})
    return inputs


@pytest.mark.slow  # the export, then a fresh JAX process (about 45 s on 2 busy cores)
def test_a_model_trained_by_xlnet_train_loads_under_jax_with_the_same_logits(tmp_path):
    """`xlnet export --format huggingface` of a model `xlnet train` wrote, loaded on TensorFlow here and on JAX
    in a fresh process (without TensorFlow): the same logits, content states and new memory to 1e-5."""
    import xlnet_cli
    from pipeline.vocab import load_vocab

    assert xlnet_cli.main(["export", "--model-dir", str(TRAINED), "--format", "huggingface",
                           "--output", str(tmp_path / "hf")]) == 0
    network = load_huggingface_network(str(tmp_path / "hf"))
    inputs = jax_inputs(load_vocab(str(TRAINED / "spiece.model")), network.config)
    expected = {name: value.numpy() for name, value in network_outputs(network, inputs).items()}
    actual = run_on_backend(outputs_under_jax, inputs, directory=str(tmp_path / "hf"))
    assert not actual.pop("tensorflow_loaded")  # NumPy and safetensors only, and the network in keras.ops
    assert sorted(actual) == sorted(expected)
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)
