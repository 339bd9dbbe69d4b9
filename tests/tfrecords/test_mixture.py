"""Mixtures of data directories (tfrecords/mixture.py): rates, streams kept whole, epochs, bad weights.

The directories (the ``mixture_dirs`` fixture, tests/conftest.py) are real `xlnet preprocess` outputs
of three parts of the bundled corpus; which
directory a batch row's record came from is found by looking its tokens up in every directory's
own records, so the checks do not trust the schedule's own accounting.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorflow as tf

from support.bundled_data import TINY_DATA
from tfrecords import schema
from tfrecords.manifest import load_manifest
from tfrecords.mixture import (MixtureReader, MixtureSchedule, MixtureSource, check_compatible, check_distinct,
                               parse_weights, records_read)
from tfrecords.reader import ManifestMismatchError

# One xdist worker runs every test of the mixture directories (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("mixture")

def record_sources(directories: dict[str, str]) -> dict[bytes, str]:
    """Every train record's tokens -> the directory holding it."""
    owner = {}
    for name, directory in directories.items():
        manifest = load_manifest(directory)
        files = [manifest.shard_path(shard) for shard in manifest.split("train").shards]
        for serialized in tf.data.TFRecordDataset(files):
            parsed = schema.parse_records(serialized[None], manifest.seq_len)
            owner[parsed["input_ids"][0].numpy().tobytes()] = name
    return owner


def mixture(directories: dict[str, str], names: list[str], weights: list[float]) -> list[MixtureSource]:
    total = sum(weights)
    return [MixtureSource(directories[name], load_manifest(directories[name]), weight / total)
            for name, weight in zip(names, weights)]


def reader(sources, batch: int, **options) -> MixtureReader:
    return MixtureReader(sources, batch, TINY_DATA["seq_len"], TINY_DATA["bi_data"], seed=3, **options)


def batches(reader_: MixtureReader, steps: int) -> list[dict[str, np.ndarray]]:
    """``steps`` batches, micro-steps flattened: one dict of [rows, ...] arrays per record read by every row."""
    out = []
    for element in itertools.islice(reader_.dataset(), steps):
        for micro in range(reader_.accumulation_steps):
            out.append({name: value[micro].numpy() for name, value in element.items()})
    return out


# ------------------------------------------------------------------------------------ rates
def test_shares_of_records_follow_the_weights_at_batch_6(mixture_dirs):
    owner = record_sources({name: mixture_dirs[name] for name in ("wiki-a", "bible")})
    sources = mixture(mixture_dirs, ["wiki-a", "bible"], [0.25, 0.75])
    read = [owner[row.tobytes()] for batch in batches(reader(sources, 6), 200) for row in batch["input_ids"]]
    assert len(read) == 1200
    share = read.count("wiki-a") / len(read)
    assert abs(share - 0.25) <= 0.02, share


def test_three_sources_on_two_rows_are_each_read_at_their_rate(mixture_dirs):
    owner = record_sources(mixture_dirs)
    sources = mixture(mixture_dirs, ["wiki-a", "wiki-b", "bible"], [0.5, 0.3, 0.2])
    read = [owner[row.tobytes()] for batch in batches(reader(sources, 2), 600) for row in batch["input_ids"]]
    for name, weight in (("wiki-a", 0.5), ("wiki-b", 0.3), ("bible", 0.2)):
        assert abs(read.count(name) / len(read) - weight) <= 0.04, (name, read.count(name) / len(read))


def test_the_schedule_accounting_equals_the_records_the_batches_hold(mixture_dirs):
    owner = record_sources({name: mixture_dirs[name] for name in ("wiki-a", "bible")})
    sources = mixture(mixture_dirs, ["wiki-a", "bible"], [1, 3])
    mixed = reader(sources, 4, accumulation_steps=2)
    read = [owner[row.tobytes()] for batch in batches(mixed, 30) for row in batch["input_ids"]]
    records, _ = records_read(mixed.schedule(), 30, 2, bi_data=True)
    assert records == [read.count("wiki-a"), read.count("bible")]


# ------------------------------------------------------------------------------- streams
def test_every_row_continues_one_stream_until_it_ends(mixture_dirs):
    owner = record_sources({name: mixture_dirs[name] for name in ("wiki-a", "bible")})
    sources = mixture(mixture_dirs, ["wiki-a", "bible"], [1, 1])
    lengths = {(source.name, segment.stream_id): segment.records for source in sources
               for segment in MixtureReader([source], 2, TINY_DATA["seq_len"], True).segments[0].values()}
    names = {source.name: name for name, source in zip(("wiki-a", "bible"), sources)}
    previous: dict[int, tuple[str, int, int]] = {}
    switches = 0
    for batch in batches(reader(sources, 6), 150):
        for row, (ids, stream, position) in enumerate(zip(batch["input_ids"], batch["stream_id"],
                                                          batch["stream_pos"])):
            now = (owner[ids.tobytes()], int(stream), int(position))
            if row in previous:
                name, last_stream, last_position = previous[row]
                directory = next(d for d, n in names.items() if n == name)
                if now[:2] == (name, last_stream):
                    assert now[2] == last_position + 1
                else:  # a new stream only after the last record of the one before, from its start
                    assert last_position == lengths[(directory, last_stream)] - 1
                    assert now[2] == 0
                    switches += 1
            previous[row] = now
    assert switches > 0


