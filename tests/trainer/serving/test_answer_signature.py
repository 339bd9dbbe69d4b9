"""`xlnet export` of a fine-tuned SQuAD model: the in-graph ``answer`` signature, served in a fresh
process, equals the Python pipeline (inputs.squad.build_features + the head's beam +
squad_postprocessing.predict_answers)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from tfrecords.text_normalization import normalize_text, normalized_char_origins, normalized_char_origins_graph
from trainer.configs.finetuning import FinetuneConfig
from trainer.evaluation.squad_postprocessing import predict_answers
from trainer.inputs.squad import (
    SquadExample,
    SquadTokenizer,
    build_features,
    context_windows,
    max_context_owners,
    read_squad,
)
from trainer.models.config import model_preset, sequence_model_config
from trainer.models.network import build_network
from trainer.models.question_answering import XLNetForQuestionAnswering
from trainer.runtime.model_dir import ModelDirectory
from trainer.serving.answer_signature import SquadServingConfig, context_pieces_graph, max_context_owner, window_starts
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import WIKI_QA
from support.processes import start, stopped

# One xdist worker runs the module's tests, so that its module fixtures (an export) are built once
pytestmark = pytest.mark.xdist_group("answer_export")


SETTINGS = dict(max_seq_length=64, doc_stride=32, max_query_length=16)
FINETUNE = FinetuneConfig(task="squad", max_answer_length=12, n_best=5, start_n_top=4, end_n_top=3, **SETTINGS)
QUESTIONS_USED = 60  # of the 130, for time; every context of the bundled set spans several windows
TRICKY_CONTEXT = ("  Café  ``crème'' brûlée\u00a0costs   ½ € at\tthe  \u201cLe Bon\u201d  in Zürich;"
                  " ﬁne Ǆ  ''Ωμέγα''   naïve --  \n\n end.  ")
EXTRA = [  # (question, context): accents, quote pairs, whitespace runs, an empty question or context
    ("Where is the café?", TRICKY_CONTEXT),
    ("  What does the ``crème''  cost?  ", TRICKY_CONTEXT),
    ("", TRICKY_CONTEXT),
    ("Is there an answer?", ""),
    ("Only spaces?", " \t\n  "),
    ("Très long question " * 12, "Short context, one window."),
]
STRINGS = [TRICKY_CONTEXT, "  a  b ", "", " ", "ΟΔΟΣ ΣΑΣ İstanbul Ǆ ŉ", "x\u0301\u0302 y ``'' ``` '''"]


def write_squad_dir(path: Path, vocab) -> XLNetForQuestionAnswering:
    """A fine-tuned SQuAD model directory as `xlnet finetune --task squad` writes it, seeded random weights."""
    model = sequence_model_config(model_preset("tiny").replace(vocab_size=vocab.vocab_size, n_layer=2, d_model=64,
                                                               n_head=2, d_head=32, d_inner=128))
    directory = ModelDirectory(str(path))
    directory.write_model_files(model, vocab.special_ids.to_dict(), vocab.path, uncased=False)
    directory.write_finetune_files(FINETUNE, None)
    tf.keras.utils.set_random_seed(5)
    network = build_network(model)
    head = XLNetForQuestionAnswering(network, start_n_top=FINETUNE.start_n_top, end_n_top=FINETUNE.end_n_top)
    # larger output layers than initialisation gives, so that beams are decided by clear margins
    for dense in (head.start_logits.dense, head.end_logits.dense_1, head.answer_class.dense_1):
        dense.kernel.assign(dense.kernel * 30.0)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=network, head=head), directory.checkpoints, 1).save()
    return head


def examples() -> list[SquadExample]:
    """A subset of the bundled questions, then the awkward pairs of EXTRA."""
    bundled = list(read_squad(str(WIKI_QA)).examples[:QUESTIONS_USED])
    return bundled + [SquadExample(f"extra-{n}", question, context, (), False, "extra")
                      for n, (question, context) in enumerate(EXTRA)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, vocab) -> tuple[Path, XLNetForQuestionAnswering]:
    base = tmp_path_factory.mktemp("squad")
    head = write_squad_dir(base / "model", vocab)
    assert xlnet_cli.main(["export", "--model-dir", str(base / "model"), "--output", str(base / "export")]) == 0
    return base / "export" / "1", head


FRESH = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # registers the SentencePiece and normalisation ops
    path, questions, contexts = json.loads(sys.argv[1])
    model = tf.saved_model.load(path)
    outputs = model.signatures["answer"](question=tf.constant(questions), context=tf.constant(contexts))
    result = {k: (v.numpy().astype(object) if v.dtype == tf.string else v.numpy()).tolist() for k, v in outputs.items()}
    result["answer"] = [text.decode("utf-8") for text in result["answer"]]
    try:
        model.signatures["answer"](question=tf.constant(["a", "b"]), context=tf.constant(["c"]))
        mismatch = None
    except tf.errors.InvalidArgumentError as error:
        mismatch = error.message
    edges = {name: {k: v.numpy().tolist() for k, v in model.signatures["answer"](
                 question=tf.constant(q, tf.string), context=tf.constant(c, tf.string)).items() if k != "answer"}
             for name, q, c in (("empty batch", [], []), ("no window at all", ["Who?", ""], ["", " "]))}
    ours = sorted(m for m in sys.modules if m.split(".")[0] in ("trainer", "tfrecords", "pipeline"))
    print(json.dumps({"answers": result, "signatures": sorted(model.signatures), "mismatch": mismatch,
                      "edges": edges, "project_modules": ours}))
""")


