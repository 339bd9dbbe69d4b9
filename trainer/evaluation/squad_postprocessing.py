"""SQuAD post-processing: the head's beam over every window of a question -> its answer text.

As XLNet's run_squad.py (write_predictions), on trainer/inputs/squad.py's features:

* Candidates: every (start, end) pair of the beam of every window of the question (start_n_top
  starts x end_n_top ends each). Dropped: a start or end outside the context window (the
  question, a special symbol, padding), a start that is not in its max-context window, an end
  before the start, more than ``max_answer_length`` pieces. (The original also drops the last
  piece of every window, an off-by-one; here it may be an answer.)
* Ranked by start + end log-probability; the first ``n_best`` distinct texts are kept. A text is
  the ORIGINAL context from the first piece's first character to the last piece's last, with
  surrounding whitespace trimmed; an empty text is no candidate.
* The answer is always the best non-empty candidate ("" if there is none). The no-answer score is
  the minimum over the question's windows of the answer-class logit (higher = more likely
  unanswerable); the SQuAD 2.0 evaluation (trainer/evaluation/squad_official.py) finds the best threshold
  on it, as XLNet's does.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Mapping, Sequence

import numpy as np

from trainer.evaluation.squad_official import squad_evaluate
from trainer.inputs.squad import SquadData, SquadExample, SquadFeatures

BEAM_OUTPUTS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")


@dataclasses.dataclass(frozen=True)
class AnswerCandidate:
    """A span of the original context [char_start, char_end) and its log-probabilities."""

    text: str
    char_start: int
    char_end: int
    start_log_prob: float
    end_log_prob: float

    @property
    def score(self) -> float:
        return self.start_log_prob + self.end_log_prob


@dataclasses.dataclass(frozen=True)
class AnswerPrediction:
    """The answer to one question: the best candidate (text "" and char offsets -1 when there is
    none), its ``score`` (start + end log-probability), the ``no_answer_score`` (minimum
    answer-class logit over the windows) and the ``nbest`` candidates, best first."""

    qid: str
    text: str
    char_start: int
    char_end: int
    score: float
    no_answer_score: float
    nbest: tuple[AnswerCandidate, ...]

    @property
    def no_answer_probability(self) -> float:
        """sigmoid(no_answer_score): the answer-class head's probability that there is no answer."""
        return 1.0 / (1.0 + math.exp(-self.no_answer_score)) if self.no_answer_score > -700 else 0.0


def predict_answers(examples: Sequence[SquadExample], features: SquadFeatures, beam: Mapping[str, np.ndarray], *,
                    n_best: int, max_answer_length: int) -> list[AnswerPrediction]:
    """One prediction per example, in order.

    Args:
      examples: the questions ``features`` were built from (``features.example_index`` indexes them).
      features: the windows (trainer/inputs/squad.py's build_features).
      beam: the inference outputs of XLNetForQuestionAnswering, one row per feature, as NumPy:
        start_top_log_probs / start_top_index [F, start_n_top], end_top_log_probs /
        end_top_index [F, start_n_top * end_n_top] (start-major), cls_logits [F].
      n_best: distinct candidate texts kept per question.
      max_answer_length: longest answer in pieces.
    Returns:
      AnswerPrediction per example. A question without windows (skipped as unaligned when
      building training features) gets "" with score -1e6 and no-answer score +1e6.
    """
    beam = {name: np.asarray(beam[name]) for name in BEAM_OUTPUTS}
    if len(beam["cls_logits"]) != len(features):
        raise ValueError(f"{len(beam['cls_logits'])} beam rows for {len(features)} features")
    start_n_top = beam["start_top_index"].shape[1]
    end_n_top = beam["end_top_index"].shape[1] // start_n_top
    windows: dict[int, list[int]] = defaultdict(list)
    for row, example_index in enumerate(features.example_index):
        windows[int(example_index)].append(row)
    predictions = []
    for example_index, example in enumerate(examples):
        rows = windows.get(example_index, [])
        candidates = []
        for row in rows:
            char_start, char_end = features.token_char_start[row], features.token_char_end[row]
            max_context = features.token_is_max_context[row]
            for i in range(start_n_top):
                start = int(beam["start_top_index"][row, i])
                if char_start[start] < 0 or not max_context[start]:
                    continue
                for j in range(end_n_top):
                    end = int(beam["end_top_index"][row, i * end_n_top + j])
                    if char_start[end] < 0 or end < start or end - start + 1 > max_answer_length:
                        continue
                    candidates.append((float(beam["start_top_log_probs"][row, i]),
                                       float(beam["end_top_log_probs"][row, i * end_n_top + j]),
                                       int(char_start[start]), int(char_end[end])))
        nbest = _distinct_texts(example.context, candidates, n_best)
        no_answer = float(min(beam["cls_logits"][row] for row in rows)) if rows else 1e6
        if nbest:
            best = nbest[0]
            predictions.append(AnswerPrediction(example.qid, best.text, best.char_start, best.char_end, best.score,
                                                no_answer, tuple(nbest)))
        else:
            predictions.append(AnswerPrediction(example.qid, "", -1, -1, -1e6, no_answer, ()))
    return predictions


def _distinct_texts(context: str, candidates: list[tuple[float, float, int, int]], n_best: int) -> list[AnswerCandidate]:
    """The ``n_best`` best-scoring candidates with distinct non-empty (trimmed) texts."""
    candidates.sort(key=lambda c: c[0] + c[1], reverse=True)  # stable: ties keep window and beam order
    kept: dict[str, AnswerCandidate] = {}
    for start_log_prob, end_log_prob, start, end in candidates:
        if len(kept) == n_best:
            break
        raw = context[start:end]
        text = raw.strip()
        if not text or text in kept:
            continue
        start += len(raw) - len(raw.lstrip())
        kept[text] = AnswerCandidate(text, start, start + len(text), start_log_prob, end_log_prob)
    return list(kept.values())


def predictions_json(predictions: Sequence[AnswerPrediction]) -> dict[str, str]:
    """The official predictions format: question id -> answer text."""
    return {prediction.qid: prediction.text for prediction in predictions}


def no_answer_scores(predictions: Sequence[AnswerPrediction]) -> dict[str, float]:
    """question id -> no-answer score (XLNet's null_odds.json)."""
    return {prediction.qid: prediction.no_answer_score for prediction in predictions}


def evaluate_predictions(data: SquadData, predictions: Sequence[AnswerPrediction]) -> dict[str, float]:
    """The official evaluation of ``predictions`` against ``data``'s gold answers.

    ``exact`` / ``f1`` (and the HasAns / NoAns splits) score the predictions as written to
    predictions.json (always the best non-empty answer, as XLNet writes them: no threshold is
    applied). For SQuAD 2.0, ``best_exact`` / ``best_f1`` and their thresholds, in answer-class
    logit units, come from the no-answer scores, as XLNet reports them.
    """
    return squad_evaluate(data.gold_answers(), predictions_json(predictions),
                          no_answer_scores(predictions) if data.version_2 else None, na_prob_thresh=math.inf)
