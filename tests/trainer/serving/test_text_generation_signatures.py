"""The score, score_in_context and generate signatures (trainer/serving/text_generation_signatures.py):
what a served model returns equals the in-process API (trainer/models/scoring.py, generation.py),
rows are cut to the documented width, and bad input fails naming the input.

One export of the legacy pretrained fixture per module (slow: a whole SavedModel)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
from support.bundled_data import REPO
from support.served_signatures import served_in_a_fresh_process

import xlnet_cli
from trainer.models.generation import MAX_NEW_TOKENS_CAP, excluded_symbol_ids, generate, stop_symbol_ids
from trainer.models.inference_network import inference_network
from trainer.models.scoring import score_tokens
from trainer.runtime.restore import open_model_directory, restore_model
from trainer.serving.saved_model import ExportConfig, export_saved_model
from trainer.serving.text_encoder import XLNetTextEncoder
from trainer.serving.text_generation_signatures import left_padded

# One xdist worker runs the module's tests, so that its module fixtures (an export) are built once
# (slow: one whole export, about 30 s, shared by the module)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("generation_export")]

PRETRAINED = str(REPO / "tests" / "fixtures" / "legacy" / "pretrained")
MAX_LENGTH = 32
PROMPTS = ["In the beginning God created", "And the earth was without form, and void; and darkness was upon the deep",
           "Light"]
TEXTS = ["In the beginning God created the heaven and the earth.", "Void."]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> str:
    return export_saved_model(PRETRAINED, str(tmp_path_factory.mktemp("text_generation") / "serving"),
                              ExportConfig(max_length=MAX_LENGTH))


@pytest.fixture(scope="module")
def served(export):
    return tf.saved_model.load(export)


@pytest.fixture(scope="module")
def model():
    """The fixture's network for natural-order reading with the export's default cache (its mem_len, 16),
    its encoder and special ids."""
    directory = open_model_directory(PRETRAINED)
    network = inference_network(restore_model(directory).network, directory.model_config.mem_len)
    encoder = XLNetTextEncoder(directory.sp_model_proto, directory.special_ids, MAX_LENGTH, uncased=False)
    return network, encoder, directory.special_ids


def settings(**changes) -> dict[str, tf.Tensor]:
    values = {"max_new_tokens": tf.constant(8), "temperature": tf.constant(0.0), "top_k": tf.constant(0),
              "top_p": tf.constant(1.0), "seed": tf.constant(0, tf.int64)}
    values.update({name: tf.constant(value, values[name].dtype) for name, value in changes.items()})
    return values


def in_process_generation(model, prompts, **kwargs) -> dict[str, np.ndarray]:
    network, encoder, special = model
    ids = encoder.tokenize(tf.constant(prompts))
    lengths = tf.minimum(tf.cast(ids.row_lengths(), tf.int32), MAX_LENGTH)
    kept = tf.RaggedTensor.from_row_lengths(ids.values, ids.row_lengths())[:, -MAX_LENGTH:]
    out = generate(network, left_padded(tf.cast(kept, tf.int32), MAX_LENGTH, special["pad"]), lengths,
                   stop_ids=stop_symbol_ids(special), pad_id=special["pad"], excluded_ids=excluded_symbol_ids(special),
                   **kwargs)
    return {name: value.numpy() for name, value in out.items()}


def test_a_pretrained_export_has_score_and_generate_and_records_its_cache(export, served):
    assert {"score", "score_in_context", "generate"} <= set(served.signatures)
    exported = json.loads(open(f"{export}/assets/export_config.json").read())
    assert {"score", "score_in_context", "generate"} <= set(exported["signatures"])
    assert exported["generation_mem_len"] == 16  # the fixture model's mem_len, the default


def test_served_greedy_generation_equals_in_process_generate(served, model):
    out = served.signatures["generate"](prompt=tf.constant(PROMPTS), **settings(max_new_tokens=10))
    expected = in_process_generation(model, PROMPTS, max_new_tokens=10)
    np.testing.assert_array_equal(out["generated_ids"].numpy(), expected["generated_ids"])
    np.testing.assert_array_equal(out["input_ids"].numpy(), expected["input_ids"])
    np.testing.assert_array_equal(out["input_mask"].numpy(), expected["input_mask"])
    np.testing.assert_allclose(out["token_log_probs"].numpy(), expected["token_log_probs"], atol=1e-4)


def test_served_sampling_with_a_seed_equals_in_process_generate(served, model):
    out = served.signatures["generate"](prompt=tf.constant(PROMPTS), **settings(temperature=1.0, top_k=50, seed=7))
    expected = in_process_generation(model, PROMPTS, max_new_tokens=8, temperature=1.0, top_k=50, seed=7)
    np.testing.assert_array_equal(out["generated_ids"].numpy(), expected["generated_ids"])
    assert len(set(out["generated_ids"].numpy().ravel().tolist())) > 3  # really sampled, not one repeated id


def test_the_continuation_text_is_the_generated_pieces_detokenised(served, model):
    _, encoder, special = model
    out = served.signatures["generate"](prompt=tf.constant(PROMPTS), **settings(temperature=1.0, seed=3))
    for ids, text in zip(out["generated_ids"].numpy(), out["text"].numpy()):
        words = [i for i in ids if i >= 0 and i not in (special["eod"], special["eos"])]
        assert text == encoder.tokenizer.detokenize(tf.constant(words, tf.int32)).numpy()


def test_a_long_prompt_keeps_its_last_max_length_tokens_and_counts_the_rest(served, model):
    _, encoder, _ = model
    prompt = " ".join(PROMPTS * 3)
    pieces = encoder.tokenize(tf.constant([prompt])).values.numpy()
    out = served.signatures["generate"](prompt=tf.constant([prompt]), **settings(max_new_tokens=2))
    np.testing.assert_array_equal(out["input_ids"].numpy()[0, :MAX_LENGTH], pieces[-MAX_LENGTH:])
    assert out["num_truncated"].numpy().tolist() == [len(pieces) - MAX_LENGTH]


def test_an_empty_batch_generates_zero_rows_of_the_documented_shapes(served):
    out = served.signatures["generate"](prompt=tf.constant([], tf.string), **settings(max_new_tokens=5))
    shapes = {name: tuple(value.shape) for name, value in out.items()}
    assert shapes == {"text": (0,), "generated_ids": (0, 5), "token_log_probs": (0, 5), "num_generated": (0,),
                      "num_truncated": (0,), "input_ids": (0, MAX_LENGTH + 5), "segment_ids": (0, MAX_LENGTH + 5),
                      "input_mask": (0, MAX_LENGTH + 5)}


def expected_scores(model, rows: list[list[int]], contexts: list[int]) -> dict[str, np.ndarray]:
    network, _, special = model
    ids = np.full([len(rows), MAX_LENGTH], special["pad"], np.int32)
    for index, row in enumerate(rows):
        ids[index, :len(row)] = row
    out = score_tokens(network, ids, [len(row) for row in rows], contexts, segment_len=MAX_LENGTH)
    return {name: value.numpy() for name, value in out.items()}


def test_served_score_equals_score_tokens_on_eod_framed_texts_in_a_fresh_process(export, model):
    _, encoder, special = model
    eod = special["eod"]
    pieces = [encoder.tokenize(tf.constant([text])).values.numpy().tolist() for text in TEXTS]
    context = "God"
    context_pieces = encoder.tokenize(tf.constant([context])).values.numpy().tolist()
    served = served_in_a_fresh_process([["plain", export, "score", {"text": TEXTS}],
                                        ["context", export, "score_in_context",
                                         {"text": TEXTS, "context": [context, ""]}]])["results"]
    plain = expected_scores(model, [[eod, *p, eod] for p in pieces], [1, 1])
    np.testing.assert_allclose(served["plain"]["log_likelihood"], plain["log_likelihood"], atol=1e-4)
    assert served["plain"]["num_tokens"] == [len(p) + 1 for p in pieces]
    first = plain["token_log_probs"][0, 1:len(pieces[0]) + 2]
    np.testing.assert_allclose(served["plain"]["token_log_probs"][0][:len(first)], first, atol=1e-4)
    assert served["plain"]["token_ids"][0][:len(first) + 1] == [*pieces[0], eod, -1]
    # Row 0 after its context (nothing added); row 1's context is empty: framed as score frames it.
    in_context = expected_scores(model, [[*context_pieces, *pieces[0]], [eod, *pieces[1], eod]],
                                 [len(context_pieces), 1])
    np.testing.assert_allclose(served["context"]["log_likelihood"], in_context["log_likelihood"], atol=1e-4)
    assert served["context"]["num_tokens"] == [len(pieces[0]), len(pieces[1]) + 1]


def test_a_long_text_keeps_its_first_tokens_and_counts_the_rest(served, model):
    _, encoder, _ = model
    text = " ".join(TEXTS * 4)
    pieces = encoder.tokenize(tf.constant([text])).values.numpy()
    out = served.signatures["score"](text=tf.constant([text]))
    # <eod> + text + <eod> cut to MAX_LENGTH: the first MAX_LENGTH - 1 pieces are scored.
    assert out["num_tokens"].numpy().tolist() == [MAX_LENGTH - 1]
    assert out["num_truncated"].numpy().tolist() == [len(pieces) + 2 - MAX_LENGTH]
    np.testing.assert_array_equal(out["token_ids"].numpy()[0, :MAX_LENGTH - 1], pieces[:MAX_LENGTH - 1])


@pytest.mark.parametrize("prompt, changes, named", [
    ("", {}, "prompt: a prompt must hold a token"),
    ("Light", {"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
    ("Light", {"max_new_tokens": -3}, "max_new_tokens must be >= 1"),
    ("Light", {"max_new_tokens": MAX_NEW_TOKENS_CAP + 1}, f"max_new_tokens must be <= {MAX_NEW_TOKENS_CAP}"),
    ("Light", {"temperature": -0.5}, "temperature must be >= 0"),
    ("Light", {"top_k": -1}, "top_k must be >= 0"),
    ("Light", {"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ("Light", {"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
    (b"caf\xc3\x28", {}, "prompt must be valid UTF-8"),
])
def test_bad_generate_inputs_fail_naming_the_input(served, prompt, changes, named):
    with pytest.raises(tf.errors.InvalidArgumentError, match=named):
        served.signatures["generate"](prompt=tf.constant([prompt]), **settings(**changes))


@pytest.mark.parametrize("inputs, named", [
    ({"text": [b"caf\xc3\x28"], "context": ["x"]}, "text must be valid UTF-8"),
    ({"text": ["x"], "context": [b"\xff"]}, "context must be valid UTF-8"),
    ({"text": ["x", "y"], "context": ["z"]}, "text and context must hold the same number of strings"),
])
def test_bad_score_inputs_fail_naming_the_input(served, inputs, named):
    with pytest.raises(tf.errors.InvalidArgumentError, match=named):
        served.signatures["score_in_context"](**{name: tf.constant(value) for name, value in inputs.items()})


def test_a_generation_cache_larger_than_the_machine_is_refused_before_anything_is_built(capsys, tmp_path):
    status = xlnet_cli.run_subcommand("export", ["--model-dir", PRETRAINED, "--output", str(tmp_path / "out"),
                                                 "--generation-mem-len", "100000000"])
    assert status == 2
    error = capsys.readouterr().err
    assert "--generation-mem-len 100000000: a generation cache of 100000000 positions needs about" in error
    assert "the largest that fits is --generation-mem-len" in error
    assert not (tmp_path / "out").exists()


def test_a_negative_generation_cache_is_refused_naming_the_flag(capsys, tmp_path):
    status = xlnet_cli.run_subcommand("export", ["--model-dir", PRETRAINED, "--output", str(tmp_path / "out"),
                                                 "--generation-mem-len", "-1"])
    assert status == 2
    assert "--generation-mem-len must be at least 0" in capsys.readouterr().err
