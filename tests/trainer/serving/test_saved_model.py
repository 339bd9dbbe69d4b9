"""`xlnet export`: a SavedModel that serves raw text and loads with only tensorflow + tensorflow_text."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

import xlnet_cli
from trainer.models.config import model_preset
from trainer.models.network import build_network
from trainer.runtime.restore import RestoreError
from trainer.serving.publishing import abandon_export
from trainer.serving.saved_model import ExportConfig, ExportError, XLNetServingModule, export_saved_model, length_buckets
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import corpus_lines

# One xdist worker runs the module's tests, so that its module fixtures (exports) are built once
pytestmark = pytest.mark.xdist_group("pretrained_export")


MAX_LENGTH = 32
TOP_K = 4
SENTENCES = [
    "20th-century classical music is Western art music that was written between 1901 and 2000, inclusive.",
    "Neoclassicism and expressionism came mostly after 1900.",
    "Jazz and ethnic folk music became important influences on many composers during this century.",
    "",
]
SHORT_TEXT = "Jazz came mostly after 1900."  # 12 positions with <sep> <cls>: fits the smallest length bucket
MASKED = [
    "The film stars Keir <mask>, Gary Lockwood and William <mask>.",
    "Jazz and ethnic folk <mask> became important influences.",
    "There is no mask in this sentence.",
]


@pytest.fixture(scope="module")
def sp_proto(vocab) -> bytes:
    return vocab.model_proto


@pytest.fixture(scope="module")
def special_ids(vocab) -> dict[str, int]:
    return vocab.special_ids.to_dict()


def write_model_dir(path: Path, sp_proto: bytes, special_ids: dict[str, int]) -> Path:
    """A model directory (trainer/runtime/model_dir.py) holding the tiny preset with random weights (seeded)."""
    path.mkdir(parents=True)
    (path / "spiece.model").write_bytes(sp_proto)
    (path / "special_ids.json").write_text(json.dumps(special_ids))
    config = model_preset("tiny").replace(vocab_size=spm.SentencePieceProcessor(model_proto=sp_proto).vocab_size())
    (path / "model_config.json").write_text(json.dumps(config.to_dict()))
    tf.keras.utils.set_random_seed(1)
    network = build_network(config)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=network), str(path / "checkpoints"), 1).save()
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, sp_proto, special_ids) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model") / "tiny", sp_proto, special_ids)


@pytest.fixture(scope="module")
def export_base(tmp_path_factory, model_dir) -> Path:
    """The export made through the real CLI entry point."""
    base = tmp_path_factory.mktemp("serving") / "xlnet"
    code = xlnet_cli.main(["export", "--model-dir", str(model_dir), "--output", str(base),
                           "--max-length", str(MAX_LENGTH), "--top-k", str(TOP_K)])
    assert code == 0
    return base


@pytest.fixture(scope="module")
def loaded(export_base):
    return tf.saved_model.load(str(export_base / "1"))


@pytest.fixture(scope="module")
def reference(model_dir, sp_proto, special_ids):
    """The in-process model the export must reproduce: restored network + in-graph encoder."""
    from trainer.runtime.restore import open_model_directory, restore_model

    directory = open_model_directory(model_dir)
    network = restore_model(directory).network
    encoder = XLNetTextEncoder(sp_proto, special_ids, MAX_LENGTH, uncased=False)
    return network, encoder


def call(loaded, signature: str, **inputs) -> dict[str, np.ndarray]:
    tensors = {name: tf.constant(value) for name, value in inputs.items()}
    return {name: value.numpy() for name, value in loaded.signatures[signature](**tensors).items()}


# --------------------------------------------------------------------------- layout on disk
def test_export_writes_numbered_version_with_vocabulary_and_configs(export_base, sp_proto):
    version = export_base / "1"
    assert (version / "saved_model.pb").is_file() and (version / "variables").is_dir()
    assert (version / "assets" / "spiece.model").read_bytes() == sp_proto
    exported = json.loads((version / "assets" / "export_config.json").read_text())
    assert (exported["max_length"], exported["top_k"], exported["uncased"]) == (MAX_LENGTH, TOP_K, False)
    assert json.loads((version / "assets" / "model_config.json").read_text())["d_model"] == 128
    assert sorted(p.name for p in export_base.iterdir()) == ["1"]  # no staging directory left behind


def test_export_has_the_documented_signatures(loaded):
    assert set(loaded.signatures) == {"serving_default", "encode", "encode_text", "encode_text_pair",
                                      "predict_masked", "score", "score_in_context", "generate"}


@pytest.mark.slow  # 18 s: a whole export; the interrupted-export tests of the command cover the handler
def test_abandoning_a_finished_export_keeps_its_version_and_names_it(tmp_path, model_dir):
    """What a signal arriving after the export completed reports (trainer/commands/export.py)."""
    target = export_saved_model(model_dir, tmp_path / "serving", ExportConfig(max_length=16, top_k=TOP_K))
    assert abandon_export() == target
    assert (Path(target) / "saved_model.pb").is_file()
    assert sorted(path.name for path in (tmp_path / "serving").iterdir()) == ["1"]


def test_export_refuses_to_overwrite_an_existing_version(model_dir, export_base):
    with pytest.raises(ExportError, match="already holds version 1"):
        export_saved_model(model_dir, export_base, ExportConfig(max_length=MAX_LENGTH), version=1)


def test_export_restores_every_network_weight_from_the_checkpoint(reference, model_dir):
    network, _ = reference
    reader = tf.train.load_checkpoint(str(model_dir / "checkpoints"))
    saved = [name for name in reader.get_variable_to_shape_map() if name.startswith("model/")]
    assert len(saved) == len(network.weights)
    np.testing.assert_allclose(sorted(float(np.sum(reader.get_tensor(name))) for name in saved),
                               sorted(float(np.sum(weight.numpy())) for weight in network.weights), rtol=1e-6)


# ---------------------------------------------------------------- fresh process round trip
FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # registers the SentencePiece ops
    export_dir, texts, pair_b, masked, out = sys.argv[1], *map(json.loads, sys.argv[2:5]), sys.argv[5]
    model = tf.saved_model.load(export_dir)
    results = {}
    for prefix, name, inputs in (("text", "encode_text", {"text": texts}),
                                 ("pair", "encode_text_pair", {"text": texts, "text_b": pair_b}),
                                 ("masked", "predict_masked", {"text": masked})):
        for key, value in model.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()}).items():
            results[prefix + "/" + key] = value.numpy()
    ids = {k: tf.constant(results["text/" + k]) for k in ("input_ids", "segment_ids", "input_mask")}
    for key, value in model.signatures["serving_default"](**ids).items():
        results["ids/" + key] = value.numpy()
    project = sorted(m for m in sys.modules if m.split(".")[0] in ("trainer", "pipeline", "tfrecords", "xlnet_cli"))
    np.savez(out, project_modules=np.array(project, dtype=object), **results)
""")


