"""SQuAD inputs (trainer/inputs/squad.py) on the bundled hand-written set data/squad/wiki_qa_v2.json
and paragraphs of the bundled corpus."""
from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfrecords.schema import SEG_A, SEG_B, SEG_CLS
from tfrecords.text_normalization import normalize_text
from trainer.inputs.squad import (
    SquadDataError,
    SquadTokenizer,
    answer_piece_range,
    build_features,
    context_windows,
    max_context_owners,
    max_context_window,
    read_squad,
)
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import WIKI_QA, WIKI_SUMMARIES as WIKI, read_corpus_documents
from support.squad_settings import WINDOWS, windows


def write_squad(path: Path, paragraphs: list[dict]) -> str:
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}), encoding="utf-8")
    return str(path)


def raises_for(path: str, where: str, message: str) -> pytest.RaisesExc:
    return pytest.raises(SquadDataError, match="^" + re.escape(f"{path}: {where}") + message)


# ---------------------------------------------------------------------------------------- reading
def test_the_bundled_set_reads_as_squad2_with_130_questions_21_unanswerable(wiki_qa):
    assert wiki_qa.version_2
    assert len(wiki_qa.examples) == 130
    assert sum(example.is_impossible for example in wiki_qa.examples) == 21
    first = wiki_qa.examples[0]
    assert (first.qid, first.question, first.answers[0].text, first.answers[0].start) == (
        "wiki-00001-00", "Who directed 2001: A Space Odyssey?", "Stanley Kubrick", 83)
    assert first.context[83:98] == "Stanley Kubrick"


def test_a_squad_file_on_cloud_storage_reads_like_the_local_one(gcs_prefix, wiki_qa):
    remote = posixpath.join(gcs_prefix, "squad", "dev.json")
    tf.io.gfile.makedirs(posixpath.dirname(remote))
    tf.io.gfile.copy(str(WIKI_QA), remote)
    data = read_squad(posixpath.join(gcs_prefix, "squad", "*.json"))
    assert data.examples == tuple(dataclasses.replace(e, path=remote) for e in wiki_qa.examples)


def test_gold_answers_list_every_answer_and_none_for_unanswerable(wiki_qa):
    golds = wiki_qa.gold_answers()
    assert golds["wiki-00008-00"] == ["the Parthenon", "Parthenon"]
    assert golds["wiki-00001-05"] == []


def test_a_file_without_is_impossible_is_squad11(tmp_path):
    context = " ".join(read_corpus_documents(WIKI, 2)[1])
    path = write_squad(tmp_path / "v1.json", [{"context": context, "qas": [
        {"id": "q1", "question": "Who directed it?", "answers": [{"text": "Stanley Kubrick", "answer_start": 83}]}]}])
    data = read_squad(path)
    assert not data.version_2 and data.examples[0].answers[0].text == "Stanley Kubrick"


def test_a_missing_field_names_file_and_question(tmp_path):
    path = write_squad(tmp_path / "bad.json", [{"context": "Some text.", "qas": [
        {"id": "q7", "answers": [{"text": "Some", "answer_start": 0}]}]}])
    with raises_for(path, "question 'q7'", ": missing field 'question'"):
        read_squad(path)


def test_an_answer_start_outside_the_context_names_file_and_question(tmp_path):
    path = write_squad(tmp_path / "bad.json", [{"context": "Short text.", "qas": [
        {"id": "q3", "question": "What?", "answers": [{"text": "text", "answer_start": 40}]}]}])
    with raises_for(path, "question 'q3'", r": answers\[0\]: answer_start 40 with 4 characters is outside the context"):
        read_squad(path)


def test_an_answer_text_that_differs_from_the_context_there_names_file_and_question(tmp_path):
    path = write_squad(tmp_path / "bad.json", [{"context": "Short text.", "qas": [
        {"id": "q4", "question": "What?", "answers": [{"text": "text", "answer_start": 0}]}]}])
    with raises_for(path, "question 'q4'", r": answers\[0\]: the context at answer_start 0 reads 'Shor'"):
        read_squad(path)


def test_an_empty_context_names_file_and_its_first_question(tmp_path):
    path = write_squad(tmp_path / "bad.json", [{"context": " \n\u0301 ", "qas": [
        {"id": "q5", "question": "What?", "answers": []}]}])
    with raises_for(path, r"data[0].paragraphs[0] (question 'q5')", ": empty context"):
        read_squad(path)


