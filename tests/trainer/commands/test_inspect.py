"""`xlnet inspect DATA_DIR` (trainer/commands/inspect.py) on the tiny data directory and damaged copies
of it: records decoded (trainer/inspection/records.py), --permutation (trainer/inspection/permutations.py),
--stats (trainer/inspection/statistics.py) and --verify (tfrecords/verification.py)."""
from __future__ import annotations

import json
import posixpath
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

import xlnet_cli
from tfrecords.manifest import load_manifest


@pytest.fixture
def data_copy(tiny_data_dir, tmp_path) -> Path:
    """A copy of the session's tiny data directory that a test may damage."""
    return Path(shutil.copytree(tiny_data_dir, tmp_path / "data"))


def first_train_shard(data_dir: Path) -> tuple[Path, int]:
    """The first training shard's path and record count (it holds records)."""
    shard = load_manifest(str(data_dir)).split("train").shards[0]
    assert shard.records > 2
    return data_dir / shard.file, shard.records


def record_at(path: Path, offset: int) -> int:
    """Index of the record whose TFRecord frame (length, CRCs, data) holds byte ``offset``."""
    data, position, index = path.read_bytes(), 0, 0
    while position < len(data):
        (length,) = struct.unpack("<Q", data[position:position + 8])
        position += 8 + 4 + length + 4
        if offset < position:
            return index
        index += 1
    raise AssertionError(f"offset {offset} is past the last record of {path}")