@pytest.fixture(scope="module")
def fresh(export_base, tmp_path_factory) -> dict[str, np.ndarray]:
    """Outputs of the export loaded in a new interpreter that imports only tensorflow + tensorflow_text."""
    out = tmp_path_factory.mktemp("fresh") / "outputs.npz"
    pair_b = ["It was a landmark work.", "The term was first applied in 1946.", "", "Hello."]
    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(export_base / "1"), json.dumps(SENTENCES),
                          json.dumps(pair_b), json.dumps(MASKED), str(out)],
                         cwd=tmp_path_factory.mktemp("cwd"), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    with np.load(out, allow_pickle=True) as data:
        return {key: data[key] for key in data.files} | {"pair_b": pair_b}


def test_fresh_process_needs_no_project_code(fresh):
    assert fresh["project_modules"].tolist() == []


def test_fresh_process_encode_text_equals_in_process_network(fresh, reference):
    network, encoder = reference
    inputs = encoder.encode(tf.constant(SENTENCES))
    hidden, _ = network.encode(inputs["input_ids"], inputs["segment_ids"], input_mask=inputs["input_mask"])
    np.testing.assert_array_equal(fresh["text/input_ids"], inputs["input_ids"].numpy())
    np.testing.assert_allclose(fresh["text/sequence_output"], hidden.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(fresh["text/pooled_output"], hidden.numpy()[:, -1], atol=1e-5, rtol=0)


def test_fresh_process_encode_text_pair_equals_in_process_network(fresh, reference):
    network, encoder = reference
    inputs = encoder.encode(tf.constant(SENTENCES), tf.constant(fresh["pair_b"]))
    hidden, _ = network.encode(inputs["input_ids"], inputs["segment_ids"], input_mask=inputs["input_mask"])
    np.testing.assert_array_equal(fresh["pair/segment_ids"], inputs["segment_ids"].numpy())
    np.testing.assert_allclose(fresh["pair/sequence_output"], hidden.numpy(), atol=1e-5, rtol=0)


def test_fresh_process_encode_on_ids_equals_encode_text(fresh):
    np.testing.assert_allclose(fresh["ids/sequence_output"], fresh["text/sequence_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(fresh["ids/pooled_output"], fresh["text/pooled_output"], atol=1e-5, rtol=0)


def test_fresh_process_predict_masked_equals_query_stream_with_masks_hidden_from_everyone(fresh, reference):
    """Every mask is a target and perm_mask[i, j] = 1 exactly where j is a mask (the model API's own form)."""
    network, encoder = reference
    inputs = encoder.encode_masked(tf.constant(MASKED))
    is_masked = inputs["is_masked"].numpy()
    perm_mask = np.broadcast_to(is_masked[:, None, :], (len(MASKED), MAX_LENGTH, MAX_LENGTH)).astype(np.float32)
    most = int(is_masked.sum(axis=1).max())
    target_mapping = np.zeros((len(MASKED), most, MAX_LENGTH), np.float32)
    for row, positions in enumerate(np.nonzero(is_masked[b])[0] for b in range(len(MASKED))):
        target_mapping[row, np.arange(len(positions)), positions] = 1.0
    logits, _ = network(inputs["input_ids"], inputs["segment_ids"], tf.constant(perm_mask),
                        target_mapping=tf.constant(target_mapping), input_mask=inputs["input_mask"])
    probabilities = tf.nn.softmax(logits, axis=-1).numpy()
    assert fresh["masked/num_masks"].tolist() == is_masked.sum(axis=1).tolist() == [2, 1, 0]
    for row in range(len(MASKED)):
        for slot in range(int(is_masked[row].sum())):
            expected_top = np.sort(probabilities[row, slot])[::-1][:TOP_K]
            got_ids = fresh["masked/top_k_ids"][row, slot]
            np.testing.assert_allclose(fresh["masked/top_k_probabilities"][row, slot], expected_top, atol=1e-5)
            np.testing.assert_allclose(probabilities[row, slot, got_ids], expected_top, atol=1e-5)


# ------------------------------------------------------------------ behaviour of the served model
def test_pooled_output_is_the_state_of_cls_in_the_last_position(loaded, special_ids):
    out = call(loaded, "encode_text", text=SENTENCES)
    assert (out["input_ids"][:, -1] == special_ids["cls"]).all()
    np.testing.assert_array_equal(out["pooled_output"], out["sequence_output"][:, -1])


def test_batch_of_mixed_lengths_gives_each_text_its_own_result(loaded):
    batch = call(loaded, "encode_text", text=SENTENCES)
    for row, text in enumerate(SENTENCES):
        single = call(loaded, "encode_text", text=[text])
        np.testing.assert_allclose(batch["pooled_output"][row], single["pooled_output"][0], atol=1e-5, rtol=0)
        real = batch["input_mask"][row] == 1
        np.testing.assert_allclose(batch["sequence_output"][row][real], single["sequence_output"][0][real],
                                   atol=1e-5, rtol=0)


def test_empty_string_is_encoded_as_sep_cls(loaded, special_ids):
    out = call(loaded, "encode_text", text=[""])
    assert out["input_mask"][0].sum() == 2
    assert out["input_ids"][0, -2:].tolist() == [special_ids["sep"], special_ids["cls"]]
    assert np.isfinite(out["pooled_output"]).all()


def test_text_longer_than_max_length_is_truncated_from_the_right(loaded, special_ids, sp_proto):
    text = " ".join(corpus_lines(12))
    out = call(loaded, "encode_text", text=[text])
    pieces = spm.SentencePieceProcessor(model_proto=sp_proto).encode(text)
    assert len(pieces) > MAX_LENGTH
    assert out["input_ids"][0].tolist() == pieces[:MAX_LENGTH - 2] + [special_ids["sep"], special_ids["cls"]]


def test_predict_masked_returns_top_k_pieces_sorted_by_probability(loaded, sp_proto):
    out = call(loaded, "predict_masked", text=MASKED[:1])
    processor = spm.SentencePieceProcessor(model_proto=sp_proto)
    assert out["top_k_ids"].shape == (1, 2, TOP_K)
    probabilities = out["top_k_probabilities"][0]
    assert (np.diff(probabilities, axis=-1) <= 0).all() and (probabilities > 0).all()
    assert [[t.decode() for t in row] for row in out["top_k_tokens"][0]] == \
        [[processor.id_to_piece(int(i)) for i in row] for row in out["top_k_ids"][0]]


def test_predict_masked_pads_rows_beyond_a_texts_own_masks(loaded):
    out = call(loaded, "predict_masked", text=MASKED)
    assert out["num_masks"].tolist() == [2, 1, 0]
    assert out["mask_positions"][1, 1] == -1 and (out["mask_positions"][2] == -1).all()
    assert (out["top_k_ids"][2] == -1).all() and (out["top_k_probabilities"][2] == 0).all()
    assert (out["top_k_tokens"][2] == b"").all()


def test_predict_masked_without_any_mask_returns_zero_masks_and_no_rows(loaded):
    out = call(loaded, "predict_masked", text=["No mask here.", ""])
    assert out["num_masks"].tolist() == [0, 0]
    assert out["top_k_ids"].shape == (2, 0, TOP_K) and out["mask_positions"].shape == (2, 0)


@pytest.mark.parametrize("text", ["", "   "])
def test_predict_masked_of_an_empty_or_blank_text_gives_zero_masks(loaded, text):
    out = call(loaded, "predict_masked", text=[text])
    assert out["num_masks"].tolist() == [0]
    assert out["mask_positions"].shape == (1, 0)
    for name in ("top_k_ids", "top_k_tokens", "top_k_probabilities"):
        assert out[name].shape == (1, 0, TOP_K), name


@pytest.mark.parametrize("text, masks", [("<mask>", 1), ("<mask><mask>", 2)])
def test_predict_masked_of_a_text_of_only_masks_predicts_every_mask(loaded, sp_proto, text, masks):
    out = call(loaded, "predict_masked", text=[text])
    processor = spm.SentencePieceProcessor(model_proto=sp_proto)
    assert out["num_masks"].tolist() == [masks]
    # the masks, then <sep> and <cls> in the last two positions
    assert out["mask_positions"].tolist() == [list(range(MAX_LENGTH - 2 - masks, MAX_LENGTH - 2))]
    assert out["top_k_ids"].shape == (1, masks, TOP_K)
    ids = out["top_k_ids"][0]
    assert ((ids >= 0) & (ids < processor.vocab_size())).all()
    probabilities = out["top_k_probabilities"][0]
    assert (probabilities > 0).all() and (np.diff(probabilities, axis=-1) <= 0).all()
    assert [[t.decode() for t in row] for row in out["top_k_tokens"][0]] == \
        [[processor.id_to_piece(int(i)) for i in row] for row in ids]


def test_predict_masked_of_only_masks_beside_an_empty_text_pads_the_empty_one(loaded):
    out = call(loaded, "predict_masked", text=["<mask><mask>", ""])
    assert out["num_masks"].tolist() == [2, 0]
    assert out["mask_positions"].tolist() == [[MAX_LENGTH - 4, MAX_LENGTH - 3], [-1, -1]]
    assert (out["top_k_ids"][1] == -1).all() and (out["top_k_probabilities"][1] == 0).all()
    assert (out["top_k_ids"][0] >= 0).all()


def test_predict_masked_of_an_empty_batch_gives_zero_rows(loaded):
    out = {name: value.numpy() for name, value in
           loaded.signatures["predict_masked"](text=tf.constant([], tf.string)).items()}
    assert out["num_masks"].shape == (0,)
    assert out["mask_positions"].shape == (0, 0)
    for name in ("top_k_ids", "top_k_tokens", "top_k_probabilities"):
        assert out[name].shape == (0, 0, TOP_K), name


def test_predict_masked_mask_positions_point_at_mask_ids(loaded, reference, special_ids):
    _, encoder = reference
    out = call(loaded, "predict_masked", text=MASKED[:2])
    ids = encoder.encode_masked(tf.constant(MASKED[:2]))["input_ids"].numpy()
    for row in range(2):
        positions = out["mask_positions"][row][out["mask_positions"][row] >= 0]
        assert (ids[row, positions] == special_ids["mask"]).all()


def test_pair_batches_of_different_sizes_are_a_clear_error(loaded):
    with pytest.raises(tf.errors.InvalidArgumentError, match="text and text_b must hold the same number"):
        call(loaded, "encode_text_pair", text=["a", "b"], text_b=["c"])


def encode_ids(loaded, texts: list[str], length: int) -> dict[str, np.ndarray]:
    """The in-graph encoding of ``texts`` (left-padded to MAX_LENGTH) with all but the last
    ``length`` positions cut off: the same request with less left padding."""
    full = call(loaded, "encode_text", text=texts)
    return {name: full[name][:, -length:] for name in ("input_ids", "segment_ids", "input_mask")}


def assert_same_outputs_as_full_padding(loaded, texts: list[str], length: int) -> None:
    """``encode`` on the ids cut to ``length`` gives the fully padded results for those positions."""
    full = call(loaded, "encode", **encode_ids(loaded, texts, MAX_LENGTH))
    short = call(loaded, "encode", **encode_ids(loaded, texts, length))
    assert short["sequence_output"].shape == (len(texts), length, full["sequence_output"].shape[-1])
    np.testing.assert_allclose(short["pooled_output"], full["pooled_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(short["sequence_output"], full["sequence_output"][:, -length:], atol=1e-5, rtol=0)


@pytest.mark.parametrize("text", [SHORT_TEXT, SENTENCES[1], ""], ids=["short", "sentence", "empty"])
def test_encode_of_a_text_at_exactly_its_own_length_equals_full_padding(loaded, text):
    own_length = int(call(loaded, "encode_text", text=[text])["input_mask"].sum())
    assert own_length < MAX_LENGTH
    assert_same_outputs_as_full_padding(loaded, [text], own_length)


def test_encode_with_some_left_padding_equals_full_padding(loaded):
    """Texts padded to a length inside the smallest bucket, so the network runs shorter than MAX_LENGTH."""
    length = length_buckets(MAX_LENGTH)[0] - 2
    texts = [SHORT_TEXT, ""]
    assert call(loaded, "encode_text", text=texts)["input_mask"].sum(axis=1).max() < length
    assert_same_outputs_as_full_padding(loaded, texts, length)


def test_encode_length_buckets_double_up_to_max_length():
    assert length_buckets(MAX_LENGTH) == (16, 32)
    assert length_buckets(100) == (16, 32, 64, 100)
    assert length_buckets(512) == (16, 32, 64, 128, 256, 512)
    assert length_buckets(5) == (5,)


def test_encode_with_a_single_length_bucket_equals_the_bucketed_export(loaded, reference, sp_proto, special_ids):
    """max_length 16 (or less) is one bucket: no shorter bucket to choose from."""
    network, _ = reference
    single = length_buckets(MAX_LENGTH)[0]
    module = XLNetServingModule(network, XLNetTextEncoder(sp_proto, special_ids, single, uncased=False), TOP_K)
    ids = encode_ids(loaded, [SHORT_TEXT, ""], single)
    expected = call(loaded, "encode", **ids)
    out = module.encode(*(tf.constant(ids[name]) for name in ("input_ids", "segment_ids", "input_mask")))
    np.testing.assert_allclose(out["sequence_output"].numpy(), expected["sequence_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["pooled_output"].numpy(), expected["pooled_output"], atol=1e-5, rtol=0)


@pytest.mark.slow  # 41 s: a whole module saved (an export's tracing)
def test_saving_traces_each_signature_function_once(reference, sp_proto, special_ids, tmp_path):
    """tf.saved_model.save traces in its own context: a function traced before it would be traced
    again (an export's time twice over), so the module hands save its tf.functions untraced."""
    network, _ = reference
    module = XLNetServingModule(network, XLNetTextEncoder(sp_proto, special_ids, 16, uncased=False), TOP_K)
    signatures = module.signatures()
    tf.saved_model.save(module, str(tmp_path / "saved_model"), signatures=signatures)
    assert {name: function.experimental_get_tracing_count() for name, function in signatures.items()} == {
        name: 1 for name in signatures}


def test_encode_longer_than_max_length_is_a_clear_error(loaded):
    ids = np.zeros((1, MAX_LENGTH + 1), np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"input_ids must have at most max_length={MAX_LENGTH}"):
        call(loaded, "encode", input_ids=ids, segment_ids=ids, input_mask=ids + 1)


def test_encode_without_any_position_is_a_clear_error(loaded):
    ids = np.zeros((1, 0), np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_ids must have at least one position"):
        call(loaded, "encode", input_ids=ids, segment_ids=ids, input_mask=ids)


@pytest.mark.parametrize("name", ["segment_ids", "input_mask"])
def test_encode_with_tensors_of_different_shapes_is_a_clear_error(loaded, name):
    ids = {"input_ids": np.zeros((1, 8), np.int32), "segment_ids": np.zeros((1, 8), np.int32),
           "input_mask": np.ones((1, 8), np.int32)}
    ids[name] = ids[name][:, 1:]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{name} must have the shape of input_ids"):
        call(loaded, "encode", **ids)


@pytest.mark.parametrize("value, message", [(10**6, "input_ids must be < vocab_size"), (-1, "input_ids must be >= 0")])
def test_encode_with_ids_outside_the_vocabulary_is_a_clear_error(loaded, value, message):
    ids = np.full((1, 8), value, np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call(loaded, "encode", input_ids=ids, segment_ids=ids * 0, input_mask=ids * 0 + 1)


# ----------------------------------------------------------------------- bad model directories
def test_export_names_the_missing_files_of_a_model_directory(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    code = xlnet_cli.main(["export", "--model-dir", str(tmp_path / "model"), "--output", str(tmp_path / "out")])
    assert code == 2
    assert "lacks model_config.json, spiece.model, special_ids.json" in capsys.readouterr().err


def test_export_refuses_a_model_directory_without_checkpoints(tmp_path, model_dir):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("model_config.json", "spiece.model", "special_ids.json"):
        (bare / name).write_bytes((model_dir / name).read_bytes())
    with pytest.raises(RestoreError, match="no checkpoint under checkpoints/"):
        export_saved_model(bare, tmp_path / "out", ExportConfig())


def copy_model_dir(source: Path, target: Path) -> Path:
    target.mkdir()
    for name in ("model_config.json", "spiece.model", "special_ids.json"):
        (target / name).write_bytes((source / name).read_bytes())
    shutil.copytree(source / "checkpoints", target / "checkpoints")
    return target


def test_export_refuses_a_checkpoint_of_another_architecture(tmp_path, model_dir):
    copy = copy_model_dir(model_dir, tmp_path / "deeper")
    config = json.loads((copy / "model_config.json").read_text())
    (copy / "model_config.json").write_text(json.dumps({**config, "n_layer": config["n_layer"] + 1}))
    with pytest.raises(RestoreError, match="does not match model_config.json"):
        export_saved_model(copy, tmp_path / "out", ExportConfig())


def test_export_reports_an_unreadable_checkpoint(tmp_path, model_dir):
    copy = copy_model_dir(model_dir, tmp_path / "corrupt")
    for data in (copy / "checkpoints").glob("*.data-*"):
        data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(RestoreError, match="cannot read checkpoint"):
        export_saved_model(copy, tmp_path / "out", ExportConfig())


def test_export_refuses_special_ids_that_disagree_with_the_vocabulary(tmp_path, model_dir, special_ids):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("model_config.json", "spiece.model"):
        (copy / name).write_bytes((model_dir / name).read_bytes())
    (copy / "special_ids.json").write_text(json.dumps({**special_ids, "mask": special_ids["pad"]}))
    (copy / "checkpoints").symlink_to(model_dir / "checkpoints")
    with pytest.raises(RestoreError, match="special_ids.json disagrees .* on mask"):
        export_saved_model(copy, tmp_path / "out", ExportConfig())


def test_export_refuses_bad_max_length_and_top_k():
    with pytest.raises(ExportError, match="--max-length"):
        ExportConfig(max_length=2)
    with pytest.raises(ExportError, match="--top-k"):
        ExportConfig(top_k=0)


def test_export_refuses_top_k_larger_than_the_vocabulary(tmp_path, model_dir):
    with pytest.raises(ExportError, match="--top-k 9000 exceeds the vocabulary size 8000"):
        export_saved_model(model_dir, tmp_path / "out", ExportConfig(top_k=9000))
