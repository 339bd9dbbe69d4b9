"""SQuAD post-processing (trainer/evaluation/squad_postprocessing.py): beams over windows -> answers as spans of
the original text, on features of the bundled set data/squad/wiki_qa_v2.json."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from trainer.evaluation.squad_postprocessing import evaluate_predictions, no_answer_scores, predict_answers, predictions_json
from trainer.inputs.squad import build_features

from support.squad_settings import ANSWERS, SQUAD, WINDOWS, windows


def oracle_beam(features, cls_logits=None) -> dict[str, np.ndarray]:
    """A beam of width 1 x 1 at the gold targets, certain of them (log-probability 0)."""
    rows = len(features)
    return {"start_top_log_probs": np.zeros((rows, 1)), "start_top_index": features.start_positions[:, None],
            "end_top_log_probs": np.zeros((rows, 1)), "end_top_index": features.end_positions[:, None],
            "cls_logits": features.is_impossible * 10 - 5 if cls_logits is None else cls_logits}


def test_the_gold_beam_answers_every_question_with_its_original_text(wiki_qa, squad_tokenizer):
    features = build_features(wiki_qa.examples, squad_tokenizer, training=False, **WINDOWS)
    predictions = predict_answers(wiki_qa.examples, features, oracle_beam(features), **ANSWERS)
    for example, prediction in zip(wiki_qa.examples, predictions):
        if example.is_impossible:
            assert (prediction.text, prediction.char_start, prediction.nbest) == ("", -1, ())
        else:
            gold = example.answers[0]
            assert (prediction.text, prediction.char_start, prediction.char_end) == (gold.text, gold.start, gold.end)
            assert example.context[prediction.char_start:prediction.char_end] == prediction.text


def test_the_gold_beam_scores_100_on_the_official_squad2_evaluation(wiki_qa, squad_tokenizer):
    features = build_features(wiki_qa.examples, squad_tokenizer, training=False, **WINDOWS)
    predictions = predict_answers(wiki_qa.examples, features, oracle_beam(features), **ANSWERS)
    result = evaluate_predictions(wiki_qa, predictions)
    assert result["exact"] == result["f1"] == result["HasAns_exact"] == result["NoAns_exact"] == 100.0
    assert (result["total"], result["HasAns_total"], result["NoAns_total"]) == (130, 109, 21)
    # unanswerable questions already predict "" (adding 0): the walk starts at 21 and reaches 130
    # at the last answerable question, whose no-answer score (-5) is the threshold
    assert result["best_exact"] == 100.0 and result["best_exact_thresh"] == -5.0


def test_candidates_outside_the_context_reversed_or_too_long_are_dropped(wiki_qa, squad_tokenizer):
    example = wiki_qa.examples[0]  # Stanley Kubrick
    features = build_features([example], squad_tokenizer, training=True, **windows(max_seq_length=256))
    start, end = int(features.start_positions[0]), int(features.end_positions[0])
    question_position = 250  # between the two <sep>s: p_mask 1
    assert features.p_mask[0, question_position] == 1 and end > start
    beam = {"start_top_log_probs": np.array([[-0.1, -1.0]]), "start_top_index": np.array([[question_position, start]]),
            # start 0 (the question) with ends e, e; start 1 with ends before it (start - 1) and e
            "end_top_log_probs": np.array([[-0.1, -0.1, -0.1, -0.5]]),
            "end_top_index": np.array([[end, end, start - 1, end]]), "cls_logits": np.array([-2.0])}
    [prediction] = predict_answers([example], features, beam, **ANSWERS)
    assert (prediction.text, prediction.score, prediction.no_answer_score) == ("Stanley Kubrick", -1.5, -2.0)
    assert len(prediction.nbest) == 1
    [too_short] = predict_answers([example], features, beam, n_best=SQUAD.n_best, max_answer_length=end - start)
    assert (too_short.text, too_short.score, too_short.nbest) == ("", -1e6, ())


def test_windows_share_candidates_dedupe_texts_and_the_no_answer_score_is_their_minimum(wiki_qa, squad_tokenizer):
    example = next(e for e in wiki_qa.examples if e.qid == "wiki-00389-03")  # "1986"
    features = build_features([example], squad_tokenizer, training=False,
                              **windows(max_seq_length=64, doc_stride=16, max_query_length=16))
    inside = features.is_impossible == 0
    assert inside.sum() >= 2  # the answer is in several windows
    # every window proposes the gold span (where it holds it: score -1 - 1) or else its first
    # max-context piece (-3 - 1), and its first max-context piece again (-2 - 2)
    first_owned = np.argmax(features.token_is_max_context, axis=1)
    starts = np.stack([np.where(inside, features.start_positions, first_owned), first_owned], axis=1)
    ends = np.stack([np.where(inside, features.end_positions, first_owned), first_owned], axis=1)
    cls_logits = np.arange(len(features), dtype=np.float64)[::-1] - 1.5
    start_log_probs = np.stack([np.where(inside, -1.0, -3.0), np.full(len(features), -2.0)], axis=1)
    beam = {"start_top_log_probs": start_log_probs, "start_top_index": starts,
            "end_top_log_probs": np.tile([[-1.0, -2.0]], (len(features), 1)), "end_top_index": ends,
            "cls_logits": cls_logits}
    [prediction] = predict_answers([example], features, beam, n_best=4, max_answer_length=SQUAD.max_answer_length)
    assert prediction.text == "1986" and prediction.score == -2.0
    texts = [candidate.text for candidate in prediction.nbest]
    assert len(texts) == len(set(texts)) == 4 and texts.count("1986") == 1
    assert prediction.no_answer_score == cls_logits.min() == -1.5


def test_predictions_are_written_in_the_official_format(wiki_qa, squad_tokenizer):
    examples = wiki_qa.examples[:3]
    features = build_features(examples, squad_tokenizer, training=False, **WINDOWS)
    predictions = predict_answers(examples, features, oracle_beam(features), **ANSWERS)
    assert json.loads(json.dumps(predictions_json(predictions))) == {
        "wiki-00001-00": "Stanley Kubrick", "wiki-00001-01": "1968", "wiki-00001-02": "Arthur C. Clarke"}
    assert no_answer_scores(predictions) == {"wiki-00001-00": -5.0, "wiki-00001-01": -5.0, "wiki-00001-02": -5.0}
    assert predictions[0].no_answer_probability == pytest.approx(1 / (1 + math.exp(5)))


def test_squad11_data_is_evaluated_without_no_answer_thresholds(wiki_qa, squad_tokenizer):
    answerable = tuple(e for e in wiki_qa.examples if not e.is_impossible)[:5]
    data = dataclasses.replace(wiki_qa, examples=answerable, version_2=False)
    features = build_features(answerable, squad_tokenizer, training=False, **WINDOWS)
    result = evaluate_predictions(data, predict_answers(answerable, features, oracle_beam(features), **ANSWERS))
    assert result == {"exact": 100.0, "f1": 100.0, "total": 5, "HasAns_exact": 100.0, "HasAns_f1": 100.0,
                      "HasAns_total": 5}
