"""`xlnet export --max-segments N`: signatures that read texts N segments long with Transformer-XL
memory, in one SavedModel call (trainer/serving/segment_reading.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from trainer.configs.finetuning import FinetuneConfig
from trainer.models.config import model_preset
from trainer.models.network import build_network
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.restore import open_model_directory, restore_model
from trainer.serving.saved_model import ExportConfig, ExportError, resolve_export_config
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import corpus_lines

# One xdist worker runs the module's tests, so that its module fixtures (an export) are built once
pytestmark = pytest.mark.xdist_group("segments_export")

MAX_LENGTH = 16
SEGMENTS = 3
MEM_LEN = 24  # a segment and a half: the memory spans segment boundaries


def write_pretrained_dir(path: Path, vocab) -> Path:
    """A pretrained model directory: a small network with seeded random weights and a memory."""
    config = model_preset("tiny").replace(vocab_size=vocab.vocab_size, n_layer=2, mem_len=MEM_LEN, reuse_len=8)
    directory = ModelDirectory(str(path))
    directory.write_model_files(config, vocab.special_ids.to_dict(), vocab.path, uncased=False)
    tf.keras.utils.set_random_seed(5)
    network = build_network(config)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=network), directory.checkpoints, 1).save()
    return path


def long_texts(count: int, skip: int = 0) -> list[str]:
    """Texts of the bundled corpus: a few sentences each, several segments of MAX_LENGTH long."""
    lines = corpus_lines(4 * count, skip=skip, longer_than=60)
    return [" ".join(lines[4 * i: 4 * i + 4]) for i in range(count)]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, vocab) -> Path:
    return write_pretrained_dir(tmp_path_factory.mktemp("segments") / "model", vocab)


@pytest.fixture(scope="module")
def exported(pretrained) -> Path:
    """The multi-segment export, through the CLI (about 30 s here: the tests that use it are slow)."""
    output = pretrained.parent / "serving"
    assert xlnet_cli.main(["export", "--model-dir", str(pretrained), "--output", str(output), "--max-length",
                           str(MAX_LENGTH), "--max-segments", str(SEGMENTS)]) == 0
    return output / "1"


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(str(exported))


@pytest.fixture(scope="module")
def reference(pretrained, vocab):
    """The in-process network with the export's memory, and the encoder."""
    network = restore_model(open_model_directory(pretrained), mem_len=MEM_LEN).network
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), MAX_LENGTH, uncased=False)
    return network, encoder


def call(loaded, signature: str, **inputs) -> dict[str, np.ndarray]:
    outputs = loaded.signatures[signature](**{name: tf.constant(value) for name, value in inputs.items()})
    return {name: value.numpy() for name, value in outputs.items()}