def test_a_duplicate_id_and_an_unanswerable_question_with_answers_are_refused(tmp_path):
    qa = {"id": "q1", "question": "What?", "answers": [{"text": "Short", "answer_start": 0}]}
    path = write_squad(tmp_path / "dup.json", [{"context": "Short text.", "qas": [qa, qa]}])
    with raises_for(path, "question 'q1'", r": duplicate id"):
        read_squad(path)
    path = write_squad(tmp_path / "imp.json", [{"context": "Short text.", "qas": [{**qa, "is_impossible": True}]}])
    with raises_for(path, "question 'q1'", r": is_impossible is true but the question has 1 answer"):
        read_squad(path)


# ------------------------------------------------------------------------------------ alignment
def test_piece_ids_equal_the_serving_encoders(wiki_qa, squad_tokenizer, vocab):
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), max_length=512, uncased=False)
    contexts = sorted({example.context for example in wiki_qa.examples})
    texts = contexts + [example.question for example in wiki_qa.examples]
    served = encoder.tokenize(tf.constant(texts)).to_list()
    ours = [squad_tokenizer.encode_with_spans(text).ids.tolist() for text in contexts]
    ours += [squad_tokenizer.encode(example.question) for example in wiki_qa.examples]
    assert ours == served


def test_every_bundled_answer_maps_to_pieces_whose_span_is_the_answer(wiki_qa, squad_tokenizer):
    # answers are whole words, and the vocabulary splits at spaces, quotes and dashes: the
    # original text between the first and last answer piece is exactly the answer
    for example in wiki_qa.examples:
        spans = squad_tokenizer.encode_with_spans(example.context)
        for answer in example.answers:
            first, last = answer_piece_range(spans, answer.start, answer.end)
            assert example.context[spans.char_start[first]:spans.char_end[last]] == answer.text, example.qid


def test_an_answer_with_accents_is_returned_with_its_accents(wiki_qa, squad_tokenizer):
    example = next(e for e in wiki_qa.examples if e.qid == "wiki-00100-01")  # Prosper Mérimée
    spans = squad_tokenizer.encode_with_spans(example.context)
    first, last = answer_piece_range(spans, example.answers[0].start, example.answers[0].end)
    assert example.context[spans.char_start[first]:spans.char_end[last]] == "Prosper Mérimée"


def test_an_uncased_model_still_returns_the_original_capitals(wiki_qa, vocab):
    uncased = SquadTokenizer.from_model_proto(vocab.model_proto, uncased=True)
    example = next(e for e in wiki_qa.examples if e.qid == "wiki-00325-00")  # Diego Velázquez
    spans = uncased.encode_with_spans(example.context)
    assert spans.ids.tolist() == uncased.processor.encode(normalize_text(example.context, uncased=True))
    first, last = answer_piece_range(spans, example.answers[0].start, example.answers[0].end)
    assert example.context[spans.char_start[first]:spans.char_end[last]] == "Diego Velázquez"


