"""Fine-tuning metrics, specified by examples whose values are worked out by hand in the comments."""
from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.evaluation.metrics import (
    accuracy,
    classification_metrics,
    confusion_matrix,
    macro_f1,
    matthews_corrcoef,
    multiple_choice_metrics,
    pearson,
    regression_metrics,
    spearman,
)

# Three classes, 11 examples. Confusion matrix (rows true, columns predicted):
#   [[3, 1, 0],      true counts t = [4, 3, 4], predicted counts p = [4, 4, 3]
#    [1, 1, 1],      correct c = 3 + 1 + 2 = 6, total s = 11
#    [0, 2, 2]]
LABELS = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]
PREDICTIONS = [0, 0, 0, 1, 0, 1, 2, 1, 1, 2, 2]


def test_confusion_matrix_counts_true_rows_against_predicted_columns():
    np.testing.assert_array_equal(confusion_matrix(LABELS, PREDICTIONS, 3), [[3, 1, 0], [1, 1, 1], [0, 2, 2]])


def test_accuracy_is_the_fraction_correct():
    assert accuracy(LABELS, PREDICTIONS) == pytest.approx(6 / 11)


def test_macro_f1_averages_per_class_f1():
    # F1_k = 2·TP_k / (t_k + p_k): class 0 6/8, class 1 2/7, class 2 4/7
    # mean = (3/4 + 2/7 + 4/7) / 3 = (21/28 + 24/28) / 3 = 15/28
    assert macro_f1(LABELS, PREDICTIONS, 3) == pytest.approx(15 / 28)


def test_macro_f1_leaves_out_classes_neither_true_nor_predicted():
    # class 3 never occurs: the mean stays over classes 0..2
    assert macro_f1(LABELS, PREDICTIONS, 4) == pytest.approx(15 / 28)


def test_macro_f1_counts_a_class_that_is_only_predicted_as_zero():
    # class 0: 2·2/(2+2) = 1; class 1: 2·1/(2+1) = 2/3; class 2 (never true): 0 -> (1 + 2/3 + 0)/3 = 5/9
    assert macro_f1([0, 0, 1, 1], [0, 0, 1, 2], 3) == pytest.approx(5 / 9)


def test_mcc_follows_gorodkins_formula():
    # c·s − Σ p_k t_k = 6·11 − (4·4 + 4·3 + 3·4) = 66 − 40 = 26
    # s² − Σ p_k² = 121 − 41 = 80 and s² − Σ t_k² = 121 − 41 = 80  ->  26 / sqrt(80·80) = 0.325
    assert matthews_corrcoef(LABELS, PREDICTIONS, 3) == pytest.approx(0.325)


def test_binary_mcc_equals_the_phi_coefficient():
    # TP 3, FN 1, TN 2, FP 2: (3·2 − 2·1) / sqrt((3+2)(3+1)(2+2)(2+1)) = 4 / sqrt(240)
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    predictions = [1, 1, 1, 0, 0, 0, 1, 1]
    assert matthews_corrcoef(labels, predictions, 2) == pytest.approx(4 / math.sqrt(240))


def test_mcc_is_one_for_perfect_and_minus_one_for_inverted_binary_predictions():
    assert matthews_corrcoef([0, 1, 1, 0], [0, 1, 1, 0], 2) == pytest.approx(1.0)
    assert matthews_corrcoef([0, 1, 1, 0], [1, 0, 0, 1], 2) == pytest.approx(-1.0)


def test_mcc_of_a_constant_predictor_is_zero():
    # p = [0, 4, 0]: s² − Σ p_k² = 16 − 16 = 0, so the denominator is 0 and MCC is defined as 0
    assert matthews_corrcoef([0, 1, 1, 2], [1, 1, 1, 1], 3) == 0.0


def test_classes_outside_the_range_are_refused():
    with pytest.raises(ValueError, match=r"predictions must be integer classes in \[0, 2\)"):
        macro_f1([0, 1], [0, 2], 2)


def test_mismatched_or_empty_inputs_are_refused():
    with pytest.raises(ValueError, match="shapes differ"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(ValueError, match="no examples"):
        accuracy([], [])


def test_pearson_of_a_hand_computed_example():
    # deviations from the means (2, 2): dx = [-1, 0, 1], dy = [-1, 1, 0]
    # Σ dx·dy = 1, Σ dx² = 2, Σ dy² = 2  ->  1 / sqrt(2·2) = 0.5
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)


def test_pearson_is_one_for_a_linear_and_minus_one_for_an_inverse_relation():
    assert pearson([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(1.0)
    assert pearson([1, 2, 3, 4], [8, 6, 4, 2]) == pytest.approx(-1.0)


def test_correlation_with_a_constant_is_undefined():
    assert math.isnan(pearson([1, 2, 3], [5, 5, 5]))
    assert math.isnan(spearman([1, 2, 3], [5, 5, 5]))


def test_spearman_gives_tied_values_their_average_rank():
    # x = [10, 20, 20, 30] ranks [1, 2.5, 2.5, 4]; y = [1, 3, 2, 4] ranks [1, 3, 2, 4]; both mean 2.5
    # dx = [-1.5, 0, 0, 1.5], dy = [-1.5, 0.5, -0.5, 1.5]
    # Σ dx·dy = 4.5, Σ dx² = 4.5, Σ dy² = 5  ->  4.5 / sqrt(4.5·5) = sqrt(0.9)
    assert spearman([10, 20, 20, 30], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))


def test_spearman_is_one_for_any_increasing_relation():
    # ranks are equal, so Spearman is 1 where Pearson of the raw values is not
    assert spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [1000, 100, 10, 1]) == pytest.approx(-1.0)
    assert pearson([1, 2, 3, 4], [1, 10, 100, 1000]) < 0.9


def test_classification_metrics_take_class_ids_or_probabilities():
    expected = {"accuracy": 6 / 11, "macro_f1": 15 / 28, "mcc": 0.325}
    probabilities = np.eye(3)[PREDICTIONS] * 0.5 + 0.1  # argmax is the prediction
    assert classification_metrics(LABELS, PREDICTIONS, 3) == pytest.approx(expected)
    assert classification_metrics(LABELS, probabilities, 3) == pytest.approx(expected)


def test_regression_metrics_accept_the_heads_column_of_scores():
    scores = np.array([[1.0], [3.0], [2.0], [4.0]])  # [N, 1] as the regression head returns
    # Pearson of x = [10, 20, 20, 30], y = [1, 3, 2, 4]: means 20, 2.5; dx = [-10, 0, 0, 10],
    # dy = [-1.5, 0.5, -0.5, 1.5]; Σ dx·dy = 30, Σ dx² = 200, Σ dy² = 5 -> 30 / sqrt(1000)
    assert regression_metrics([10, 20, 20, 30], scores) == pytest.approx(
        {"pearson": 30 / math.sqrt(1000), "spearman": math.sqrt(0.9)})


def test_multiple_choice_accuracy_from_choice_scores():
    # argmax per row: [1, 3, 0]; labels [1, 2, 0] -> 2 of 3 correct
    scores = [[0.1, 0.9, 0.0, 0.0], [0.2, 0.1, 0.3, 0.4], [2.0, 1.0, 0.5, -1.0]]
    assert multiple_choice_metrics([1, 2, 0], scores) == pytest.approx({"accuracy": 2 / 3})
    assert multiple_choice_metrics([1, 2, 0], [1, 3, 0]) == pytest.approx({"accuracy": 2 / 3})
