"""The stream-ordered reader: every row of every batch continues its own text stream."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tfrecords import schema
from tfrecords.manifest import load_manifest
from tfrecords.reader import ManifestMismatchError, StreamReader, file_sha256, split_segments, validate_manifest


@pytest.fixture(scope="module")
def manifest(tiny_data_dir):
    return load_manifest(str(tiny_data_dir))


def make_reader(manifest, batch: int, **kwargs) -> StreamReader:
    return StreamReader(manifest, "train", batch, manifest.seq_len, manifest.num_predict, manifest.bi_data,
                        **kwargs)


def stacked(batches, name):
    """[steps, accumulation, B] array of one feature from a list of per-replica batches."""
    return np.stack([b[name].numpy() for b in batches])


def assert_rows_continue(manifest, stream_ids: np.ndarray, positions: np.ndarray) -> None:
    """stream_ids / positions [steps, rows]: each row advances by one record in its stream, or
    moves from the last record of a stream to the first record of the next stream of its walk."""
    lengths = {stream: segment.records for stream, segment in split_segments(manifest, "train").items()}
    for row in range(stream_ids.shape[1]):
        for t in range(1, stream_ids.shape[0]):
            before = (int(stream_ids[t - 1, row]), int(positions[t - 1, row]))
            now = (int(stream_ids[t, row]), int(positions[t, row]))
            if now[0] == before[0]:
                assert now[1] == before[1] + 1, f"row {row} step {t}: {before} -> {now}"
            else:
                assert before[1] == lengths[before[0]] - 1 and now[1] == 0, f"row {row} step {t}: {before} -> {now}"


@pytest.mark.parametrize("batch", [2, 4, 8])
def test_rows_continue_their_stream_from_step_to_step(manifest, batch):
    reader = make_reader(manifest, batch)
    batches = list(reader.dataset().take(60))
    stream_ids, positions = stacked(batches, "stream_id")[:, 0], stacked(batches, "stream_pos")[:, 0]
    assert_rows_continue(manifest, stream_ids, positions)
    assert stream_ids.shape == (60, batch)


@pytest.mark.parametrize("batch", [2, 4, 8])
def test_backward_half_reads_the_reversed_copy_of_the_forward_half(manifest, batch):
    assert manifest.bi_data
    batches = list(make_reader(manifest, batch).dataset().take(5))
    stream_ids = stacked(batches, "stream_id")[:, 0]
    positions = stacked(batches, "stream_pos")[:, 0]
    half = batch // 2
    num_streams = manifest.split("train").num_streams
    np.testing.assert_array_equal(stream_ids[:, half:], stream_ids[:, :half] + num_streams)
    np.testing.assert_array_equal(positions[:, half:], positions[:, :half])


def test_rows_with_fewer_rows_than_streams_walk_disjoint_stream_sets(manifest):
    reader = make_reader(manifest, 4)
    walks = reader.slot_walks(1, range(1))
    forward = [{segment.stream_id for segment in walk} for walk in walks[:2]]
    num_streams = manifest.split("train").num_streams
    assert forward[0].isdisjoint(forward[1])
    assert forward[0] | forward[1] == set(range(num_streams))
    assert forward[0] == {s for s in range(num_streams) if s % 2 == 0}


def test_two_replicas_read_disjoint_streams_and_each_row_continues(manifest):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    reader = make_reader(manifest, 8)
    iterator = iter(reader.distribute(strategy))
    per_replica = [[], []]
    for _ in range(30):
        batch = next(iterator)
        for replica, ids in enumerate(strategy.experimental_local_results(batch["stream_id"])):
            positions = strategy.experimental_local_results(batch["stream_pos"])[replica]
            per_replica[replica].append((ids.numpy()[0], positions.numpy()[0]))
    streams = []
    for replica in range(2):
        ids = np.stack([ids for ids, _ in per_replica[replica]])
        positions = np.stack([pos for _, pos in per_replica[replica]])
        assert ids.shape == (30, 4)
        assert_rows_continue(manifest, ids, positions)
        streams.append(set(ids.ravel().tolist()))
    assert streams[0].isdisjoint(streams[1])


def test_start_step_resumes_exactly_where_a_reader_from_zero_is(manifest):
    from_zero = list(make_reader(manifest, 4, seed=7).dataset().take(13))[12]
    resumed = next(iter(make_reader(manifest, 4, seed=7, start_step=12).dataset()))
    for name in from_zero:
        np.testing.assert_array_equal(from_zero[name].numpy(), resumed[name].numpy(), err_msg=name)


def test_start_step_past_an_epoch_wraps_to_the_next_epoch(manifest):
    reader = make_reader(manifest, 2)
    epoch_length = min(sum(s.records for s in walk) for walk in reader.slot_walks(1, range(1)))
    batch = next(iter(make_reader(manifest, 2, start_step=epoch_length).dataset()))
    first = next(iter(reader.dataset()))
    # forward row 0 is back at the first record of its first stream
    assert batch["stream_id"].numpy()[0, 0] == first["stream_id"].numpy()[0, 0]
    assert batch["stream_pos"].numpy()[0, 0] == 0
    # a new epoch draws a new permutation for the same record
    assert not np.array_equal(batch["perm_seed"].numpy()[0, 0], first["perm_seed"].numpy()[0, 0])


def test_perm_seeds_are_fresh_for_every_example_and_step_and_reproducible(manifest):
    batches = list(make_reader(manifest, 8, seed=1).dataset().take(10))
    again = list(make_reader(manifest, 8, seed=1).dataset().take(10))
    other = list(make_reader(manifest, 8, seed=2).dataset().take(10))
    seeds = stacked(batches, "perm_seed").reshape(-1, 2)
    assert len({tuple(s) for s in seeds.tolist()}) == len(seeds)
    np.testing.assert_array_equal(seeds, stacked(again, "perm_seed").reshape(-1, 2))
    assert not np.array_equal(seeds, stacked(other, "perm_seed").reshape(-1, 2))


def test_features_follow_the_compact_contract(manifest):
    batch = next(iter(make_reader(manifest, 4).dataset()))
    length = manifest.seq_len
    assert {name: tuple(value.shape) for name, value in batch.items()} == {
        "input_ids": (1, 4, length), "segment_ids": (1, 4, length), "is_masked": (1, 4, length),
        "perm_seed": (1, 4, 2), "stream_id": (1, 4), "stream_pos": (1, 4)}
    assert all(value.dtype == tf.int32 for value in batch.values())


def test_gradient_accumulation_micro_steps_continue_each_row(manifest):
    batches = list(make_reader(manifest, 4, accumulation_steps=3).dataset().take(4))
    positions = stacked(batches, "stream_pos").reshape(12, 4)  # [step * micro, row]
    stream_ids = stacked(batches, "stream_id").reshape(12, 4)
    assert_rows_continue(manifest, stream_ids, positions)
    plain = list(make_reader(manifest, 4).dataset().take(12))
    np.testing.assert_array_equal(stacked(plain, "input_ids").reshape(12, 4, -1),
                                  stacked(batches, "input_ids").reshape(12, 4, -1))


def test_resampled_masks_keep_the_budget_and_change_after_the_first_epoch(manifest):
    reader = make_reader(manifest, 2, resample_masks=True, seed=5)
    epoch_length = min(sum(s.records for s in walk) for walk in reader.slot_walks(1, range(1)))
    first_epoch = next(iter(reader.dataset()))
    stored = next(iter(make_reader(manifest, 2).dataset()))
    np.testing.assert_array_equal(first_epoch["is_masked"].numpy(), stored["is_masked"].numpy())
    later = next(iter(make_reader(manifest, 2, resample_masks=True, seed=5, start_step=epoch_length).dataset()))
    again = next(iter(make_reader(manifest, 2, resample_masks=True, seed=5, start_step=epoch_length).dataset()))
    np.testing.assert_array_equal(later["input_ids"].numpy()[0, 0], stored["input_ids"].numpy()[0, 0])
    new_mask, old_mask = later["is_masked"].numpy()[0], stored["is_masked"].numpy()[0]
    assert not np.array_equal(new_mask, old_mask)
    np.testing.assert_array_equal(new_mask.sum(axis=1), old_mask.sum(axis=1))
    np.testing.assert_array_equal(new_mask, again["is_masked"].numpy()[0])
    ids = later["input_ids"].numpy()[0]
    special = np.isin(ids, [manifest.special_ids["sep"], manifest.special_ids["cls"]])
    assert not new_mask[special].any()


def test_batch_needing_more_streams_than_the_split_has_is_refused(manifest):
    streams = manifest.split("train").num_streams
    with pytest.raises(ValueError, match="forward text streams"):
        make_reader(manifest, 2 * (streams + 1)).dataset()


def test_odd_per_replica_batch_with_bi_data_is_refused(manifest):
    with pytest.raises(ValueError, match="even"):
        make_reader(manifest, 3).dataset()


def vocab_file(manifest, tiny_data_dir):
    from tfrecords.manifest import vocabulary_path

    return vocabulary_path(manifest)


def test_matching_manifest_passes_validation(manifest, tiny_data_dir):
    validate_manifest(manifest, seq_len=manifest.seq_len, reuse_len=manifest.reuse_len, bi_data=manifest.bi_data,
                      num_predict=manifest.num_predict, vocab_size=manifest.vocab["vocab_size"],
                      vocab_sha256=file_sha256(vocab_file(manifest, tiny_data_dir)))


def test_manifest_mismatch_names_every_differing_field(manifest):
    old = dataclasses.replace(manifest, format_version=schema.FORMAT_VERSION + 1)
    with pytest.raises(ManifestMismatchError) as error:
        validate_manifest(old, seq_len=manifest.seq_len * 2, reuse_len=manifest.reuse_len + 1,
                          bi_data=not manifest.bi_data, num_predict=manifest.num_predict - 1,
                          vocab_size=manifest.vocab["vocab_size"] + 1, vocab_sha256="0" * 64)
    message = str(error.value)
    for expected in ("format_version", "seq_len", "reuse_len", "bi_data", "vocab_size", "num_predict",
                     "vocabulary checksum", "train.seq_len", "model.reuse_len", "model.bi_data"):
        assert expected in message, expected
    assert str(manifest.seq_len * 2) in message and str(manifest.seq_len) in message
