"""The record configuration's rules (tfrecords/record_config.py), here the permutation-block rule that
the data, the training configuration and the on-device permutation builder share."""
from __future__ import annotations

import pytest

from tfrecords.record_config import ConfigError, RecordConfig, record_parts, undivided_parts


def test_a_block_that_splits_both_parts_leaves_no_part_undivided():
    assert undivided_parts(seq_len=512, reuse_len=256, perm_size=256) == []
    assert undivided_parts(seq_len=128, reuse_len=64, perm_size=32) == []


def test_without_a_context_only_the_ab_part_must_split():
    assert undivided_parts(seq_len=8, reuse_len=0, perm_size=4) == []


def test_every_undivided_part_is_named_with_its_length_context_first():
    assert undivided_parts(seq_len=11, reuse_len=4, perm_size=3) == [("reuse_len", 4), ("seq_len - reuse_len", 7)]


def test_an_ab_part_that_does_not_split_is_named_alone():
    assert undivided_parts(seq_len=11, reuse_len=3, perm_size=3) == [("seq_len - reuse_len", 8)]


def test_preprocessing_refuses_a_perm_size_that_leaves_a_part_undivided_naming_the_flags():
    with pytest.raises(ConfigError) as error:
        RecordConfig(seq_len=128, reuse_len=64, num_predict=21, perm_size=48).validate()
    assert str(error.value) == ("--perm-size 48 must divide both --reuse-len 64 and seq_len - reuse_len = 64 "
                                "(permutation blocks cannot straddle parts)")


def test_a_record_has_the_context_part_then_the_ab_part():
    assert record_parts(seq_len=128, reuse_len=64) == (("reuse_len", 64), ("seq_len - reuse_len", 64))
    assert record_parts(seq_len=512, reuse_len=0) == (("reuse_len", 0), ("seq_len - reuse_len", 512))
