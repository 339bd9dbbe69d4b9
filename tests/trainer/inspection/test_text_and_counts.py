"""The pieces of `xlnet inspect` that have exact answers: target marks in running text
(trainer/inspection/records.py) and the span and document counts of --stats
(trainer/inspection/statistics.py)."""
from __future__ import annotations

from collections import Counter

import numpy as np

from trainer.inspection.records import running_text
from trainer.inspection.statistics import SplitStats, count_text, span_run_lengths


def test_marks_open_after_the_leading_space_and_close_after_the_run():
    texts = [" The", " quick", " br", "own", " fox", "."]
    assert running_text(texts, [0, 1, 1, 1, 0, 1]) == "The [[quick brown]] fox[[.]]"


def test_reversed_pieces_read_right_to_left():
    assert running_text(["own", " br", " quick"], [1, 1, 0], reverse=True) == "quick [[brown]]"


def test_run_lengths_count_words_and_never_cross_the_two_parts():
    masked = np.array([[0, 1, 1, 1, 1, 0, 0, 1]], bool)
    word_start = np.array([[1, 1, 0, 1, 1, 1, 1, 0]], bool)
    # reuse 4: the run at 1..4 is cut at 4 into a 2-word run (1..3) and a 1-word run (4); the run at 7
    # holds no word start (a top-up piece inside a word) and counts as one
    assert span_run_lengths(masked, word_start, 4, subword=False).tolist() == [2, 1, 1]
    assert span_run_lengths(masked, word_start, 4, subword=True).tolist() == [3, 1, 1]


def test_documents_are_measured_across_the_records_of_a_stream():
    stats = SplitStats("train", {}, num_streams=1)
    eod, unk = 7, 0
    count_text(stats, 0, np.array([5, 5, eod, 5, 5]), unk, eod)  # document 1 ends; document 2 begins
    count_text(stats, 0, np.array([0, 5, 5, eod]), unk, eod)  # the next record's part ends it
    assert stats.document_lengths == [3, 6]
    assert (stats.document_ends, stats.tokens_in_records, stats.unknown) == (2, 9, 1)
    assert stats.stream_lengths == {0: 9} and stats.targets_per_record == Counter()
