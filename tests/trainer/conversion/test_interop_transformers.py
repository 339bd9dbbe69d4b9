"""Interop with the real Hugging Face client (torch + transformers, `make test-interop`, .venv-interop):
our huggingface export loads in XLNetLMHeadModel / XLNetForSequenceClassification /
XLNetForMultipleChoice / XLNetForQuestionAnswering and XLNetTokenizer without missing or
unexpected weights and gives our logits (for SQuAD: the beam's and the teacher-forced
log-probabilities and the answer-class logits) and token ids; a directory written by
save_pretrained imports into the same outputs.
Nothing is downloaded: transformers models are built locally from configs."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import tensorflow as tf

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed: `make test-interop` runs these tests in .venv-interop "
                           "(pip install torch==2.13.0 then \".[interop]\")")
torch = pytest.importorskip("torch", reason="torch is not installed: `make test-interop` installs the CPU build")

import xlnet_cli  # noqa: E402
from trainer.models.question_answering import squad_losses  # noqa: E402
from trainer.serving.text_encoder import XLNetTextEncoder  # noqa: E402

from support.bundled_data import corpus_lines
from support.interop_models import (  # noqa: E402
    HEADS,
    SQUAD,
    head_inputs,
    restore_model_dir,
    squad_inputs,
    squad_outputs,
    text_inputs,
    tiny_config,
    write_model_dir,
)

TOLERANCE = 1e-4
# Whole-sequence settings, as transformers runs them (its config.json says bi_data false).
CONFIG = dict(bi_data=False, clamp_len=5)


def export(model_dir, output):
    assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--format", "huggingface",
                           "--output", str(output)]) == 0
    return str(output)


def load(cls, path):
    """A transformers model from ``path`` in eval mode, after checking it loaded every weight and no other."""
    model, info = cls.from_pretrained(path, output_loading_info=True)
    assert {key: list(value) for key, value in info.items() if key != "error_msgs"} == \
        {key: [] for key in info if key != "error_msgs"}, info
    assert not info.get("error_msgs")
    return model.eval()


def torch_inputs(inputs: dict) -> dict:
    """Our input dict -> transformers keyword arguments."""
    return {"input_ids": torch.tensor(np.asarray(inputs["input_ids"]), dtype=torch.long),
            "token_type_ids": torch.tensor(np.asarray(inputs["segment_ids"]), dtype=torch.long),
            "attention_mask": torch.tensor(np.asarray(inputs["input_mask"]), dtype=torch.float32)}


@pytest.fixture(scope="module")
def lm_export(tmp_path_factory, vocab):
    base = tmp_path_factory.mktemp("interop")
    network, _ = write_model_dir(str(base / "model"), tiny_config(vocab.vocab_size, **CONFIG), vocab, seed=3)
    return network, export(base / "model", base / "hf")


def test_lm_head_model_loads_and_gives_our_content_stream_logits(lm_export, vocab):
    network, path = lm_export
    model = load(transformers.XLNetLMHeadModel, path)
    ids, segments = text_inputs(vocab, length=16, batch=3)
    mask = (ids != vocab.special_ids.pad).astype(np.int32)
    hidden, _ = network.encode(ids, segments, input_mask=mask)
    ours = network.logits(hidden).numpy()
    with torch.no_grad():
        theirs = model(**torch_inputs({"input_ids": ids, "segment_ids": segments, "input_mask": mask})).logits
    np.testing.assert_allclose(theirs.numpy(), ours, rtol=TOLERANCE, atol=TOLERANCE)


def test_lm_head_model_gives_our_two_stream_logits(lm_export, vocab):
    network, path = lm_export
    model = load(transformers.XLNetLMHeadModel, path)
    ids, segments = text_inputs(vocab, length=12, batch=2, skip=5)
    rng = np.random.default_rng(0)
    perm_mask = (rng.random([2, 12, 12]) < 0.4).astype(np.float32)
    target_mapping = np.eye(12, dtype=np.float32)[[[2, 6, 9]] * 2]
    ours, _ = network(ids, segments, perm_mask, target_mapping)
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids, dtype=torch.long),
                       token_type_ids=torch.tensor(segments, dtype=torch.long),
                       perm_mask=torch.tensor(perm_mask), target_mapping=torch.tensor(target_mapping)).logits
    np.testing.assert_allclose(theirs.numpy(), ours.numpy(), rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("task", sorted(HEADS))
def test_head_classes_load_and_give_our_logits(tmp_path, vocab, task):
    _, head = write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size, **CONFIG), vocab, seed=4,
                              head=HEADS[task])
    path = export(tmp_path / "model", tmp_path / "hf")
    cls = transformers.XLNetForMultipleChoice if task == "multiple-choice" else \
        transformers.XLNetForSequenceClassification
    model = load(cls, path)
    inputs = head_inputs(vocab, task)
    with torch.no_grad():
        theirs = model(**torch_inputs(inputs)).logits.numpy()
    ours = head(inputs).numpy()
    np.testing.assert_allclose(theirs[:, 0] if task == "regression" else theirs, ours, rtol=TOLERANCE,
                               atol=TOLERANCE)
    if task == "classification":
        assert model.config.id2label == dict(enumerate(HEADS[task].labels))


GOLD_STARTS, GOLD_ENDS = (10, 12), (13, 14)  # in the context of squad_inputs' rows


def question_answering_outputs(model, inputs: dict) -> dict[str, np.ndarray]:
    """transformers' XLNetForQuestionAnswering on our inputs, in our output convention
    (trainer/models/question_answering.py): the beam as log-probabilities, ends start-major; teacher-forced
    start/end log-probabilities from its poolers (its forward returns only the loss then); and
    the answer-class logit on the softmax-weighted start state (what its beam computes: in
    training it takes the gold start state instead, which ours, as the original, does not)."""
    start_n_top, end_n_top = model.config.start_n_top, model.config.end_n_top
    p_mask = torch.tensor(np.asarray(inputs["p_mask"]))
    with torch.no_grad():
        beam = model(**torch_inputs(inputs), p_mask=p_mask)
        hidden = model.transformer(**torch_inputs(inputs)).last_hidden_state
        start_logits = model.start_logits(hidden, p_mask=p_mask)
        end_logits = model.end_logits(hidden, start_positions=torch.tensor(GOLD_STARTS), p_mask=p_mask)
    batch = hidden.shape[0]

    def start_major(values):  # theirs: entry j * start_n_top + i is end j of start i
        return values.numpy().reshape(batch, end_n_top, start_n_top).transpose(0, 2, 1).reshape(batch, -1)

    return {"beam/start_top_log_probs": np.log(beam.start_top_log_probs.numpy()),  # probabilities in transformers
            "beam/start_top_index": beam.start_top_index.numpy(),
            "beam/end_top_log_probs": np.log(start_major(beam.end_top_log_probs)),
            "beam/end_top_index": start_major(beam.end_top_index),
            "beam/cls_logits": beam.cls_logits.numpy(), "gold/cls_logits": beam.cls_logits.numpy(),
            "gold/start_log_probs": torch.log_softmax(start_logits, -1).numpy(),
            "gold/end_log_probs": torch.log_softmax(end_logits, -1).numpy()}


def assert_same_question_answering(model, head, inputs) -> None:
    """Their outputs equal ours (indices exactly), and so does their span loss (no answer class)."""
    ours, theirs = squad_outputs(head, inputs, GOLD_STARTS), question_answering_outputs(model, inputs)
    assert sorted(theirs) == sorted(ours)
    for name in ours:
        if name.endswith("_index"):
            np.testing.assert_array_equal(theirs[name], ours[name], err_msg=name)
        else:
            finite = np.isfinite(ours[name]) & (ours[name] > -1e20)  # masked positions: -1e30 less a constant
            np.testing.assert_array_equal(finite, np.isfinite(theirs[name]) & (theirs[name] > -1e20), err_msg=name)
            np.testing.assert_allclose(theirs[name][finite], ours[name][finite], rtol=TOLERANCE, atol=TOLERANCE,
                                       err_msg=name)
    gold = {name.removeprefix("gold/"): tf.constant(value) for name, value in ours.items() if name.startswith("gold/")}
    our_loss = squad_losses(gold, tf.constant(GOLD_STARTS), tf.constant(GOLD_ENDS), tf.zeros(2),
                            answer_class=False).numpy().mean()
    with torch.no_grad():
        their_loss = model(**torch_inputs(inputs), p_mask=torch.tensor(np.asarray(inputs["p_mask"])),
                           start_positions=torch.tensor(GOLD_STARTS), end_positions=torch.tensor(GOLD_ENDS)).loss
    np.testing.assert_allclose(their_loss.item(), our_loss, rtol=TOLERANCE, atol=TOLERANCE)


def test_question_answering_export_loads_and_gives_our_beam_and_log_probs(tmp_path, vocab):
    _, head = write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size, **CONFIG), vocab, seed=6,
                              head=SQUAD)
    model = load(transformers.XLNetForQuestionAnswering, export(tmp_path / "model", tmp_path / "hf"))
    assert (model.config.start_n_top, model.config.end_n_top) == (SQUAD.start_n_top, SQUAD.end_n_top)
    assert_same_question_answering(model, head, squad_inputs(vocab))


@pytest.mark.parametrize("uncased", [False, True])
def test_tokenizer_gives_our_ids_on_real_text(tmp_path, vocab, uncased):
    write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size, **CONFIG), vocab, uncased=uncased)
    tokenizer = transformers.XLNetTokenizer.from_pretrained(export(tmp_path / "model", tmp_path / "hf"))
    assert tokenizer.do_lower_case is uncased
    texts = corpus_lines(40, longer_than=40)
    pairs = list(zip(texts[:20], texts[20:]))
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), 512, uncased=uncased)
    ours = encoder.encode(tf.constant(texts[:20]), tf.constant(texts[20:]))
    for row, (a, b) in enumerate(pairs):
        theirs = tokenizer(a, b, return_token_type_ids=True)
        real = ours["input_mask"][row].numpy().astype(bool)
        assert theirs["input_ids"] == ours["input_ids"][row].numpy()[real].tolist(), (a, b)
        assert theirs["token_type_ids"] == ours["segment_ids"][row].numpy()[real].tolist()
    single = encoder.encode(tf.constant(texts))
    for row, text in enumerate(texts):
        real = single["input_mask"][row].numpy().astype(bool)
        assert tokenizer(text)["input_ids"] == single["input_ids"][row].numpy()[real].tolist(), text


@pytest.mark.parametrize("uncased", [False, True])
def test_our_tokenizer_json_is_what_xlnet_tokenizer_builds(tmp_path, vocab, uncased):
    """The tokenizer.json of the export equals the backend XLNetTokenizer builds from the same
    pieces, scores and normalisation table (what it would convert spiece.model into)."""
    import json

    from trainer.conversion.huggingface_tokenizer import precompiled_charsmap

    write_model_dir(str(tmp_path / "model"), tiny_config(vocab.vocab_size, **CONFIG), vocab, uncased=uncased)
    ours = json.loads((tmp_path / export(tmp_path / "model", tmp_path / "hf") / "tokenizer.json").read_text())
    pieces = [(piece, score) for piece, score in ours["model"]["vocab"]]
    built = transformers.XLNetTokenizer(vocab=pieces, do_lower_case=uncased,
                                        _spm_precompiled_charsmap=precompiled_charsmap(vocab.model_proto))
    assert ours == json.loads(built.backend_tokenizer.to_str())


def save_pretrained_dir(model, path, vocab) -> str:
    """What a transformers user publishes: save_pretrained plus the SentencePiece model."""
    model.save_pretrained(str(path))
    shutil.copy(vocab.path, path / "spiece.model")
    return str(path)


def hf_config(vocab, **changes):
    ids = vocab.special_ids
    values = dict(vocab_size=vocab.vocab_size, d_model=16, n_layer=2, n_head=2, d_inner=24, ff_activation="gelu_new",
                  clamp_len=-1, pad_token_id=ids.pad, bos_token_id=ids.bos, eos_token_id=ids.eos)
    values.update(changes)
    return transformers.XLNetConfig(**values)


def randomized(model, seed):
    """Every parameter drawn afresh (transformers initialises LayerNorms to 1/0 and biases to 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return model.eval()


def test_save_pretrained_lm_model_imports_with_the_same_logits(tmp_path, vocab):
    model = randomized(transformers.XLNetLMHeadModel(hf_config(vocab, clamp_len=4)), 0)
    source = save_pretrained_dir(model, tmp_path / "hf", vocab)
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", source, "--output", str(tmp_path / "model"),
                           "--no-bi-data"]) == 0
    network, _ = restore_model_dir(str(tmp_path / "model"))
    assert network.config.untie_r and network.config.clamp_len == 4
    ids, segments = text_inputs(vocab, length=16, batch=2, skip=9)
    hidden, _ = network.encode(ids, segments)
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids, dtype=torch.long),
                       token_type_ids=torch.tensor(segments, dtype=torch.long)).logits
    np.testing.assert_allclose(network.logits(hidden).numpy(), theirs.numpy(), rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("task", sorted(HEADS))
def test_save_pretrained_head_model_imports_as_a_fine_tuned_model(tmp_path, vocab, task):
    labels = {0: "sad", 1: "neutral", 2: "happy"}
    if task == "classification":
        config = hf_config(vocab, id2label=labels, label2id={v: k for k, v in labels.items()})
    elif task == "regression":
        config = hf_config(vocab, num_labels=1, problem_type="regression")
    else:
        config = hf_config(vocab)
    cls = transformers.XLNetForMultipleChoice if task == "multiple-choice" else \
        transformers.XLNetForSequenceClassification
    model = randomized(cls(config), 1)
    source = save_pretrained_dir(model, tmp_path / "hf", vocab)
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", source, "--output", str(tmp_path / "model"),
                           "--no-bi-data"]) == 0
    _, head = restore_model_dir(str(tmp_path / "model"))
    assert (head.task, head.num_labels) == (task, 3 if task == "classification" else 1)
    inputs = head_inputs(vocab, task)
    with torch.no_grad():
        theirs = model(**torch_inputs(inputs)).logits.numpy()
    np.testing.assert_allclose(head(inputs).numpy(), theirs[:, 0] if task == "regression" else theirs,
                               rtol=TOLERANCE, atol=TOLERANCE)