@pytest.fixture(scope="module")
def fresh_process(exported) -> subprocess.Popen:
    """The ``answer`` signature called once on every pair, in a new interpreter that imports only
    tensorflow and tensorflow_text; started as soon as the export exists, so that it runs while
    the in-process tests do."""
    pairs = examples()
    request = [str(exported[0]), [e.question for e in pairs], [e.context for e in pairs]]
    with stopped(start(["-c", FRESH, json.dumps(request)], stderr=subprocess.PIPE, cwd="/")) as process:
        yield process


@pytest.fixture(scope="module")
def fresh(fresh_process) -> dict:
    """What the fresh process printed: the served answers, signature names, the error of a
    mismatched batch and the project modules it imported."""
    stdout, stderr = fresh_process.communicate(timeout=300)
    assert fresh_process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.splitlines()[-1])


def windowed(pairs: list[SquadExample]) -> list[int]:
    """Indices of the pairs whose context has a window. (build_features cannot take an empty
    context, which read_squad refuses; the served answer to one is checked on its own.)"""
    return [n for n, pair in enumerate(pairs) if normalize_text(pair.context)]


@pytest.fixture(scope="module")
def python_predictions(exported, vocab):
    """The in-process Python pipeline on the same pairs (those with a window)."""
    _, head = exported
    pairs = [examples()[n] for n in windowed(examples())]
    features = build_features(pairs, SquadTokenizer(vocab, uncased=False), training=False, **SETTINGS)
    beam = {name: value.numpy() for name, value in head(features.model_inputs(with_targets=False)).items()}
    predictions = predict_answers(pairs, features, beam, n_best=FINETUNE.n_best,
                                  max_answer_length=FINETUNE.max_answer_length)
    return pairs, features, beam, predictions


# Order matters for time only: the first test starts the fresh process (fresh_process), and the
# in-process tests after it run while that process loads the export.
def test_the_comparison_would_see_a_wrong_max_context_rule(fresh_process, python_predictions):
    pairs, features, beam, predictions = python_predictions
    every_window = dataclasses.replace(features, token_is_max_context=features.input_mask.astype(bool))
    changed = predict_answers(pairs, every_window, beam, n_best=FINETUNE.n_best,
                              max_answer_length=FINETUNE.max_answer_length)
    assert any(a.text != b.text for a, b in zip(predictions, changed))


# ------------------------------------------------------------------- in-graph steps, no export needed
@pytest.mark.parametrize("uncased", [False, True])
def test_graph_char_origins_and_piece_spans_equal_squad_data(vocab, uncased):
    contexts = [e.context for e in read_squad(str(WIKI_QA)).examples[::6]] + STRINGS
    origins = normalized_char_origins_graph(tf.constant(contexts), uncased)
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), 64, uncased)
    spans = context_pieces_graph(encoder.tokenizer, tf.constant(contexts), uncased)
    tokenizer = SquadTokenizer(vocab, uncased)
    for k, text in enumerate(contexts):
        normalized, starts, ends = normalized_char_origins(text, uncased)
        assert origins["normalized"][k].numpy().decode() == normalized
        assert origins["origin_start"][k].numpy().tolist() == starts.tolist()
        assert origins["origin_end"][k].numpy().tolist() == ends.tolist()
        expected = tokenizer.encode_with_spans(text)
        for name in ("ids", "char_start", "char_end"):
            assert spans[name][k].numpy().tolist() == getattr(expected, name).tolist(), (text, name)


