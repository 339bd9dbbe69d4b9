"""Exports of models fine-tuned with ``max_segments`` N: ``classify`` and ``choose`` read texts N
segments long as fine-tuning does, served in a fresh process (local and gs://), and agree with
`xlnet finetune`'s own predictions. Every test here exports (about 30 s each) or fine-tunes: slow."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from trainer.inputs import sequence_examples
from trainer.models.sequence_model import XLNetForSequenceTask
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import REPO, ROTTEN, corpus_lines
from support.finetuned_dirs import write_finetuned_dir
from support.processes import output_of, start
from support.served_signatures import served_in_a_fresh_process

# One xdist worker runs the module's tests, so that its module fixtures (fine-tuned runs and exports) are built once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("finetuned_segments_exports")]

MAX_SEQ_LENGTH, SEGMENTS, MEM_LEN = 16, 3, 24


def texts(count: int, skip: int) -> list[str]:
    """Texts of mixed lengths: from a few pieces to more than SEGMENTS segments."""
    lines = corpus_lines(count, skip=skip, longer_than=20)
    return [" ".join(lines[i:i + 1 + i % 4]) for i in range(count)]


def served(requests: list) -> dict:
    """The outputs of each request, called in one fresh interpreter that imports only tensorflow and
    tensorflow_text (and reads gs:// through the emulator's environment)."""
    served = served_in_a_fresh_process(requests)
    assert served["project_modules"] == []
    return served["results"]


def export(model_dir: Path, output: str) -> str:
    """`xlnet export` with the fine-tuned defaults (max_length, max_segments and mem_len from the directory)."""
    assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--output", output]) == 0
    return f"{output.rstrip('/')}/1"


@pytest.fixture(scope="module")
def encoder(vocab) -> XLNetTextEncoder:
    return XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), MAX_SEQ_LENGTH, uncased=False)


# ---------------------------------------------------------------------- served equals in-process
CONTEXTS = texts(3, skip=80)
QUESTIONS = ["The text is about _.", "Which title fits?", ""]
OPTIONS = [["music", "a river"], ["History", "Science"], ["yes", "no"]]


@pytest.fixture(scope="module")
def chooser(tmp_path_factory, vocab) -> tuple[XLNetForSequenceTask, dict]:
    """A multiple-choice model fine-tuned with max_segments 3 (seeded weights), exported, and its
    ``choose`` called in a fresh process. (Single texts and pairs: the agreement test below and
    test_saved_model_segments.py.)"""
    base = tmp_path_factory.mktemp("finetuned-segments")
    head = write_finetuned_dir(base / "choice", vocab, "multiple-choice", MAX_SEQ_LENGTH, max_segments=SEGMENTS,
                               mem_len=MEM_LEN, seed=4)
    path = export(base / "choice", str(base / "export"))
    config = json.loads((Path(path) / "assets" / "export_config.json").read_text())
    assert (config["max_segments"], config["mem_len"]) == (SEGMENTS, MEM_LEN)  # the fine-tuned defaults
    inputs = {"context": CONTEXTS, "question": QUESTIONS, "options": OPTIONS}
    return head, served([["choose", path, "choose", inputs]])["choose"]


def test_served_choose_on_long_contexts_equals_the_in_process_model(chooser, encoder, tmp_path):
    rows = [{"context": c, "question": q, "options": o, "label": 0} for c, q, o in zip(CONTEXTS, QUESTIONS, OPTIONS)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    examples = sequence_examples.read_choice_examples(str(tmp_path / "q.jsonl"))
    features = next(iter(sequence_examples.choice_dataset(examples, encoder, batch_size=3, max_segments=SEGMENTS)))
    assert features["input_ids"].shape[1:] == (2, SEGMENTS, MAX_SEQ_LENGTH)
    assert features["input_mask"].numpy()[:, :, 0].any()  # the contexts do reach the first segment
    head, result = chooser
    expected = tf.nn.softmax(head(features, training=False)).numpy()
    np.testing.assert_allclose(result["probabilities"], expected, atol=1e-5)
    assert result["choice"] == expected.argmax(axis=1).tolist()


# ------------------------------------------------------------------- agreement with xlnet finetune
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", f"max_seq_length={MAX_SEQ_LENGTH}",
         f"max_segments={SEGMENTS}", f"mem_len={MEM_LEN}", "train_batch_size=16", "eval_batch_size=100",
         "train_steps=150", "steps_per_loop=50", "warmup_steps=2", "learning_rate=1e-3"]


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, spm_model) -> Path:
    """A classifier fine-tuned briefly from random weights with max_segments 3, its --test file the
    1000 Rotten Tomatoes dev reviews (1 to 3 segments of 16 pieces, some longer)."""
    root = tmp_path_factory.mktemp("agreement")
    dev = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()
    (root / "eval.tsv").write_text("\n".join(dev[:101]) + "\n", encoding="utf-8")
    model_dir = root / "model"
    args = ["xlnet_cli.py", "finetune", "--task", "classification", "--train", str(ROTTEN / "train.tsv"),
            "--eval", str(root / "eval.tsv"), "--test", str(ROTTEN / "dev.tsv"), "--vocab", spm_model,
            "--preset", "tiny", "--model-dir", str(model_dir)]
    for item in SMALL:
        args += ["--set", item]
    process = start(args, cwd=REPO)
    output, = output_of(process, timeout=900)
    assert process.returncode == 0, output[-3000:]
    return model_dir


def dev_reviews() -> list[str]:
    return [row.split("\t")[0] for row in (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]


def test_served_classify_from_a_bucket_agrees_with_xlnet_finetunes_predictions(finetuned, encoder, gcs_prefix):
    reviews = dev_reviews()
    reached = encoder.encode_segments(tf.constant(reviews), max_segments=SEGMENTS)["input_mask"].numpy().any(axis=2)
    assert set(reached.sum(axis=1)) == {1, 2, 3}  # mixed lengths: one, two and three segments
    path = export(finetuned, f"{gcs_prefix.rstrip('/')}/serving")
    assert path.startswith("gs://") and tf.io.gfile.exists(f"{path}/saved_model.pb")
    batches = [reviews[start:start + 250] for start in range(0, len(reviews), 250)]
    results = served([[str(i), path, "classify", {"text": batch}]
                                         for i, batch in enumerate(batches)])
    probabilities = np.concatenate([results[str(i)]["probabilities"] for i in range(len(batches))])
    labels = sum((results[str(i)]["label_names"] for i in range(len(batches))), [])
    rows = [json.loads(line) for line in (finetuned / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(reviews) == 1000
    np.testing.assert_allclose(probabilities, [row["probabilities"] for row in rows], atol=1e-4)
    agreeing = sum(label == row["label"] for label, row in zip(labels, rows))
    assert agreeing >= 0.999 * len(rows), agreeing
    assert probabilities.std(axis=0).max() > 0.02  # the model tells the reviews apart