def inspect(capsys, *args: str) -> tuple[int, str, str]:
    code = xlnet_cli.main(["inspect", *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def test_intact_data_directory_verifies_with_exit_0(data_copy, capsys):
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    manifest = load_manifest(str(data_copy))
    records = sum(split.totals["records"] for split in manifest.splits.values())
    assert code == 0
    assert out.strip().splitlines() == [f"verified {data_copy}: 6 shard(s), {records} records in "
                                        f"{sum(p.stat().st_size for p in data_copy.glob('*.tfrecord'))} bytes: "
                                        "all intact"]


def test_shard_truncated_by_100_bytes_is_named_with_its_first_bad_record(data_copy, capsys):
    shard, _ = first_train_shard(data_copy)
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-100])
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: first bad record {record_at(shard, size - 100)}: unreadable (DataLossError: " \
           "truncated record" in out
    assert f"{size - 100} bytes, the manifest says {size}" in out
    assert out.strip().splitlines()[-1].endswith("1 of 6 shard(s) damaged")


def test_flipped_byte_in_the_middle_is_named_with_its_record(data_copy, capsys):
    shard, _ = first_train_shard(data_copy)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle] ^= 0x10
    shard.write_bytes(bytes(data))
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: first bad record {record_at(shard, middle)}: unreadable (DataLossError: " \
           "corrupted record" in out
    assert "bytes, the manifest says" not in out  # same size: only the CRC tells


def test_missing_shard_is_damage(data_copy, capsys):
    shard, _ = first_train_shard(data_copy)
    shard.unlink()
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: missing" in out
    assert out.strip().splitlines()[-1].endswith("1 of 6 shard(s) damaged (1 missing)")


def test_records_out_of_the_manifests_stream_layout_are_named(data_copy, capsys):
    import tensorflow as tf

    shard, records = first_train_shard(data_copy)
    rows = [record.numpy() for record in tf.data.TFRecordDataset(str(shard))]
    rows[1], rows[2] = rows[2], rows[1]  # intact framing and CRCs, wrong places
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for row in rows:
            writer.write(row)
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert f"DAMAGED {shard}: first bad record 1: stream_pos 2, the manifest's layout puts stream_pos 1 here" in out


def test_token_ids_outside_the_manifests_vocabulary_are_named(data_copy, capsys):
    values = json.loads((data_copy / "manifest.json").read_text())
    values["vocab"]["vocab_size"] = 10  # every record holds pieces above the special ids
    (data_copy / "manifest.json").write_text(json.dumps(values))
    code, out, _ = inspect(capsys, str(data_copy), "--verify")
    assert code == 3
    assert "first bad record 0: token id" in out and "outside the vocabulary (size 10)" in out


@pytest.mark.parametrize("mode", [(), ("--verify",), ("--stats",), ("--permutation", "0")])
def test_a_directory_without_manifest_is_a_usage_error_naming_it(tmp_path, capsys, mode):
    code, _, err = inspect(capsys, str(tmp_path), *mode)
    assert code == 2 and f"{tmp_path}/manifest.json not found" in err


def test_intact_copy_on_cloud_storage_verifies(tiny_data_dir, gcs_prefix, capsys):
    import tensorflow as tf

    remote = posixpath.join(gcs_prefix, "data")
    tf.io.gfile.makedirs(remote)
    for path in sorted(Path(tiny_data_dir).iterdir()):
        tf.io.gfile.copy(str(path), posixpath.join(remote, path.name))
    code, out, _ = inspect(capsys, remote, "--verify")
    assert code == 0
    assert out.startswith(f"verified {remote}: 6 shard(s)") and out.strip().endswith("all intact")


# ------------------------------------------------------------------------------- decoding records
def inspect_json(capsys, *args: str) -> list[dict]:
    code, out, err = inspect(capsys, *args, "--format", "json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def stored_records(data_dir: str, split: str, stream: int, count: int) -> list[dict]:
    """A stream's first records as stored, read with tf.data (not through the inspection code)."""
    import tensorflow as tf

    from tfrecords.schema import parse_records

    manifest = load_manifest(data_dir)
    file, first, _ = manifest.split(split).stream_locations()[stream]
    records = tf.data.TFRecordDataset(manifest.shard_path(file)).skip(first).take(count)
    return [{k: v.numpy() for k, v in parse_records(r, manifest.seq_len).items()} for r in records]


def without_marks(text: str) -> str:
    return text.replace("[[", "").replace("]]", "")


def test_without_a_mode_two_records_of_the_first_train_stream_are_decoded(tiny_data_dir, capsys):
    code, out, _ = inspect(capsys, tiny_data_dir)
    headings = [line for line in out.splitlines() if line.startswith("train stream")]
    assert code == 0
    assert [h.split(" (")[0] for h in headings] == ["train stream 0, record 0", "train stream 0, record 1"]
    assert out.count("memory-reuse part (segment A") == 2 and out.count("<sep> at") == 4


def test_decoded_text_reproduces_the_corpus_sentences_of_the_record(tiny_data_dir, capsys):
    from support.bundled_data import CORPUS_DIR, read_corpus_documents
    from tfrecords.text_normalization import normalize_text

    corpus = " ".join(" ".join(normalize_text(line, False) for line in document)
                      for path in sorted(CORPUS_DIR.glob("*.txt.gz")) for document in read_corpus_documents(path, 400))
    corpus = " ".join(corpus.split())
    records = inspect_json(capsys, tiny_data_dir, "--stream", "1", "--records", "3")
    checked = 0
    for record in records:
        for part in ("memory", "a", "b"):  # each part is a run of the stream's text; <eod> ends a document
            for text in without_marks(record[part]["text"]).split("<eod>"):
                if "<unk>" not in text and len(text.strip()) > 20:
                    assert " ".join(text.split()) in corpus
                    checked += 1
    assert checked >= 9


def test_target_marks_agree_with_the_records_mask(tiny_data_dir, vocab, capsys):
    import re

    processor = vocab.processor()
    specials = set(vocab.special_ids.to_dict().values())
    decoded = inspect_json(capsys, tiny_data_dir, "--stream", "2", "--records", "2")
    for record, stored in zip(decoded, stored_records(tiny_data_dir, "train", 2, 2)):
        ids, masked = stored["input_ids"], stored["is_masked"].astype(bool)
        assert record["targets"] == [int(p) for p in np.flatnonzero(masked)]
        marks = [mark.strip() for part in ("memory", "a", "b") for mark in re.findall(r"\[\[(.*?)]]",
                                                                                       record[part]["text"])]
        runs = []  # runs of targets inside one part, decoded by SentencePiece itself
        for first, last in ((0, 63), (record["a"]["positions"]), (record["b"]["positions"])):
            flags = np.concatenate([[False], masked[first:last + 1], [False]]).astype(int)
            starts, ends = np.flatnonzero(np.diff(flags) == 1), np.flatnonzero(np.diff(flags) == -1)
            runs += [ids[first + a:first + b] for a, b in zip(starts, ends)]
        assert len(marks) == len(runs)
        for mark, run in zip(marks, runs):
            if not specials & set(run.tolist()):
                assert mark == processor.decode(run.tolist()).strip()


def test_a_reversed_stream_is_shown_in_reading_order(tiny_data_dir, vocab, capsys):
    (record,) = inspect_json(capsys, tiny_data_dir, "--stream", "16", "--records", "1")
    stored = stored_records(tiny_data_dir, "train", 16, 1)[0]["input_ids"]
    assert record["reversed"] is True
    forward = vocab.processor().decode(stored[64:record["sep"][0]][::-1].tolist())
    assert without_marks(record["a"]["text"]) == " ".join(forward.split())


@pytest.mark.parametrize("flags, message", [
    (("--stream", "32"), "--stream 32: the train split has streams 0..31"),
    (("--stream", "-1"), "--stream -1: the train split has streams 0..31"),
    (("--records", "0"), "--records must be >= 1, got 0"),
    (("--plot", "x.png"), "--plot draws the statistics or the cleaning: use it with --stats or --cleaning"),
    (("--set", "train.seed=1"), "use them with it"),
])
def test_out_of_range_selections_are_usage_errors_naming_the_flag(tiny_data_dir, capsys, flags, message):
    code, out, err = inspect(capsys, tiny_data_dir, *flags)
    assert code == 2 and out == "" and message in err


def test_more_records_than_the_stream_holds_is_a_usage_error(tiny_data_dir, capsys):
    records = load_manifest(tiny_data_dir).split("valid").stream_locations()[0][2]
    code, _, err = inspect(capsys, tiny_data_dir, "--split", "valid", "--stream", "0", "--records", str(records + 1))
    assert code == 2 and f"--records {records + 1}: valid stream 0 has {records} records" in err


def test_an_unknown_split_is_a_usage_error(tiny_data_dir, capsys):
    status = xlnet_cli.main(["inspect", tiny_data_dir, "--split", "test"])
    err = capsys.readouterr().err
    assert status == 2 and "invalid choice: 'test'" in err and len(err.strip().splitlines()) == 1


def test_truncated_shard_names_the_file_and_the_record(data_copy, capsys):
    shard, records = first_train_shard(data_copy)
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-100])
    last = load_manifest(str(data_copy)).split("train").shards[0].streams[-1]
    code, out, err = inspect(capsys, str(data_copy), "--stream", str(last.stream_id), "--records", str(last.records))
    assert code == 3 and out == ""
    assert f"damaged data: {shard}: record {record_at(shard, size - 100)}: unreadable (DataLossError: truncated" in err
    code, _, err = inspect(capsys, str(data_copy), "--stats")
    assert code == 3 and f"{shard}: record {record_at(shard, size - 100)}: unreadable" in err


