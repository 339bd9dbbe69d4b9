"""SQuAD evaluation, specified by examples whose values are worked out by hand in the comments."""
from __future__ import annotations

import pytest

from trainer.evaluation.squad_official import (
    apply_no_answer_threshold,
    best_threshold,
    exact_match,
    f1_score,
    normalize_answer,
    raw_scores,
    squad_evaluate,
)


def test_normalisation_lowercases_drops_punctuation_and_articles_and_collapses_spaces():
    assert normalize_answer("  The Eiffel-Tower, in  PARIS! ") == "eiffeltower in paris"
    # articles go only as whole words: "theatre" and "another" keep their letters
    assert normalize_answer("A theatre and another") == "theatre and another"


def test_normalisation_keeps_accents_and_non_ascii_punctuation():
    # string.punctuation is ASCII only: the en dash and the accent stay
    assert normalize_answer("Café – Zürich") == "café – zürich"


def test_exact_match_compares_normalised_answers():
    assert exact_match("the Danube", "Danube.") == 1
    assert exact_match("Danube river", "Danube") == 0


def test_f1_of_a_partial_overlap():
    # gold tokens [danube, river, basin], prediction [river, danube]: common 2
    # P = 2/2, R = 2/3 -> F1 = 2·1·(2/3) / (1 + 2/3) = 0.8
    assert f1_score("the Danube river basin", "river Danube") == pytest.approx(0.8)


def test_f1_counts_repeated_tokens_as_a_multiset():
    # gold [new, york, new], prediction [new, new, new, jersey]: common = min(2, 3) = 2
    # P = 2/4, R = 2/3 -> 2·(1/2)(2/3) / (1/2 + 2/3) = (2/3) / (7/6) = 4/7
    assert f1_score("New York new", "new new new Jersey") == pytest.approx(4 / 7)


def test_f1_with_an_empty_side_is_one_only_when_both_are_empty():
    assert f1_score("", "") == 1.0
    assert f1_score("", "the") == 1.0  # "the" normalises to nothing
    assert f1_score("", "Paris") == 0.0
    assert f1_score("Paris", "") == 0.0


def test_raw_scores_take_the_best_gold_and_drop_golds_that_normalise_to_nothing():
    golds = {"q1": ["Paris", "the city of Paris"], "q2": [], "q3": ["a", "London"]}
    predictions = {"q1": "city of Paris", "q2": "", "q3": "London"}
    exact, f1 = raw_scores(golds, predictions)
    # q1: EM with "the city of Paris" = 1; q2: unanswerable, "" matches; q3: gold "a" dropped
    assert exact == {"q1": 1, "q2": 1, "q3": 1}
    assert f1 == {"q1": 1.0, "q2": 1.0, "q3": 1.0}


def test_a_missing_prediction_is_an_error_naming_the_question():
    with pytest.raises(ValueError, match=r"no prediction for 1 of 2 questions: 'q2'"):
        raw_scores({"q1": ["x"], "q2": ["y"]}, {"q1": "x"})


def test_threshold_turns_confident_no_answers_into_empty_predictions():
    scores = {"a": 0.5, "b": 0.0}
    # a (answerable) above the threshold -> 0.0; b (unanswerable) above -> 1.0
    assert apply_no_answer_threshold(scores, {"a": 0.9, "b": 0.8}, {"a": True, "b": False}, 0.7) == \
        {"a": 0.0, "b": 1.0}
    assert apply_no_answer_threshold(scores, {"a": 0.6, "b": 0.8}, {"a": True, "b": False}, 0.7) == \
        {"a": 0.5, "b": 1.0}


# Five questions for the threshold walk. has answer / raw score / prediction / no-answer score:
#   h1  yes  1.0  "x"   0.1
#   n1  no   0.0  "y"   0.2      (a non-empty prediction for an unanswerable question)
#   h2  yes  0.5  "z"   0.3
#   n2  no   1.0  ""    0.4      (already answered "")
#   h3  yes  0.0  "w"   0.9
HAS = {"h1": True, "n1": False, "h2": True, "n2": False, "h3": True}
RAW = {"h1": 1.0, "n1": 0.0, "h2": 0.5, "n2": 1.0, "h3": 0.0}
PREDICTED = {"h1": "x", "n1": "y", "h2": "z", "n2": "", "h3": "w"}
NA = {"h1": 0.1, "n1": 0.2, "h2": 0.3, "n2": 0.4, "h3": 0.9}


def test_best_threshold_walks_questions_by_ascending_no_answer_score():
    # start 2 (unanswerable count); h1 +1 -> 3 (best, thresh 0.1); n1 -1 -> 2; h2 +0.5 -> 2.5;
    # n2 +0 -> 2.5; h3 +0 -> 2.5. Best 3/5 = 60 %, threshold 0.1; answerable mean (1+0.5+0)/3 = 0.5
    assert best_threshold(PREDICTED, RAW, NA, HAS) == pytest.approx((60.0, 0.1, 0.5))


def test_best_threshold_is_zero_when_answering_nothing_is_best():
    # start 1; the only answerable question scores 0 and the unanswerable one is answered: never beaten
    assert best_threshold({"h": "x", "n": "y"}, {"h": 0.0, "n": 0.0}, {"h": 0.5, "n": 0.2},
                          {"h": True, "n": False}) == (50.0, 0.0, 0.0)


def test_evaluation_of_a_squad2_set_with_splits_and_best_thresholds():
    golds = {"h1": ["Danube"], "h2": ["river Danube basin"], "n1": []}
    predictions = {"h1": "the Danube", "h2": "Danube", "n1": "Vienna"}
    # EM: h1 1, h2 0, n1 0 -> 33.33; F1: h1 1, h2 P 1 R 1/3 -> 0.5, n1 0 -> 50.0
    result = squad_evaluate(golds, predictions, na_probs={"h1": -2.0, "h2": -1.0, "n1": 3.0}, na_prob_thresh=1.0)
    expected = {
        "exact": 100 / 3, "f1": 50.0, "total": 3,
        "HasAns_exact": 50.0, "HasAns_f1": 75.0, "HasAns_total": 2,
        # n1's no-answer score 3.0 > 1.0: predicted "" -> correct
        "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 1,
    }
    # with the threshold, n1 scores 1: exact (1 + 0 + 1)/3, f1 (1 + 0.5 + 1)/3
    expected.update(exact=200 / 3, f1=250 / 3)
    # walk (start 1): h1 +1 -> 2 (thresh -2); h2 EM +0 / F1 +0.5 -> 2.5 (thresh -1); n1 -1
    expected.update(best_exact=200 / 3, best_exact_thresh=-2.0, has_ans_exact=0.5,
                    best_f1=250 / 3, best_f1_thresh=-1.0, has_ans_f1=0.75)
    assert result == pytest.approx(expected)


def test_evaluation_of_a_squad11_set_has_no_noans_split_or_thresholds():
    result = squad_evaluate({"q1": ["1889"], "q2": ["Gustave Eiffel"]}, {"q1": "1889", "q2": "Eiffel"})
    # q2: F1 P 1 R 1/2 -> 2/3
    assert result == pytest.approx({"exact": 50.0, "f1": 100 * (1 + 2 / 3) / 2, "total": 2,
                                    "HasAns_exact": 50.0, "HasAns_f1": 100 * (1 + 2 / 3) / 2, "HasAns_total": 2})
