"""Mixture weights a float cannot hold, and one data directory under two names (tfrecords/mixture.py)."""
from __future__ import annotations

import os

import pytest

from tfrecords.errors import UsageError
from tfrecords.mixture import check_distinct, parse_weights


def test_a_subnormal_weight_is_refused_by_name():
    with pytest.raises(UsageError) as error:
        parse_weights("1e-320,1", 2)
    assert str(error.value) == ("--mixture-weights 1e-320,1: the weight 1e-320 is too small to compute with "
                                "(below 2.22507e-308); scale the weights up")


def test_weights_whose_sum_overflows_are_refused_by_name():
    with pytest.raises(UsageError) as error:
        parse_weights("1e308,1e308", 2)
    assert str(error.value) == ("--mixture-weights 1e308,1e308: the weights add up to more than a float holds "
                                "(1.79769e+308); scale the weights down")


def test_a_weight_whose_share_underflows_is_refused_by_name():
    with pytest.raises(UsageError) as error:
        parse_weights("1e-300,1e300", 2)
    assert str(error.value) == ("--mixture-weights 1e-300,1e300: the weight 1e-300 is too small a share of the "
                                "total to compute with; give weights within a factor of 1e300 of each other")


def test_weights_far_apart_but_representable_are_normalised():
    assert parse_weights("1e-200,1e100", 2) == (1e-300, 1.0)


def test_the_same_directory_through_a_symlink_is_refused(tmp_path):
    directory = tmp_path / "data"
    directory.mkdir()
    os.symlink(directory, tmp_path / "link")
    with pytest.raises(UsageError) as error:
        check_distinct([str(directory), str(tmp_path / "link")])
    assert str(error.value) == (f"--data {tmp_path}/link: the same data directory is given twice "
                                f"({directory} and {tmp_path}/link)")


def test_the_same_directory_by_a_relative_path_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    relative = os.path.relpath(tmp_path / "data")
    with pytest.raises(UsageError, match="given twice"):
        check_distinct([relative, f"{tmp_path}/data/manifest.json"])


def test_cloud_storage_paths_are_compared_as_written():
    check_distinct(["gs://bucket/a", "gs://bucket/b"])
    with pytest.raises(UsageError, match="given twice"):
        check_distinct(["gs://bucket/a", "gs://bucket/a/"])
