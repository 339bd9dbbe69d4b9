"""Permutation seeds without TensorFlow (tfrecords/permutation_seeds.py): FarmHash Fingerprint64 in NumPy
equals tf.fingerprint, and the seeds equal the graph's, for every key width the readers use."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfrecords.permutation_seeds import fingerprint64, permutation_seeds, permutation_seeds_in_graph


def tf_fingerprint(rows: np.ndarray) -> np.ndarray:
    return tf.fingerprint(tf.constant(rows, tf.uint8)).numpy().view("<u8")[:, 0]


@pytest.mark.parametrize("width", [4, 5])
def test_seeds_of_int64_keys_equal_the_graphs_on_random_rows(width):
    rng = np.random.default_rng(width)
    keys = rng.integers(-2**31, 2**31, size=(4000, width)).astype(np.int32)
    keys[:10] = 0  # all-zero and extreme rows too
    keys[10:20] = np.iinfo(np.int32).min
    np.testing.assert_array_equal(permutation_seeds(keys), permutation_seeds_in_graph(tf.constant(keys)).numpy())


def test_seeds_of_full_range_int64_keys_equal_the_graphs():
    keys = np.random.default_rng(1).integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=(2000, 4),
                                             dtype=np.int64)
    np.testing.assert_array_equal(permutation_seeds(keys), permutation_seeds_in_graph(tf.constant(keys)).numpy())


@pytest.mark.parametrize("lengths", [range(0, 17), range(17, 33), range(33, 65), range(65, 200, 7)])
def test_fingerprint64_equals_tf_fingerprint_at_every_length(lengths):
    rng = np.random.default_rng(lengths.start)
    for length in lengths:
        rows = rng.integers(0, 256, size=(300, length), dtype=np.uint8)
        np.testing.assert_array_equal(fingerprint64(rows), tf_fingerprint(rows), err_msg=f"length {length}")


def test_seeds_are_int32_pairs():
    seeds = permutation_seeds(np.arange(12).reshape(3, 4))
    assert seeds.shape == (3, 2) and seeds.dtype == np.int32
