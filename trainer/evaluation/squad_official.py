"""SQuAD evaluation: exact match and F1 as the official SQuAD v2.0 script computes them.

Pure Python. The rules (the official ``evaluate-v2.0.py``, which XLNet ships as squad_utils.py):

* Answers are normalised before comparison: lower-cased, every ``string.punctuation`` character
  dropped, the articles "a", "an", "the" (as whole words) replaced by a space, whitespace
  collapsed.
* Exact match: the normalised strings are equal. F1: over the normalised whitespace tokens,
  common = multiset overlap, precision = common / |prediction|, recall = common / |gold|,
  F1 = 2PR / (P + R); when either side has no tokens, 1 if both have none, else 0.
* A question scores the MAXIMUM over its gold answers. Golds that normalise to "" are dropped;
  a question left without golds (unanswerable) has the single gold "", which only the empty
  prediction matches.
* ``exact`` and ``f1`` are 100 x the mean over questions, ``total`` their number; for SQuAD 2.0
  the same on the answerable (``HasAns_``) and unanswerable (``NoAns_``) questions.
* With no-answer scores: a prediction whose score exceeds ``na_prob_thresh`` (default 1.0)
  becomes "" (scoring 1 exactly when the question is unanswerable). ``best_exact`` /
  ``best_f1`` is the score of the best threshold and ``best_*_thresh`` the threshold itself,
  found by walking the questions in ascending no-answer score (see :func:`best_threshold`).

On SQuAD 1.1 data (every question answerable, no gold normalising to "") these equal the v1.1
script's ``exact_match`` and ``f1``. Unlike the official v2.0 script, which silently evaluates
only the questions it finds predictions for, a missing prediction is an error here.
"""
from __future__ import annotations

import collections
import re
import string
from typing import Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, replace the articles a/an/the by a space, collapse whitespace."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_tokens(text: str) -> list[str]:
    """The whitespace tokens of the normalised answer (what F1 counts)."""
    return normalize_answer(text).split()


def exact_match(gold: str, prediction: str) -> int:
    """1 if the two answers normalise to the same string, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str) -> float:
    """Token F1 of the normalised answers; 1.0 if both are empty, 0.0 if only one is."""
    gold_tokens, predicted_tokens = answer_tokens(gold), answer_tokens(prediction)
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    common = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def raw_scores(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
               ) -> tuple[dict[str, int], dict[str, float]]:
    """Per question id: (exact match, F1), each the maximum over the question's gold answers.

    Args:
      gold_answers: question id -> gold answer texts (empty for an unanswerable question).
      predictions: question id -> predicted text ("" = no answer); must cover every question.
    Raises:
      ValueError naming the question ids without a prediction.
    """
    missing = [qid for qid in gold_answers if qid not in predictions]
    if missing:
        shown = ", ".join(map(repr, missing[:5])) + (" ..." if len(missing) > 5 else "")
        raise ValueError(f"no prediction for {len(missing)} of {len(gold_answers)} questions: {shown}")
    exact, f1 = {}, {}
    for qid, answers in gold_answers.items():
        golds = [text for text in answers if normalize_answer(text)] or [""]
        exact[qid] = max(exact_match(gold, predictions[qid]) for gold in golds)
        f1[qid] = max(f1_score(gold, predictions[qid]) for gold in golds)
    return exact, f1


def apply_no_answer_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                              has_answer: Mapping[str, bool], threshold: float) -> dict[str, float]:
    """Scores after predicting "" wherever the no-answer score exceeds ``threshold``: such a
    question scores 1.0 if it is unanswerable, else 0.0."""
    return {qid: float(not has_answer[qid]) if na_probs[qid] > threshold else float(score)
            for qid, score in scores.items()}


def best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float], na_probs: Mapping[str, float],
                   has_answer: Mapping[str, bool]) -> tuple[float, float, float]:
    """The best no-answer threshold, walked as the official v2.0 script walks it.

    Starting from every question answered "" (score = the number of unanswerable questions),
    questions are taken in ascending no-answer score (ties in their given order); each adds its
    raw score if answerable, or -1 if unanswerable and the prediction is not "". The threshold is
    the no-answer score at the first running maximum (0.0 if the start is never beaten).

    Returns:
      (100 x best score / number of questions, best threshold, mean raw score over the answerable
      questions as a fraction: XLNet's ``has_ans_*`` (0.0 when none is answerable)).
    """
    current = best = sum(1 for qid in scores if not has_answer[qid])
    threshold = 0.0
    for qid in sorted(scores, key=lambda q: na_probs[q]):
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, na_probs[qid]
    answerable = [scores[qid] for qid in scores if has_answer[qid]]
    has_answer_mean = sum(answerable) / len(answerable) if answerable else 0.0
    return 100.0 * best / len(scores), float(threshold), has_answer_mean


def squad_evaluate(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                   na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict[str, float]:
    """The official SQuAD v2.0 evaluation dictionary (also right for v1.1 data).

    Args:
      gold_answers: question id -> gold answer texts; an empty list marks an unanswerable question.
      predictions: question id -> predicted answer text ("" for no answer).
      na_probs: question id -> no-answer score (probability, or XLNet's cls logit); None: all 0.
      na_prob_thresh: predict "" where the no-answer score exceeds it.
    Returns:
      ``exact``, ``f1`` (percent), ``total``; ``HasAns_exact/f1/total`` if any question is
      answerable and ``NoAns_exact/f1/total`` if any is not; with ``na_probs`` also
      ``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh`` and XLNet's
      ``has_ans_exact``, ``has_ans_f1`` (fractions). Values are Python floats (totals ints).
    Raises:
      ValueError if there are no questions or a question has no prediction.
    """
    if not gold_answers:
        raise ValueError("no questions to evaluate")
    exact_raw, f1_raw = raw_scores(gold_answers, predictions)
    has_answer = {qid: bool(answers) for qid, answers in gold_answers.items()}
    given_na_probs = na_probs
    na_probs = na_probs if na_probs is not None else {qid: 0.0 for qid in gold_answers}
    exact = apply_no_answer_threshold(exact_raw, na_probs, has_answer, na_prob_thresh)
    f1 = apply_no_answer_threshold(f1_raw, na_probs, has_answer, na_prob_thresh)
    result: dict[str, float] = _mean_scores(exact, f1, list(gold_answers))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        subset = [qid for qid in gold_answers if has_answer[qid] == wanted]
        if subset:
            result.update({f"{prefix}_{key}": value for key, value in _mean_scores(exact, f1, subset).items()})
    if given_na_probs is not None:
        result["best_exact"], result["best_exact_thresh"], result["has_ans_exact"] = best_threshold(
            predictions, exact_raw, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"], result["has_ans_f1"] = best_threshold(
            predictions, f1_raw, na_probs, has_answer)
    return result


def _mean_scores(exact: Mapping[str, float], f1: Mapping[str, float], qids: Sequence[str]) -> dict[str, float]:
    return {"exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            "f1": 100.0 * sum(f1[q] for q in qids) / len(qids), "total": len(qids)}