def test_a_source_that_runs_out_starts_its_next_epoch_while_the_other_goes_on():
    # source 0 holds 5 records an epoch, source 1 one stream of 50: at equal weights source 0 goes
    # through ten epochs for each of source 1's, and the shares stay within one 50-record stream
    # of the weights (2 rows read 2000 records by record 1000 of each row)
    schedule = MixtureSchedule([[(0, 3), (1, 2)], [(0, 50)]], [0.5, 0.5], rows=2, seed=0)
    records, epochs = schedule.read_by(1000)
    assert sum(records) == 2000
    assert abs(records[0] - 1000) <= 50
    # each source's epoch (of the last stream it began) follows its own records, not the other's
    assert abs(epochs[0] - records[0] / 5) <= 2 and abs(epochs[1] - records[1] / 50) <= 1


def test_the_same_seed_and_batch_give_the_same_batches_and_a_reader_starts_at_any_step(mixture_dirs):
    sources = mixture(mixture_dirs, ["wiki-a", "bible"], [1, 2])
    first = batches(reader(sources, 4), 40)
    assert all(np.array_equal(a[key], b[key]) for a, b in zip(first, batches(reader(sources, 4), 40)) for key in a)
    resumed = batches(reader(sources, 4, start_step=25), 15)
    assert all(np.array_equal(a[key], b[key]) for a, b in zip(first[25:], resumed) for key in a)


def test_two_sources_give_different_permutation_seeds_at_the_same_stream_position(mixture_dirs):
    sources = mixture(mixture_dirs, ["wiki-a", "wiki-b"], [1, 1])
    seen: dict[tuple[int, int], set[bytes]] = {}
    owner = record_sources({name: mixture_dirs[name] for name in ("wiki-a", "wiki-b")})
    for batch in batches(reader(sources, 4), 60):
        for ids, stream, position, seed in zip(batch["input_ids"], batch["stream_id"], batch["stream_pos"],
                                               batch["perm_seed"]):
            seen.setdefault((int(stream), int(position)), set()).add((owner[ids.tobytes()], seed.tobytes()))
    pairs = [entries for entries in seen.values() if len({name for name, _ in entries}) == 2]
    assert pairs and all(len({seed for _, seed in entries}) == 2 for entries in pairs)


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("text, problem", [("0,1", "positive"), ("-1,2", "positive"), ("a,1", "'a' is not a number"),
                                           ("nan,1", "positive"), ("1,2,3", "3 weight(s) for 2"),
                                           ("1", "1 weight(s) for 2")])
def test_bad_weights_are_named_with_the_flag(text, problem):
    with pytest.raises(ValueError, match="--mixture-weights") as error:
        parse_weights(text, 2)
    assert problem in str(error.value)


def test_weights_are_normalised_and_several_directories_need_them():
    assert parse_weights("1,3", 2) == (0.25, 0.75)
    with pytest.raises(ValueError, match="2 --data directories need --mixture-weights"):
        parse_weights(None, 2)


def test_the_same_directory_twice_is_refused_however_it_is_written(mixture_dirs):
    directory = mixture_dirs["bible"]
    with pytest.raises(ValueError, match="given twice"):
        check_distinct([directory, directory + "/"])
    with pytest.raises(ValueError, match="given twice"):
        check_distinct([directory, directory + "/manifest.json"])


def test_directories_of_other_shapes_or_vocabularies_cannot_be_mixed(mixture_dirs):
    bible, wiki = load_manifest(mixture_dirs["bible"]), load_manifest(mixture_dirs["wiki-a"])
    other = type(wiki)(config={**wiki.config, "seq_len": 256}, vocab={**wiki.vocab, "sha256": "0" * 64},
                       special_ids=wiki.special_ids, splits=wiki.splits, format_version=wiki.format_version,
                       directory=wiki.directory)
    with pytest.raises(ManifestMismatchError) as error:
        check_compatible([("bible-dir", bible), ("other-dir", other)])
    message = str(error.value)
    assert "other-dir: seq_len is 256, but bible-dir has 128" in message
    assert f"other-dir: vocabulary sha256 is '{'0' * 64}', but bible-dir has '{bible.vocab['sha256']}'" in message


def test_a_directory_on_cloud_storage_mixes_as_its_local_copy_does(mixture_dirs, gcs_prefix):
    import posixpath
    from pathlib import Path

    remote = posixpath.join(gcs_prefix, "bible")
    tf.io.gfile.makedirs(remote)
    for path in sorted(Path(mixture_dirs["bible"]).iterdir()):
        tf.io.gfile.copy(str(path), posixpath.join(remote, path.name))
    local = mixture(mixture_dirs, ["wiki-a", "bible"], [1, 1])
    on_gcs = [local[0], MixtureSource(remote, load_manifest(remote), 0.5)]
    for a, b in zip(batches(reader(local, 4), 30), batches(reader(on_gcs, 4), 30)):
        assert all(np.array_equal(a[key], b[key]) for key in a)
