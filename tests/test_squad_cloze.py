"""The generated cloze QA set (trainer/squad_cloze.py) on the bundled Wikipedia text, its trivial
baselines, and the proof that the SQuAD head learns span extraction from it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import read_corpus_documents
from trainer.squad_cloze import FUNCTION_WORDS, cloze_squad, trivial_answers
from trainer.squad_data import read_squad
from trainer.squad_metrics import squad_evaluate

REPO = Path(__file__).resolve().parents[1]
WIKI = REPO / "data" / "corpus" / "wiki_summaries_en.txt.gz"
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
