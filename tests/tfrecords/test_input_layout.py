"""The rule of shards, streams and hosts (tfrecords/input_layout.py): every replica gets rows, every
forward row a non-empty stream of its own; the number of shards does not enter."""
from __future__ import annotations

import pytest

from tfrecords.errors import UsageError
from tfrecords.input_layout import BatchLayout, InputLayoutError, check_layout, forward_streams, layout_problems
from tfrecords.manifest import load_manifest


def test_a_batch_of_one_forward_row_per_stream_is_fed_whatever_the_shards_and_hosts():
    # 16 forward rows (bi_data) over 16 hosts of one replica each, 16 streams in 2 shards
    assert layout_problems(BatchLayout(32, replicas=16, pipelines=16, bi_data=True), 16, 2, "d") == []


def test_more_forward_rows_than_streams_names_the_numbers_and_what_to_preprocess():
    layout = BatchLayout(64, replicas=16, pipelines=4, bi_data=True)
    (problem,) = layout_problems(layout, streams=24, shards=8, where="--data D's train split")
    assert problem == (
        "--data D's train split has 24 non-empty forward text stream(s) in 8 shard(s); train.train_batch_size 64 "
        "over 16 replica(s) in 4 input pipeline(s) has 32 forward rows (bi_data), 8 per pipeline, and every forward "
        "row reads a stream of its own (32 > 24): preprocess with `xlnet preprocess --num-streams 32` or more (a "
        "multiple of 32 gives every row as many streams; --num-shards can be any count up to --num-streams, it need "
        "not match the hosts), or lower train.train_batch_size to 32")


def test_the_lower_batch_offered_splits_evenly_over_the_replicas():
    # 10 streams feed at most 20 rows with bi_data; over 4 replicas that is 16 (2 forward rows each)
    assert BatchLayout(64, replicas=4, bi_data=True).largest_batch(10) == 16
    assert BatchLayout(64, replicas=4, bi_data=False).largest_batch(10) == 8


def test_fewer_streams_than_replicas_offers_no_lower_batch():
    (problem,) = layout_problems(BatchLayout(16, replicas=8, pipelines=8, bi_data=True), 3, 1, "d")
    assert problem.endswith("fewer streams than replicas cannot give every replica a row, whatever "
                            "train.train_batch_size is")


@pytest.mark.parametrize("batch, replicas, bi_data", [(6, 4, False), (4, 4, True), (2, 4, True), (12, 4, True)])
def test_a_batch_that_leaves_a_replica_without_rows_or_halves_is_refused(batch, replicas, bi_data):
    layout = BatchLayout(batch, replicas, bi_data=bi_data, batch_field="train.eval_batch_size")
    with pytest.raises(InputLayoutError, match=f"global batch size {batch} \\(train.eval_batch_size\\) cannot be "
                                               f"split over {replicas} replica"):
        layout.per_replica()


def test_the_layout_error_is_a_usage_error():
    assert issubclass(InputLayoutError, UsageError)


def test_only_non_empty_forward_streams_count(small_data_dir):
    import dataclasses

    manifest = load_manifest(small_data_dir)
    assert forward_streams(manifest, "train") == [0, 1, 2, 3]  # 4, 5, 6, 7 are the reversed copies
    split = manifest.split("valid")
    emptied = [dataclasses.replace(shard, streams=tuple(  # stream 1 and its reversed copy 5 got no document
        dataclasses.replace(stream, records=0) if stream.stream_id % 4 == 1 else stream for stream in shard.streams))
        for shard in split.shards]
    manifest = dataclasses.replace(manifest, splits={**manifest.splits,
                                                     "valid": dataclasses.replace(split, shards=tuple(emptied))})
    assert forward_streams(manifest, "valid") == [0, 2, 3]


def test_a_mixture_counts_the_streams_of_all_its_directories(small_data_dir):
    manifest = load_manifest(small_data_dir)  # 4 forward streams in 2 train shards
    layout = BatchLayout(16, replicas=2, bi_data=True)  # 8 forward rows
    with pytest.raises(InputLayoutError, match=r"has 4 non-empty forward text stream\(s\) in 2 shard\(s\)"):
        check_layout(layout, [manifest], "train", "d")
    check_layout(layout, [manifest, manifest], "train", "d")
