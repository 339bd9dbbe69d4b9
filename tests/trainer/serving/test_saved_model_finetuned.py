"""`xlnet export` of fine-tuned models: classify, regress and choose signatures, served in a fresh process."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from trainer.inputs import sequence_examples
from trainer.models.sequence_model import XLNetForSequenceTask
from trainer.runtime.model_dir import ModelDirectory
from trainer.serving import text_encoder
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import ROTTEN
from support.finetuned_dirs import write_finetuned_dir
from support.served_signatures import served_in_a_fresh_process

# Slow as a whole: its three fine-tuned exports (classification, regression, multiple choice, each
# with the scoring and generation signatures) take about 100 s to build, a sixth of the default suite.
# One xdist worker runs the module's tests, so that its module fixtures (three exports) are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("finetuned_exports")]

MAX_SEQ_LENGTH = 24  # two length buckets: 16 and 24
LABELS = ("fresh", "rotten", "mixed")


def dev_texts(count: int, offset: int = 0) -> list[str]:
    rows = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()[1 + offset:1 + offset + count]
    return [row.split("\t")[0] for row in rows]


def export(model_dir: Path, output: Path) -> Path:
    assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--output", str(output)]) == 0
    return output / "1"


@pytest.fixture(scope="module")
def exports(tmp_path_factory, vocab) -> dict[str, tuple[Path, XLNetForSequenceTask]]:
    base = tmp_path_factory.mktemp("finetuned")
    made = {}
    for task, labels, pair in (("classification", LABELS, False), ("regression", None, True),
                               ("multiple-choice", None, False)):
        head = write_finetuned_dir(base / task, vocab, task, MAX_SEQ_LENGTH, labels, pair)
        made[task] = (export(base / task, base / f"{task}-export"), head)
    return made


@pytest.fixture(scope="module")
def loaded(exports) -> dict:
    return {task: tf.saved_model.load(str(path)) for task, (path, _) in exports.items()}


@pytest.fixture(scope="module")
def encoder(vocab) -> XLNetTextEncoder:
    return XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), MAX_SEQ_LENGTH, uncased=False)


def numpy(outputs: dict) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in outputs.items()}


# -------------------------------------------------------------------------------- layout
@pytest.mark.parametrize("task,signatures", [("classification", {"classify", "classify_ids"}),
                                             ("regression", {"regress", "regress_ids"}),
                                             ("multiple-choice", {"choose", "choose_ids"})])
def test_a_finetuned_export_adds_its_task_signatures_to_the_encoders(exports, loaded, task, signatures):
    path, _ = exports[task]
    assert set(loaded[task].signatures) == {"serving_default", "encode", "encode_text", "encode_text_pair",
                                      "predict_masked", "score", "score_in_context", "generate"} | signatures
    config = json.loads((path / "assets" / "export_config.json").read_text())
    assert config["task"] == task and set(config["signatures"]) >= signatures
    assert config["max_length"] == MAX_SEQ_LENGTH  # the fine-tuned max_seq_length, without --max-length


def test_a_model_finetuned_on_one_segment_exports_one_segment_signatures(exports, loaded):
    """max_segments 1 (the default): no memory, ids [batch, length] in and out, as before long texts."""
    path, _ = exports["classification"]
    config = json.loads((path / "assets" / "export_config.json").read_text())
    assert (config["max_segments"], config["mem_len"]) == (1, 0)
    ids_spec = loaded["classification"].signatures["classify_ids"].structured_input_signature[1]["input_ids"]
    assert ids_spec.shape.as_list() == [None, None]
    outputs = loaded["classification"].signatures["encode_text"](text=tf.constant(["A gem.", ""]))
    assert outputs["input_ids"].shape == (2, MAX_SEQ_LENGTH)
    assert outputs["sequence_output"].shape == (2, MAX_SEQ_LENGTH, 128)


# --------------------------------------------------------------------------------- fresh process
TEXTS, TEXTS_B = dev_texts(6), dev_texts(6, offset=10)
CONTEXTS = dev_texts(3, offset=20)
QUESTIONS = ["The critic found the film _.", "Overall verdict:", ""]
OPTIONS = [["moving", "boring"], ["fresh", "rotten"], ["worth seeing", "skip it"]]


@pytest.fixture(scope="module")
def fresh(exports) -> dict[str, dict]:
    """Each task signature called in ONE new interpreter that imports only tensorflow and tensorflow_text."""
    requests = [["classify", str(exports["classification"][0]), "classify", {"text": TEXTS}],
                ["regress", str(exports["regression"][0]), "regress", {"text": TEXTS, "text_b": TEXTS_B}],
                ["choose", str(exports["multiple-choice"][0]), "choose",
                 {"context": CONTEXTS, "question": QUESTIONS, "options": OPTIONS}]]
    return served_in_a_fresh_process(requests, timeout=300)


def test_the_fresh_process_needs_no_project_code(fresh):
    assert fresh["project_modules"] == []


def test_served_classify_equals_the_in_process_model(exports, encoder, fresh):
    _, head = exports["classification"]
    served = fresh["results"]["classify"]
    probabilities = tf.nn.softmax(head(encoder.encode(tf.constant(TEXTS)), training=False)).numpy()
    np.testing.assert_allclose(served["probabilities"], probabilities, atol=1e-6)
    assert served["label_ids"] == probabilities.argmax(axis=1).tolist()
    assert served["label_names"] == [LABELS[i] for i in probabilities.argmax(axis=1)]
    assert len(np.unique(probabilities.round(6), axis=0)) == len(TEXTS)  # the texts really are told apart


def test_classify_ids_shorter_than_max_length_equal_full_padding(loaded, encoder):
    loaded = loaded["classification"]
    texts = ["A gem.", "Dull and far too slow."]  # both shorter than the smallest bucket
    full = numpy(loaded.signatures["classify"](text=tf.constant(texts)))
    inputs = {name: value.numpy() for name, value in encoder.encode(tf.constant(texts)).items()}
    own = int(inputs["input_mask"].sum(axis=1).max())
    for length in (own, own + 3, 17, MAX_SEQ_LENGTH):
        cut = {name: tf.constant(value[:, -length:]) for name, value in inputs.items()}
        short = numpy(loaded.signatures["classify_ids"](**cut))
        np.testing.assert_allclose(short["probabilities"], full["probabilities"], atol=1e-6)
        np.testing.assert_array_equal(short["label_names"], full["label_names"])


def test_served_regress_on_pairs_equals_the_in_process_model(exports, encoder, fresh):
    _, head = exports["regression"]
    scores = head(encoder.encode(tf.constant(TEXTS), tf.constant(TEXTS_B)), training=False).numpy()
    np.testing.assert_allclose(fresh["results"]["regress"]["score"], scores, atol=1e-5)


def choice_features(encoder, tmp_path) -> dict[str, tf.Tensor]:
    """The training encoding (sequence_examples.choice_dataset) of the served questions."""
    rows = [{"context": c, "question": q, "options": o, "label": 0} for c, q, o in zip(CONTEXTS, QUESTIONS, OPTIONS)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    examples = sequence_examples.read_choice_examples(str(tmp_path / "q.jsonl"))
    return next(iter(sequence_examples.choice_dataset(examples, encoder, batch_size=3)))


def test_served_choose_equals_the_in_process_model_on_the_training_layout(exports, encoder, fresh, tmp_path):
    _, head = exports["multiple-choice"]
    expected = tf.nn.softmax(head(choice_features(encoder, tmp_path), training=False)).numpy()
    served = fresh["results"]["choose"]
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-6)
    assert served["choice"] == expected.argmax(axis=1).tolist()


def test_choose_ids_shorter_than_max_length_equal_full_padding(loaded, encoder, tmp_path):
    features = {name: value.numpy() for name, value in choice_features(encoder, tmp_path).items()}
    own = int(features["input_mask"].sum(axis=2).max())
    loaded = loaded["multiple-choice"]
    full = loaded.signatures["choose_ids"](**{k: tf.constant(v) for k, v in features.items()})["probabilities"]
    short = loaded.signatures["choose_ids"](**{k: tf.constant(v[:, :, -own:]) for k, v in features.items()})
    np.testing.assert_allclose(short["probabilities"].numpy(), full.numpy(), atol=1e-6)


def test_question_with_option_is_the_same_in_python_and_in_the_graph():
    questions = ["Who _ the race?", "Best title:", "", "Fill _ and _ (twice)", r"a\b _"]
    options = ["won", "The End", "alone", "it", r"c\1$0"]
    graph = text_encoder.question_with_option_graph(tf.constant(questions), tf.constant(options)).numpy()
    assert [value.decode() for value in graph] == [text_encoder.question_with_option(q, o)
                                                   for q, o in zip(questions, options)]


def test_a_classification_directory_without_labels_is_refused(tmp_path, vocab, capsys):
    write_finetuned_dir(tmp_path / "m", vocab, "classification", MAX_SEQ_LENGTH, LABELS)
    (tmp_path / "m" / ModelDirectory.LABELS).unlink()
    assert xlnet_cli.main(["export", "--model-dir", str(tmp_path / "m"), "--output", str(tmp_path / "out")]) == 2
    assert "classification model without labels.json" in capsys.readouterr().err