# -------------------------------------------------------------------------------------- windows
def test_windows_advance_by_the_stride_until_one_reaches_the_end():
    # 10 pieces, budget 4, stride 3: [0..3], [3..6], [6..9]
    assert context_windows(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    # a window shorter than the stride advances by its length: one window
    assert context_windows(3, 4, 128) == [(0, 3)]


def test_the_max_context_window_maximises_the_smaller_side():
    windows = [(0, 4), (3, 4), (6, 4)]
    # piece 4: only window 1 holds it...; piece 3: window 0 (left 3, right 0) -> 0.04,
    # window 1 (left 0, right 3) -> 0.04: the first wins; piece 5: window 1 (2, 1) -> 1.04
    assert max_context_window(windows, 4) == 1
    assert max_context_window(windows, 3) == 0
    assert max_context_window(windows, 5) == 1
    assert max_context_owners(10, windows).tolist() == [max_context_window(windows, p) for p in range(10)]


# ------------------------------------------------------------------------------------- features
def test_a_feature_is_left_padded_context_sep_question_sep_cls(wiki_qa, squad_tokenizer, vocab):
    example = wiki_qa.examples[0]
    features = build_features([example], squad_tokenizer, training=True, **windows(max_seq_length=256))
    special = vocab.special_ids
    context = squad_tokenizer.encode_with_spans(example.context).ids.tolist()
    question = squad_tokenizer.encode(example.question)
    real = len(context) + len(question) + 3
    pad = 256 - real
    assert len(features) == 1
    assert features.input_ids[0].tolist() == [special.pad] * pad + context + [special.sep] + question + [
        special.sep, special.cls]
    assert features.segment_ids[0].tolist() == [SEG_A] * (pad + len(context) + 1) + [SEG_B] * (len(question) + 1) + [
        SEG_CLS]
    assert features.input_mask[0].tolist() == [0] * pad + [1] * real
    assert features.p_mask[0].tolist() == [1.0] * pad + [0.0] * len(context) + [1.0] * (len(question) + 2) + [0.0]


def test_training_targets_point_at_the_answer_pieces(wiki_qa, squad_tokenizer):
    example = wiki_qa.examples[0]
    features = build_features([example], squad_tokenizer, training=True, **windows(max_seq_length=256))
    start, end = features.start_positions[0], features.end_positions[0]
    text = example.context[features.token_char_start[0, start]:features.token_char_end[0, end]]
    assert text == "Stanley Kubrick" and features.is_impossible[0] == 0.0


def test_an_unanswerable_question_targets_cls(wiki_qa, squad_tokenizer):
    example = next(e for e in wiki_qa.examples if e.is_impossible)
    features = build_features([example], squad_tokenizer, training=True, **windows(max_seq_length=256))
    assert features.start_positions.tolist() == features.end_positions.tolist() == [255]
    assert features.is_impossible.tolist() == [1.0]


def test_long_contexts_slide_and_answers_outside_a_window_target_cls(wiki_qa, squad_tokenizer):
    example = next(e for e in wiki_qa.examples if e.qid == "wiki-00389-03")  # "1986", late in the paragraph
    features = build_features([example], squad_tokenizer, training=True, **windows(max_seq_length=64, doc_stride=16, max_query_length=16))
    pieces = len(squad_tokenizer.encode_with_spans(example.context).ids)
    budget = 64 - len(squad_tokenizer.encode(example.question)) - 3
    assert len(features) == len(context_windows(pieces, budget, 16)) > 2
    inside = features.is_impossible == 0.0
    assert 1 <= inside.sum() < len(features)
    assert (features.start_positions[~inside] == 63).all()
    for row in np.flatnonzero(inside):
        start, end = features.start_positions[row], features.end_positions[row]
        assert example.context[features.token_char_start[row, start]:features.token_char_end[row, end]] == "1986"
    # every context piece is the max-context piece of exactly one window
    assert features.token_is_max_context.sum() == pieces


def test_long_questions_are_truncated_and_counted(wiki_qa, squad_tokenizer):
    features = build_features(wiki_qa.examples[:10], squad_tokenizer, training=False, **windows(max_seq_length=128, max_query_length=6))
    long_questions = sum(len(squad_tokenizer.encode(e.question)) > 6 for e in wiki_qa.examples[:10])
    assert features.truncated_questions == long_questions > 0
    assert (features.input_mask.sum(axis=1) <= 128).all()


def test_an_answer_the_normalisation_drops_is_counted_and_skipped_when_training(tmp_path, squad_tokenizer):
    # the answer is the combining acute accent of "Cafe\u0301": normalisation strips it
    path = write_squad(tmp_path / "accent.json", [{"context": "Cafe\u0301 noir is strong.", "qas": [
        {"id": "acc", "question": "Which mark?", "answers": [{"text": "\u0301", "answer_start": 4}]},
        {"id": "ok", "question": "Which drink?", "answers": [{"text": "noir", "answer_start": 6}]}]}])
    examples = read_squad(path).examples
    training = build_features(examples, squad_tokenizer, training=True, **windows(max_seq_length=64, max_query_length=16))
    assert training.unaligned == ("acc",) and training.example_index.tolist() == [1]
    evaluation = build_features(examples, squad_tokenizer, training=False, **windows(max_seq_length=64, max_query_length=16))
    assert evaluation.unaligned == ("acc",) and evaluation.example_index.tolist() == [0, 1]
    assert evaluation.start_positions[0] == 63


def test_the_whole_bundled_set_builds_at_the_default_settings(wiki_qa, squad_tokenizer):
    features = build_features(wiki_qa.examples, squad_tokenizer, training=True, **WINDOWS)
    assert len(features) == 130 and features.input_ids.shape == (130, 512)
    assert features.unaligned == () and features.truncated_questions == 0
    assert (features.is_impossible == 1.0).sum() == 21