def test_save_pretrained_question_answering_model_imports_as_a_squad_model(tmp_path, vocab):
    model = randomized(transformers.XLNetForQuestionAnswering(hf_config(vocab, start_n_top=4, end_n_top=3)), 7)
    source = save_pretrained_dir(model, tmp_path / "hf", vocab)
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", source, "--output", str(tmp_path / "model"),
                           "--no-bi-data"]) == 0
    _, head = restore_model_dir(str(tmp_path / "model"))
    assert (head.start_n_top, head.end_n_top) == (4, 3)
    assert_same_question_answering(model, head, squad_inputs(vocab, skip=11))


def test_question_answering_simple_is_refused_by_name(tmp_path, vocab, capsys):
    model = transformers.XLNetForQuestionAnsweringSimple(hf_config(vocab))
    source = save_pretrained_dir(model, tmp_path / "hf", vocab)
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", source, "--output", str(tmp_path / "model")]) == 2
    assert "XLNetForQuestionAnsweringSimple is not supported: its qa_outputs layer" in capsys.readouterr().err


def test_exact_gelu_model_imports_with_the_same_logits(tmp_path, vocab):
    """transformers' default ff_activation 'gelu' is the exact erf GELU, ours 'gelu_exact'."""
    model = randomized(transformers.XLNetLMHeadModel(hf_config(vocab, ff_activation="gelu")), 2)
    source = save_pretrained_dir(model, tmp_path / "hf", vocab)
    assert xlnet_cli.main(["import-checkpoint", "--huggingface", source, "--output", str(tmp_path / "model"),
                           "--no-bi-data"]) == 0
    network, _ = restore_model_dir(str(tmp_path / "model"))
    assert network.config.ff_activation == "gelu_exact"
    ids, segments = text_inputs(vocab, length=16, batch=2)
    hidden, _ = network.encode(ids, segments)
    with torch.no_grad():
        theirs = model(input_ids=torch.tensor(ids, dtype=torch.long),
                       token_type_ids=torch.tensor(segments, dtype=torch.long)).logits
    np.testing.assert_allclose(network.logits(hidden).numpy(), theirs.numpy(), rtol=TOLERANCE, atol=TOLERANCE)
