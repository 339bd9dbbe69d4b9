"""On-device permutation: ranks from a seed, perm_mask rules, target selection (exact values)."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.models.permutation import (
    check_permutation_shapes,
    dense_inputs,
    permutation_mask,
    sample_ranks,
    select_targets,
    target_flags,
)

SEP, CLS = 4, 3


def seeds(batch, start=0):
    return tf.constant([[start + i, 7] for i in range(batch)], tf.int32)


def test_ranks_are_a_permutation_with_the_context_part_first():
    ranks = sample_ranks(seeds(3), seq_len=12, reuse_len=4, perm_size=2).numpy()
    for row in ranks:
        assert sorted(row) == list(range(12))
        assert set(row[:4]) == set(range(4))


def test_every_block_of_a_part_follows_the_same_offset_order():
    ranks = sample_ranks(seeds(4), seq_len=16, reuse_len=8, perm_size=4).numpy()
    for row in ranks:
        for start, length in ((0, 8), (8, 8)):
            blocks = row[start:start + length].reshape(-1, 4) - start - 4 * np.arange(length // 4)[:, None]
            assert (blocks == blocks[0]).all() and sorted(blocks[0]) == [0, 1, 2, 3]


def test_same_seed_gives_same_ranks_and_other_seeds_differ():
    first = sample_ranks(seeds(8), seq_len=16, reuse_len=8, perm_size=8).numpy()
    again = sample_ranks(seeds(8), seq_len=16, reuse_len=8, perm_size=8).numpy()
    other = sample_ranks(seeds(8, start=100), seq_len=16, reuse_len=8, perm_size=8).numpy()
    assert (first == again).all()
    assert (first != other).any()


def test_ranks_are_the_same_under_xla():
    compiled = tf.function(lambda s: sample_ranks(s, 16, 8, 8), jit_compile=True)
    np.testing.assert_array_equal(compiled(seeds(4)).numpy(), sample_ranks(seeds(4), 16, 8, 8).numpy())


def numpy_mix32(x: np.ndarray) -> np.ndarray:
    """lowbias32 in NumPy uint32 arithmetic (wrapping)."""
    x = (x ^ (x >> np.uint32(16))) * np.uint32(0x7FEB352D)
    x = (x ^ (x >> np.uint32(15))) * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def test_each_block_order_sorts_the_hashed_keys_as_unsigned_integers():
    # the rule as first written: uint32 keys, widened to int64, stable argsort; large seeds set the top bit
    perm_seed = np.array([[5, 7], [2 ** 31 - 1, 123456789], [-3, 2 ** 30]], np.int32)
    seed = perm_seed.view(np.uint32)
    with np.errstate(over="ignore"):
        keys = numpy_mix32(np.arange(8, dtype=np.uint32)[None, :] + seed[:, :1] * np.uint32(0x9E3779B9))
        keys = numpy_mix32(keys ^ numpy_mix32(seed[:, 1:]))
    orders = np.argsort(keys.astype(np.int64).reshape(3, 2, 4), axis=-1, kind="stable")
    expected = np.concatenate([orders[:, 0], 4 + orders[:, 1]], axis=1)  # reuse_len 4: context, then A/B
    np.testing.assert_array_equal(sample_ranks(tf.constant(perm_seed), 8, 4, 4).numpy(), expected)


def test_perm_mask_follows_the_reference_rules():
    # positions 0-1 context, 2-5 A/B; 0,3,5 targets, 4 is <sep>, 1,2 ordinary tokens.
    ids = tf.constant([[20, 21, 22, 23, SEP, 25]])
    is_target, is_functional = target_flags(ids, tf.constant([[1, 0, 0, 1, 0, 1]]), SEP, CLS)
    ranks = tf.constant([[1, 0, 3, 2, 5, 4]])
    expected = [[1, 0, 1, 1, 1, 1],   # context target: not itself, never the A/B part
                [1, 0, 1, 1, 1, 1],   # context non-target: sees no target, sees itself
                [0, 0, 0, 1, 1, 1],   # A/B non-target: all of the context, no A/B target or <sep>
                [0, 0, 0, 1, 1, 1],   # target rank 2: not itself, not later <sep>/target
                [0, 0, 0, 0, 0, 0],   # <sep> rank 5: everything earlier and itself
                [0, 0, 0, 0, 1, 1]]   # target rank 4: not <sep> (rank 5), not itself
    np.testing.assert_array_equal(permutation_mask(ranks, is_target, is_functional, reuse_len=2).numpy()[0],
                                  np.array(expected, bool))


def test_sep_and_cls_are_never_targets():
    is_target, is_functional = target_flags(tf.constant([[SEP, CLS, 9]]), tf.constant([[1, 1, 1]]), SEP, CLS)
    assert is_target.numpy().tolist() == [[False, False, True]]
    assert is_functional.numpy().tolist() == [[True, True, False]]


def test_targets_are_selected_in_ascending_order_with_padding_rows():
    positions, valid = select_targets(tf.constant([[False, True, False, True, False, False]]), num_predict=4)
    assert positions.numpy()[0, :2].tolist() == [1, 3]
    assert valid.numpy().tolist() == [[1, 1, 0, 0]]


def test_targets_beyond_num_predict_are_not_predicted():
    positions, valid = select_targets(tf.constant([[True, True, True, True]]), num_predict=2)
    assert positions.numpy().tolist() == [[0, 1]] and valid.numpy().tolist() == [[1, 1]]


def test_dense_inputs_give_one_hot_target_mapping_and_target_tokens():
    ids = tf.constant([[10, 11, 12, 13, 14, 15, SEP, CLS]])
    out = dense_inputs(ids, tf.constant([[0, 1, 0, 0, 1, 0, 0, 0]]), seeds(1), reuse_len=4, perm_size=2,
                       num_predict=3, sep_id=SEP, cls_id=CLS)
    np.testing.assert_array_equal(out["target_mapping"].numpy()[0],
                                  [[0, 1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0, 0], [0] * 8])
    assert out["target"].numpy().tolist() == [[11, 14, 0]]
    assert out["target_mask"].numpy().tolist() == [[1, 1, 0]]


def test_parts_must_split_into_whole_blocks():
    with pytest.raises(ValueError, match="perm_size=3 must divide seq_len - reuse_len=8"):
        check_permutation_shapes(seq_len=11, reuse_len=3, perm_size=3)


def test_every_offset_order_is_about_equally_likely():
    ranks = sample_ranks(tf.stack([tf.range(4000), tf.fill([4000], 11)], axis=1), seq_len=4, reuse_len=0,
                         perm_size=4).numpy()
    first_counts = np.bincount(ranks[:, 0], minlength=4)  # which rank position 0 takes: 1000 each expected
    assert first_counts.min() > 880 and first_counts.max() < 1120
