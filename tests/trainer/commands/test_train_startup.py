"""`xlnet train`'s start-up check of the data directory (trainer/commands/train.py): every shard the
manifest lists is there with its recorded size, before anything is built or trained."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import xlnet_cli
from tfrecords.manifest import load_manifest

from support.bundled_data import SMALL_DATA_TRAINING

# The tiny preset made smaller still (as in tests/trainer/tasks/test_pretraining.py).
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32",
         "train_batch_size=4", "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2",
         "train_steps=2", "checkpoint_every=2", "eval_every=0"]


@pytest.fixture
def data_copy(small_data_dir, tmp_path) -> Path:
    """A copy of the session's small data directory (no Beam needed) that a test may damage."""
    return Path(shutil.copytree(small_data_dir, tmp_path / "data"))


def train(data: Path, model_dir: Path, capsys, *overrides: str) -> tuple[int, str]:
    args = ["train", "--data", str(data), "--model-dir", str(model_dir), "--preset", "tiny"]
    for item in SMALL + SMALL_DATA_TRAINING + list(overrides):
        args += ["--set", item]
    code = xlnet_cli.main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_a_truncated_shard_stops_training_before_anything_is_built(data_copy, tmp_path, capsys):
    shard = data_copy / load_manifest(str(data_copy)).split("train").shards[1].file
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-100])
    code, err = train(data_copy, tmp_path / "model", capsys)
    assert code == 3
    assert f"xlnet train: error: damaged data in {data_copy}: {shard}: expected {size} bytes, found {size - 100} " \
           "bytes" in err
    assert f"xlnet inspect {data_copy} --verify" in err
    assert not (tmp_path / "model" / "checkpoints").exists()
    assert not (tmp_path / "model" / "model_config.json").exists()


def test_a_missing_shard_stops_training_with_exit_3(data_copy, tmp_path, capsys):
    shard = data_copy / load_manifest(str(data_copy)).split("valid").shards[0].file
    size = shard.stat().st_size
    shard.unlink()
    code, err = train(data_copy, tmp_path / "model", capsys)
    assert code == 3
    assert f"{shard}: expected {size} bytes, found no such file" in err
    assert not (tmp_path / "model").exists()


def test_an_older_manifest_without_sizes_gets_a_note_and_the_existence_check(data_copy, tmp_path, capsys):
    values = json.loads((data_copy / "manifest.json").read_text())
    for split in values["splits"].values():
        for shard in split["shards"]:
            del shard["bytes"]
    (data_copy / "manifest.json").write_text(json.dumps(values))
    # seq_len differs from the data's: the run stops at the next check, after the note, before training
    code, err = train(data_copy, tmp_path / "model", capsys, "seq_len=256")
    assert code == 2 and "seq_len: data has 64, training uses 256" in err
    assert f"xlnet train: note: {data_copy}'s manifest records no shard sizes" in err
    (data_copy / "valid-00000-of-00001.tfrecord").unlink()
    code, err = train(data_copy, tmp_path / "model", capsys)
    assert code == 3 and "valid-00000-of-00001.tfrecord: listed in the manifest, found no such file" in err


def test_a_manifest_that_is_not_utf8_stops_training_with_one_line_naming_it(data_copy, tmp_path, capsys):
    (data_copy / "manifest.json").write_bytes(b"\xff" + (data_copy / "manifest.json").read_bytes())
    code, err = train(data_copy, tmp_path / "model", capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"xlnet train: error: {data_copy / 'manifest.json'} is not a valid manifest: 'utf-8' codec "
                          "can't decode byte 0xff in position 0")
