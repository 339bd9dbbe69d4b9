"""The A/B pair-length rule: how A and B are trimmed to fit a length budget.

The longer of the two loses one piece at a time from its end (B on ties) until both fit: the
closed form of XLNet's ``_truncate_seq_pair`` loop. Records are built with ``trim_a_b``
(pipeline/records.py); serving encodes text pairs with ``pair_lengths``, its tensor version
(trainer/serving/text_encoder.py). tests/trainer/serving/test_text_encoder.py holds the two equal.
"""
from __future__ import annotations


def trim_a_b(a_len: int, b_len: int, total: int) -> tuple[int, int]:
    """Trims the longer of A/B by one token at a time until they fit in ``total`` (closed form)."""
    excess = a_len + b_len - total
    if excess <= 0:
        return a_len, b_len
    gap = min(excess, abs(a_len - b_len))
    if a_len > b_len:
        a_len -= gap
    else:
        b_len -= gap
    excess -= gap
    # Equal lengths: the reference trims B first, then alternates.
    return a_len - excess // 2, b_len - (excess - excess // 2)


def pair_lengths(len_a, len_b, budget: int):
    """Tensor version of ``trim_a_b`` over a batch: (kept A lengths, kept B lengths).

    When the shorter side fits in half the budget it is kept whole and the longer gets the
    rest; otherwise both end at half the budget, A taking the odd piece.

    Args:
      len_a, len_b: integer tensors [batch] of the untrimmed lengths.
      budget: pieces A and B may hold together.
    """
    import tensorflow as tf

    fits = len_a + len_b <= budget
    a_is_shorter = len_a <= len_b
    shorter_fits_half = 2 * tf.minimum(len_a, len_b) <= budget
    new_a = tf.where(shorter_fits_half, tf.where(a_is_shorter, len_a, budget - len_b), (budget + 1) // 2)
    new_b = tf.where(shorter_fits_half, tf.where(a_is_shorter, budget - len_a, len_b), budget // 2)
    return tf.where(fits, len_a, new_a), tf.where(fits, len_b, new_b)