def test_token_ids_beyond_the_vocabulary_are_named_with_file_and_record(data_copy, capsys):
    import tensorflow as tf

    shard, _ = first_train_shard(data_copy)
    rows = [record.numpy() for record in tf.data.TFRecordDataset(str(shard))]
    example = tf.train.Example.FromString(rows[1])
    example.features.feature["input_ids"].int64_list.value[5] = 9999  # the vocabulary has 8000 pieces
    rows[1] = example.SerializeToString()
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for row in rows:
            writer.write(row)
    code, _, err = inspect(capsys, str(data_copy), "--stream", "0", "--records", "2")
    assert code == 3 and f"{shard}: record 1: token id 9999 outside the vocabulary (size 8000)" in err


# ------------------------------------------------------------------------------------ --permutation
def test_permutation_agrees_with_the_masks_the_trainer_builds(tiny_data_dir, capsys):
    import tensorflow as tf

    from tfrecords.reader import permutation_seeds
    from trainer.configs.overrides import resolve_configs
    from trainer.models.pretrainer import XLNetPretrainer
    from trainer.tasks.pretraining import PretrainingTask

    step = 140  # past the end of some rows' walks (129 and 137 records): they are in their second epoch
    views = inspect_json(capsys, tiny_data_dir, "--permutation", str(step), "--records", "16")
    model, train, _ = resolve_configs("tiny")
    manifest = load_manifest(tiny_data_dir)
    batch = next(iter(PretrainingTask(model, train, manifest).reader("train", 16, start_step=step).dataset()))
    features = {name: value[0] for name, value in batch.items()}
    built = XLNetPretrainer(model, train.seq_len, train.num_predict, train.perm_size,
                            manifest.special_ids).targets_from_compact(features)
    perm_mask = built["perm_mask"].numpy()
    assert [(v["stream_id"], v["stream_pos"]) for v in views] == list(zip(
        features["stream_id"].numpy().tolist(), features["stream_pos"].numpy().tolist()))
    assert {v["epoch"] for v in views} == {0, 1}
    keys = [[train.seed, v["stream_id"], v["stream_pos"], v["epoch"]] for v in views]
    assert [v["perm_seed"] for v in views] == permutation_seeds(tf.constant(keys)).numpy().tolist()
    for row, view in enumerate(views):
        valid = built["target_valid"].numpy()[row] > 0
        assert view["predicted_targets"] == sorted(built["target_positions"].numpy()[row][valid].tolist())
        assert view["perm_seed"] == features["perm_seed"].numpy()[row].tolist()
        assert len(view["queries"]) == 3
        for query in view["queries"]:
            assert query["may_see"] == np.flatnonzero(~perm_mask[row, query["position"]]).tolist()
        ranks = {p: view["order"].index(p) for p in view["predicted_targets"]}
        first, last = view["queries"][0], view["queries"][-1]
        assert ranks[first["position"]] == min(ranks.values()) and ranks[last["position"]] == max(ranks.values())
    assert [v["targets"] for v in views] == [np.flatnonzero(m).tolist() for m in features["is_masked"].numpy()]