def test_graph_windows_and_max_context_equal_squad_data():
    config = SquadServingConfig(max_length=20, doc_stride=5, max_query_length=6, max_answer_length=5,
                                start_n_top=2, end_n_top=2)
    pieces = [0, 1, 10, 11, 12, 13, 30, 31, 47]
    questions = [0, 6, 3, 6, 1, 2, 6, 0, 4]
    windows = {name: value.numpy() for name, value in window_starts(tf.constant(pieces), tf.constant(questions),
                                                                       config).items()}
    width = max(pieces)
    positions = windows["start"][:, None] + np.arange(width, dtype=np.int32)[None, :]
    owners = max_context_owner({k: tf.constant(v) for k, v in windows.items()}, tf.constant(positions)).numpy()
    for example, (num_pieces, question) in enumerate(zip(pieces, questions)):
        expected = context_windows(num_pieces, config.max_length - question - 3, config.doc_stride)
        rows = np.flatnonzero(windows["example_index"] == example)
        assert list(zip(windows["start"][rows], windows["length"][rows])) == expected
        if expected:
            owner_of = max_context_owners(num_pieces, expected)
            for row, (start, length) in zip(rows, expected):
                assert owners[row, :length].tolist() == owner_of[start:start + length].tolist()


# ------------------------------------------------------------------- served answers
def test_the_export_adds_the_answer_signature(exported, fresh):
    path, _ = exported
    assert fresh["signatures"] == sorted(["serving_default", "encode", "encode_text", "encode_text_pair",
                                          "predict_masked", "score", "score_in_context", "generate", "answer"])
    config = json.loads((path / "assets" / "export_config.json").read_text())
    assert config["task"] == "squad" and "answer" in config["signatures"] and config["max_length"] == 64


def test_the_fresh_process_needs_no_project_code(fresh):
    assert fresh["project_modules"] == []


def test_served_answers_equal_the_python_pipeline(fresh, python_predictions):
    pairs, features, _, predictions = python_predictions
    rows = windowed(examples())
    served = {name: [values[n] for n in rows] for name, values in fresh["answers"].items()}
    assert len(features) > 3 * QUESTIONS_USED  # several windows per context, so max-context matters
    assert served["answer"] == [p.text for p in predictions]
    assert served["char_start"] == [p.char_start for p in predictions]
    assert served["char_end"] == [p.char_end for p in predictions]
    np.testing.assert_allclose(served["score"], [p.score for p in predictions], atol=1e-4, rtol=0)
    np.testing.assert_allclose(served["no_answer_probability"], [p.no_answer_probability for p in predictions],
                               atol=1e-4, rtol=0)
    assert len(set(served["answer"])) > QUESTIONS_USED // 4  # the answers really differ between questions


def test_every_answer_is_its_span_of_the_original_context(fresh):
    served, pairs = fresh["answers"], examples()
    for text, first, end, pair in zip(served["answer"], served["char_start"], served["char_end"], pairs):
        assert text == pair.context[first:end]
        assert text == text.strip() and (text != "") == (first >= 0)


def test_awkward_pairs_have_defined_answers(fresh):
    served = {name: values[QUESTIONS_USED:] for name, values in fresh["answers"].items()}
    empty_context, only_spaces = 3, 4
    for row in (empty_context, only_spaces):  # no window: no answer, certainly unanswerable
        assert (served["answer"][row], served["char_start"][row], served["char_end"][row]) == ("", -1, -1)
        assert served["score"][row] == -1e6 and served["no_answer_probability"][row] == 1.0
    for row in (0, 1, 2, 5):  # accents, quotes, runs of spaces, an empty or a cut question: real answers
        assert served["answer"][row] != "" and served["score"][row] > -1e6


def test_an_empty_batch_and_a_batch_without_any_window_run(fresh):
    assert fresh["edges"]["empty batch"] == {"char_start": [], "char_end": [], "score": [],
                                             "no_answer_probability": []}
    assert fresh["edges"]["no window at all"] == {"char_start": [-1, -1], "char_end": [-1, -1],
                                                  "score": [-1e6, -1e6], "no_answer_probability": [1.0, 1.0]}


def test_batches_of_different_sizes_are_refused(fresh):
    assert "question and context must hold the same number of strings" in fresh["mismatch"]
