"""The generated cloze QA set (tests/support/squad_cloze.py) on the bundled Wikipedia text, its trivial
baselines, and the proof that the SQuAD head learns span extraction from it."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.evaluation.squad_official import squad_evaluate
from trainer.inputs.squad import read_squad

from support.bundled_data import REPO, WIKI_SUMMARIES as WIKI, read_corpus_documents
from support.squad_cloze import FUNCTION_WORDS, cloze_squad, held_out_cloze, paragraphs, trivial_answers

WORD = re.compile(r"[^\W_]+(?:['\-.][^\W_]+)*")  # what the generator counts as a word


def written(tmp_path: Path, dataset: dict, name: str = "cloze.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(dataset), encoding="utf-8")
    return str(path)


def test_cloze_questions_blank_a_span_that_stands_in_the_context(tmp_path):
    dataset = cloze_squad(read_corpus_documents(WIKI, 30), seed=3, impossible_fraction=0.2)
    data = read_squad(written(tmp_path, dataset))  # answer offsets are checked by the reader
    answerable = [e for e in data.examples if not e.is_impossible]
    assert data.version_2 and len(answerable) >= 15 and len(data.examples) - len(answerable) >= 2
    for example in answerable:
        assert example.question.count("_") >= 1
        assert example.question.replace("_", example.answers[0].text, 1) in example.context
    assert cloze_squad(read_corpus_documents(WIKI, 30), seed=3, impossible_fraction=0.2) == dataset


def test_unanswerable_cloze_questions_come_from_another_paragraph(tmp_path):
    data = read_squad(written(tmp_path, cloze_squad(read_corpus_documents(WIKI, 30), seed=3,
                                                    impossible_fraction=0.5)))
    for example in (e for e in data.examples if e.is_impossible):
        before, after = example.question.split("_", 1)
        assert not (before in example.context and after in example.context and before + after)


def test_blanked_spans_begin_and_end_on_content_words(tmp_path):
    data = read_squad(written(tmp_path, cloze_squad(read_corpus_documents(WIKI, 200), seed=5, max_span_words=3)))
    words = [WORD.findall(example.answers[0].text) for example in data.examples]
    assert len(words) >= 150 and all(1 <= len(span) <= 3 for span in words)
    assert not any(span[0].lower() in FUNCTION_WORDS or span[-1].lower() in FUNCTION_WORDS for span in words)


def test_question_words_keeps_that_many_words_each_side_of_the_blank(tmp_path):
    documents = read_corpus_documents(WIKI, 200)
    whole = read_squad(written(tmp_path, cloze_squad(documents, seed=5), "whole.json")).examples
    cut = read_squad(written(tmp_path, cloze_squad(documents, seed=5, question_words=4), "cut.json")).examples
    assert [e.answers for e in cut] == [e.answers for e in whole]  # the same draws, shorter questions
    for short, full in zip(cut, whole):
        before, after = short.question.split("_")
        assert len(WORD.findall(before)) <= 4 and len(WORD.findall(after)) <= 4
        assert short.question.replace("_", short.answers[0].text) in full.question.replace("_", full.answers[0].text)
    assert sum(len(e.question) for e in cut) < 0.7 * sum(len(e.question) for e in whole)


def test_trivial_answers_are_words_of_the_context_and_score_low(tmp_path):
    dataset = cloze_squad(read_corpus_documents(WIKI, 300), seed=1, max_span_words=1)
    data = read_squad(written(tmp_path, dataset))
    first = trivial_answers(dataset, words=1)
    seeded = trivial_answers(dataset, words=1, seed=0)
    assert set(first) == set(seeded) == {e.qid for e in data.examples}
    for example in data.examples:
        assert first[example.qid] == WORD.findall(example.context)[0] and seeded[example.qid] in example.context
    assert seeded == trivial_answers(dataset, words=1, seed=0) != first
    for answers in (first, seeded):
        assert squad_evaluate(data.gold_answers(), answers)["f1"] < 10


def test_paragraphs_cut_documents_into_consecutive_runs_of_sentences():
    documents = [["a.", "b.", "c."], ["d."], ["e.", "f."]]
    assert paragraphs(documents, 2) == [["a.", "b."], ["c."], ["d."], ["e.", "f."]]
    assert paragraphs(documents, 3) == [["a.", "b.", "c."], ["d."], ["e.", "f."]]


# ------------------------------------------------------------------------------ learnability
# support.squad_cloze.SHORT_CLOZE in paragraphs of one sentence, which one 64-piece window holds;
# a 3-layer model from random weights, without dropout (with it, the same run learns about three
# times slower), deterministic=true (two runs of one command otherwise part bitwise at step ~110 on
# threaded float sums and follow different curves). In paragraphs of two sentences and 96-piece
# windows (until 2026-11-28) exact match left the baselines' level only after 250-750 steps, when
# the model found the question's words in the context, and when was chance: F1 at step 1500 was
# 89.7, 77.4, 29.1 and 29.2 for seeds 0-3, so the test ran 2000 steps (426 s of CI). With one
# sentence per paragraph the model learns steadily from the start for every seed tried, and a step
# takes 0.61 of the time (64 pieces, not 96; measured side by side). Measured (2026-11-28, eval
# every 250 steps of 2000-step runs), exact / F1 at steps 250, 500, 1000: seed 0 12.4 / 19.9,
# 29.9 / 37.8, 54.0 / 68.3; seed 2 19.8 / 26.3, 43.0 / 55.3, 54.7 / 69.3; the baselines at most
# 6.4 / 10.7. The test's 1000-step runs (the learning rate decays sooner) ended at 53.7 / 65.7
# (seed 0) and 63.8 / 78.8 (seed 2): past the 10-point margins by about 40 points for both seeds,
# which had cleared them already at step 500. So the test runs 500 steps (2026-11-28, issue 44: half
# the CI time of its 1000): its run (seed 0, the learning rate decaying over the 500) ends at exact
# 27.5 / F1 37.3 on 298 held-out questions, the baselines at most 6.4 / 10.7, so it still clears
# both 10-point margins, by 11 and 17 points; a head that learned no span extraction stays at the
# baselines' level and fails them.
LEARNING = ["--max-seq-length", "64", "--doc-stride", "32", "--max-query-length", "24",
            "--set", "n_layer=3", "--set", "d_inner=256", "--set", "dropout=0", "--set", "dropatt=0",
            "--set", "learning_rate=2e-3", "--set", "warmup_steps=100", "--set", "deterministic=true",
            "--set", "train_steps=500", "--set", "eval_every=500", "--set", "checkpoint_every=500"]


@pytest.mark.slow
def test_a_short_finetune_on_cloze_beats_the_trivial_baselines_on_held_out_paragraphs(tmp_path, spm_model):
    train, held_out = held_out_cloze(read_corpus_documents(WIKI, 10000), held_out_from=9000,
                                     train_paragraphs=20000, eval_paragraphs=300, sentences=1)
    args = ["finetune", "--task", "squad", "--train", written(tmp_path, train, "train.json"),
            "--eval", written(tmp_path, held_out, "dev.json"), "--vocab", spm_model, "--preset", "tiny",
            "--model-dir", str(tmp_path / "model"), *LEARNING]
    completed = subprocess.run([sys.executable, "-m", "xlnet_cli", *args], cwd=REPO, capture_output=True, text=True,
                               timeout=1800, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]

    learned = json.loads((tmp_path / "model" / "eval_results.json").read_text())
    gold = read_squad(str(tmp_path / "dev.json")).gold_answers()
    baselines = [squad_evaluate(gold, trivial_answers(held_out, words, seed))
                 for words in (1, 2) for seed in (None, 0, 1)]
    assert learned["total"] == len(gold) >= 250
    assert learned["f1"] > max(b["f1"] for b in baselines) + 10, (learned, baselines)
    assert learned["exact"] > max(b["exact"] for b in baselines) + 10, (learned, baselines)