def test_permutation_text_shows_the_order_and_what_targets_see(tiny_data_dir, capsys):
    code, out, _ = inspect(capsys, tiny_data_dir, "--permutation", "3", "--records", "1", "--set", "train.perm_size=32")
    assert code == 0
    assert out.startswith("step 3, batch row 0 of 16, epoch 0, perm_seed [")
    assert "memory-reuse part, positions 0-63, offsets in order:" in out and "A/B part, positions 64-127" in out
    offsets = out.split("offsets in order:\n")[1].split("\n  ")[0].split()
    assert sorted(map(int, offsets)) == list(range(32))  # one order of the 32 offsets of a block
    assert out.count("of 21 in the order): sees") == 3


def test_permutation_with_a_stream_no_row_reads_or_too_many_rows_is_a_usage_error(tiny_data_dir, capsys):
    code, _, err = inspect(capsys, tiny_data_dir, "--permutation", "0", "--records", "17")
    assert code == 2 and "--records 17: step 0's batch has 16 rows" in err
    code, _, err = inspect(capsys, tiny_data_dir, "--permutation", "0", "--set", "train.train_batch_size=4",
                           "--stream", "9")
    assert code == 2 and "--stream 9: no row of step 0's batch reads it" in err
    code, _, err = inspect(capsys, tiny_data_dir, "--permutation", "0", "--preset", "base")
    assert code == 2 and "seq_len: data has 128, training uses 512" in err


# ------------------------------------------------------------------------------------------- --stats
def test_stats_counts_equal_the_manifests(tiny_data_dir, capsys):
    code, out, _ = inspect(capsys, tiny_data_dir, "--stats", "--format", "json")
    stats = json.loads(out)
    manifest = load_manifest(tiny_data_dir)
    assert code == 0
    for name, split in manifest.splits.items():
        numbers = stats["splits"][name]
        assert numbers["records"] == split.totals["records"]
        assert numbers["targets"] == split.totals["masked_tokens"]
        assert numbers["targets_per_record"]["histogram"] == {"21": split.totals["records"]}
        assert sum(numbers["streams"].values()) == numbers["tokens_in_records"] <= split.totals["tokens"]
        assert numbers["documents_ending_in_records"] <= split.totals["documents"]
        assert numbers["document_lengths"]["count"] == numbers["documents_ending_in_records"]
    assert stats["configured_span_lengths"]["1"] == pytest.approx(1 / sum(1 / n for n in range(1, 6)))
    shares = stats["shares"]
    assert shares["train"]["records"] + shares["valid"]["records"] == pytest.approx(1.0)


def test_stats_text_and_plot(tiny_data_dir, tmp_path, capsys):
    plot = tmp_path / "stats.png"
    code, out, _ = inspect(capsys, tiny_data_dir, "--stats", "--plot", str(plot))
    total = load_manifest(tiny_data_dir).split("train").totals
    assert code == 0
    assert f"train: {total['records']} records (manifest {total['records']})" in out
    assert out.strip().endswith(f"plot written to {plot}")
    assert plot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_decoding_stats_and_plot_on_cloud_storage(tiny_data_dir, spm_model, gcs_prefix, capsys):
    import tensorflow as tf

    remote = posixpath.join(gcs_prefix, "data")
    tf.io.gfile.makedirs(remote)
    for path in sorted(Path(tiny_data_dir).iterdir()):
        if path.name != "manifest.json":
            tf.io.gfile.copy(str(path), posixpath.join(remote, path.name))
    manifest = json.loads((Path(tiny_data_dir) / "manifest.json").read_text())
    manifest["vocab"]["path"] = "/elsewhere/spiece.model"  # found next to the manifest instead
    tf.io.gfile.copy(spm_model, posixpath.join(remote, "spiece.model"))
    with tf.io.gfile.GFile(posixpath.join(remote, "manifest.json"), "w") as handle:
        handle.write(json.dumps(manifest))
    (record,) = inspect_json(capsys, remote, "--records", "1")
    assert record["file"] == posixpath.join(remote, "train-00000-of-00004.tfrecord")
    plot = posixpath.join(gcs_prefix, "stats.png")
    code, _, _ = inspect(capsys, remote, "--stats", "--plot", plot)
    assert code == 0 and tf.io.gfile.GFile(plot, "rb").read(4) == b"\x89PNG"


@pytest.mark.parametrize("verify", [[], ["--verify"]])
def test_a_manifest_that_is_not_utf8_is_one_line_naming_it(data_copy, capsys, verify):
    (data_copy / "manifest.json").write_bytes(b"\xff" + (data_copy / "manifest.json").read_bytes())
    code, out, err = inspect(capsys, str(data_copy), *verify)
    assert code == 2 and err.count("\n") == 1
    assert f"{data_copy / 'manifest.json'} is not a valid manifest: 'utf-8' codec can't decode byte 0xff" in err