def in_process(reference, texts: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the encoder's [batch, SEGMENTS, MAX_LENGTH] inputs, encode_segments' states) of ``texts``."""
    network, encoder = reference
    inputs = encoder.encode_segments(tf.constant(texts), max_segments=SEGMENTS)
    hidden, _ = network.encode_segments(inputs["input_ids"], inputs["segment_ids"], inputs["input_mask"])
    return {name: value.numpy() for name, value in inputs.items()}, hidden.numpy()


def real(values: np.ndarray, input_mask: np.ndarray) -> np.ndarray:
    """The states of real positions (input_mask 1)."""
    return values[input_mask > 0]


# ------------------------------------------------------------------------------ layout
@pytest.mark.slow
def test_encode_text_returns_the_ids_of_every_segment(loaded, reference):
    texts = long_texts(3)
    served = call(loaded, "encode_text", text=texts)
    expected, _ = in_process(reference, texts)
    for name in ("input_ids", "segment_ids", "input_mask"):
        assert served[name].shape == (3, SEGMENTS, MAX_LENGTH)
        np.testing.assert_array_equal(served[name], expected[name])
    assert served["sequence_output"].shape == (3, SEGMENTS, MAX_LENGTH, 128)
    assert (served["input_mask"][:, 0] > 0).any()  # the texts do reach the first segment


@pytest.mark.slow
def test_export_config_records_the_segments_and_the_memory(exported):
    config = json.loads((exported / "assets" / "export_config.json").read_text())
    assert (config["max_length"], config["max_segments"], config["mem_len"]) == (MAX_LENGTH, SEGMENTS, MEM_LEN)
    assert f"max_segments={SEGMENTS}" in config["layout"]


# ---------------------------------------------------------------------- served equals in-process
@pytest.mark.slow
def test_encode_text_equals_encode_segments_in_process(loaded, reference):
    texts = long_texts(4, skip=20)
    served = call(loaded, "encode_text", text=texts)
    inputs, hidden = in_process(reference, texts)
    mask = inputs["input_mask"]
    np.testing.assert_allclose(real(served["sequence_output"], mask), real(hidden, mask), atol=1e-5)
    np.testing.assert_allclose(served["pooled_output"], hidden[:, -1, -1], atol=1e-5)


@pytest.mark.slow
def test_encode_text_pair_equals_encode_segments_in_process(loaded, reference):
    texts, texts_b = long_texts(2, skip=40), ["A short second text.", ""]
    served = call(loaded, "encode_text_pair", text=texts, text_b=texts_b)
    network, encoder = reference
    inputs = encoder.encode_segments(tf.constant(texts), tf.constant(texts_b), max_segments=SEGMENTS)
    hidden, _ = network.encode_segments(inputs["input_ids"], inputs["segment_ids"], inputs["input_mask"])
    np.testing.assert_array_equal(served["input_ids"], inputs["input_ids"].numpy())
    np.testing.assert_allclose(served["pooled_output"], hidden.numpy()[:, -1, -1], atol=1e-5)


@pytest.mark.slow
def test_the_memory_changes_the_result(loaded, reference):
    """The served result of a long text is not that of its last segment alone."""
    texts = long_texts(2, skip=60)
    served = call(loaded, "encode_text", text=texts)
    network, _ = reference
    alone, _ = network.encode(*(tf.constant(served[name][:, -1]) for name in ("input_ids", "segment_ids")),
                              input_mask=tf.constant(served["input_mask"][:, -1]))
    assert np.abs(served["pooled_output"] - alone.numpy()[:, -1]).max() > 1e-3


# -------------------------------------------------------------------------------- mixed lengths
@pytest.mark.slow
def test_a_batch_of_mixed_lengths_gives_each_text_its_own_result(loaded):
    texts = [long_texts(1, skip=80)[0], "A short text.", "", long_texts(1, skip=90)[0][:120]]
    batch = call(loaded, "encode_text", text=texts)
    for row, text in enumerate(texts):
        alone = call(loaded, "encode_text", text=[text])
        mask = alone["input_mask"][0]
        np.testing.assert_allclose(batch["pooled_output"][row], alone["pooled_output"][0], atol=1e-5)
        np.testing.assert_allclose(real(batch["sequence_output"][row], mask),
                                   real(alone["sequence_output"][0], mask), atol=1e-5)


@pytest.mark.slow
def test_a_text_that_fits_one_segment_is_read_as_one_segment(loaded, reference):
    texts = ["A short text.", "Jazz came mostly after 1900.", ""]
    served = call(loaded, "encode_text", text=texts)
    assert not served["input_mask"][:, :-1].any()  # the segments before the last are all padding
    network, encoder = reference
    inputs = encoder.encode(tf.constant(texts))
    hidden, _ = network.encode(inputs["input_ids"], inputs["segment_ids"], input_mask=inputs["input_mask"])
    np.testing.assert_array_equal(served["input_ids"][:, -1], inputs["input_ids"].numpy())
    np.testing.assert_allclose(served["pooled_output"], hidden.numpy()[:, -1], atol=1e-5)


@pytest.mark.slow
def test_padding_positions_have_zero_states(loaded):
    served = call(loaded, "encode_text", text=["A short text.", long_texts(1, skip=100)[0]])
    padding = served["input_mask"] == 0
    assert padding.any() and not served["sequence_output"][padding].any()
    assert served["sequence_output"][~padding].any(axis=-1).all()


@pytest.mark.slow
def test_an_empty_text_is_sep_cls_in_the_last_segment(loaded, vocab):
    served = call(loaded, "encode_text", text=[""])
    special = vocab.special_ids.to_dict()
    assert served["input_mask"][0].sum() == 2 and not served["input_mask"][0, :-1].any()
    assert served["input_ids"][0, -1, -2:].tolist() == [special["sep"], special["cls"]]


@pytest.mark.slow
def test_a_text_longer_than_max_segments_keeps_what_the_encoder_keeps(loaded, reference):
    text = " ".join(long_texts(6, skip=120))
    served = call(loaded, "encode_text", text=[text])
    expected, _ = in_process(reference, [text])
    assert served["input_mask"].all()  # every position of every segment is used
    np.testing.assert_array_equal(served["input_ids"], expected["input_ids"])


@pytest.mark.slow
def test_predict_masked_reads_one_segment_as_the_network_without_memory(loaded, pretrained, vocab):
    texts = ["Jazz and ethnic folk <mask> became important <mask>.", "No mask here."]
    served = call(loaded, "predict_masked", text=texts)
    network = restore_model(open_model_directory(pretrained)).network  # mem_len 0
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), MAX_LENGTH, uncased=False)
    inputs = encoder.encode_masked(tf.constant(texts))
    is_masked = inputs["is_masked"].numpy()
    assert served["num_masks"].tolist() == is_masked.sum(axis=1).tolist() == [2, 0]
    positions = np.nonzero(is_masked[0])[0]
    logits, _ = network(inputs["input_ids"][:1], inputs["segment_ids"][:1], tf.constant(is_masked[:1, None, :] > 0),
                        target_positions=tf.constant(positions[None], tf.int32), input_mask=inputs["input_mask"][:1])
    top = np.sort(tf.nn.softmax(logits, axis=-1).numpy()[0], axis=-1)[:, ::-1][:, :served["top_k_ids"].shape[-1]]
    np.testing.assert_allclose(served["top_k_probabilities"][0], top, atol=1e-5)


# ------------------------------------------------------------------------------ ids signature
@pytest.mark.slow
def test_encode_on_the_last_segments_equals_encode_text(loaded):
    """Leading segments a batch does not reach can be left out of the ids."""
    texts = [long_texts(1, skip=140)[0][:100], "Short."]
    full = call(loaded, "encode_text", text=texts)
    reached = int(np.argmax(full["input_mask"].any(axis=(0, 2))))
    assert reached > 0
    for first in (0, reached):
        ids = {name: full[name][:, first:] for name in ("input_ids", "segment_ids", "input_mask")}
        short = call(loaded, "encode", **ids)
        assert short["sequence_output"].shape[1] == SEGMENTS - first
        np.testing.assert_allclose(short["pooled_output"], full["pooled_output"], atol=1e-5)
        np.testing.assert_allclose(short["sequence_output"], full["sequence_output"][:, first:], atol=1e-5)


@pytest.mark.slow
def test_encode_with_more_segments_than_max_segments_is_a_clear_error(loaded):
    ids = np.zeros([1, SEGMENTS + 1, MAX_LENGTH], np.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"at most max_segments={SEGMENTS} segments"):
        loaded.signatures["encode"](input_ids=ids, segment_ids=ids, input_mask=ids)


@pytest.mark.slow
def test_encode_of_segments_shorter_than_max_length_is_refused(loaded):
    ids = np.zeros([1, 2, MAX_LENGTH - 1], np.int32)
    with pytest.raises((ValueError, TypeError), match="16|shape"):
        loaded.signatures["encode"](input_ids=ids, segment_ids=ids, input_mask=ids)


# ------------------------------------------------------------------------------- bad settings
def test_max_segments_0_is_a_usage_error_naming_the_flag(pretrained, tmp_path, capsys):
    code = xlnet_cli.main(["export", "--model-dir", str(pretrained), "--output", str(tmp_path / "out"),
                           "--max-segments", "0"])
    assert code == 2
    assert "--max-segments must be in 1..32 (as fine-tuning's max_segments" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_max_segments_above_the_bound_is_refused_before_anything_is_built(pretrained, tmp_path, capsys):
    code = xlnet_cli.main(["export", "--model-dir", str(pretrained), "--output", str(tmp_path / "out"),
                           "--max-segments", "100000", "--mem-len", "16"])
    assert code == 2
    error = capsys.readouterr().err
    assert "--max-segments must be in 1..32 (" in error and "got 100000" in error
    assert not (tmp_path / "out").exists()


def test_mem_len_without_several_segments_is_a_usage_error():
    with pytest.raises(ExportError, match="--mem-len 16 needs --max-segments above 1"):
        ExportConfig(max_length=16, mem_len=16)


def test_a_model_without_memory_needs_mem_len_for_several_segments(tmp_path, pretrained):
    model_config = json.loads((pretrained / "model_config.json").read_text())
    copy = tmp_path / "no-memory"
    copy.mkdir()
    for name in ("spiece.model", "special_ids.json"):
        (copy / name).write_bytes((pretrained / name).read_bytes())
    (copy / "model_config.json").write_text(json.dumps({**model_config, "mem_len": 0}))
    directory = open_model_directory(copy)
    with pytest.raises(ExportError, match=r"has mem_len 0 .*pass --mem-len M \(e.g. 16, one whole segment\)"):
        resolve_export_config(directory, max_length=16, max_segments=2)
    assert resolve_export_config(directory, max_length=16, max_segments=2, mem_len=16).mem_len == 16
    assert resolve_export_config(directory, max_length=16).max_segments == 1


def test_one_segment_is_the_default_of_a_pretrained_model(pretrained):
    config = resolve_export_config(open_model_directory(pretrained))
    assert (config.max_segments, config.mem_len) == (1, 0)


def test_max_segments_with_another_format_is_a_usage_error(pretrained, tmp_path, capsys):
    code = xlnet_cli.main(["export", "--model-dir", str(pretrained), "--output", str(tmp_path / "hf"),
                           "--format", "huggingface", "--max-segments", "2"])
    assert code == 2
    assert "--max-segments applies to the SavedModel (--format savedmodel)" in capsys.readouterr().err


def test_a_squad_model_is_refused_several_segments(pretrained, tmp_path, capsys):
    squad = tmp_path / "squad"
    squad.mkdir()
    for path in pretrained.iterdir():
        if path.is_file():
            (squad / path.name).write_bytes(path.read_bytes())
    (squad / "checkpoints").symlink_to(pretrained / "checkpoints")
    ModelDirectory(str(squad)).write_finetune_files(FinetuneConfig(task="squad"), None)
    code = xlnet_cli.main(["export", "--model-dir", str(squad), "--output", str(tmp_path / "out"),
                           "--max-segments", "2"])
    assert code == 2
    assert "--max-segments 2: a SQuAD model reads its contexts in windows" in capsys.readouterr().err
