"""`xlnet train` checks the rule of shards, streams and hosts at start-up
(trainer/launch/pretraining_run.py check_input_layout, the rule in tfrecords/input_layout.py): a
batch the data's streams cannot feed stops with exit status 2, one line naming the numbers and what to
preprocess, before the model directory is written. Four real worker processes are in
tests/trainer/runtime/test_multi_worker_input.py."""
from __future__ import annotations

import pytest
from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING

import xlnet_cli
from tfrecords.input_layout import InputLayoutError
from trainer.launch.pretraining_run import PretrainingRun, build_pretraining

# small_data_dir: 4 forward streams (bi_data) in 2 train shards; its valid split has 4 as well
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_steps=1",
         "steps_per_loop=1", "eval_steps=1", f"vocab_size={SMALL_DATA['vocab_size']}"] + SMALL_DATA_TRAINING


def train(data, model_dir, *overrides: str) -> int:
    args = ["train", "--data", str(data), "--model-dir", str(model_dir), "--preset", "tiny", "--strategy", "cpu"]
    for item in SMALL + list(overrides):
        args += ["--set", item]
    return xlnet_cli.main(args)


def test_a_train_batch_needing_more_streams_than_the_data_has_stops_with_status_2(small_data_dir, tmp_path, capsys):
    code = train(small_data_dir, tmp_path / "model", "train_batch_size=16", "eval_batch_size=8")
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"xlnet train: error: --data {small_data_dir}'s train split has 4 non-empty forward text stream(s) in 2 "
        "shard(s); train.train_batch_size 16 over 1 replica(s) in 1 input pipeline(s) has 8 forward rows (bi_data), "
        "8 per pipeline, and every forward row reads a stream of its own (8 > 4): preprocess with `xlnet preprocess "
        "--num-streams 8` or more (a multiple of 8 gives every row as many streams; --num-shards can be any count up "
        "to --num-streams, it need not match the hosts), or lower train.train_batch_size to 8")
    assert not (tmp_path / "model").exists()


def test_an_evaluation_batch_the_valid_split_cannot_feed_stops_at_start_up_not_at_the_first_evaluation(
        small_data_dir, tmp_path, capsys):
    code = train(small_data_dir, tmp_path / "model", "train_batch_size=8", "eval_batch_size=16", "eval_every=1000")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err.startswith(f"xlnet train: error: {small_data_dir}'s valid split (evaluated every 1000 steps; "
                          "train.eval_every=0 turns evaluation off) has 4 non-empty forward text stream(s) in 1 shard(s)")
    assert "lower train.eval_batch_size to 8" in err
    assert not (tmp_path / "model").exists()


def test_a_batch_that_cannot_be_split_over_the_replicas_stops_with_status_2(small_data_dir, tmp_path,
                                                                           mirrored_strategy):
    run = PretrainingRun(data=(small_data_dir,), model_dir=str(tmp_path / "model"), preset="tiny",
                         overrides=tuple(SMALL + ["train_batch_size=6", "eval_batch_size=8"]))
    with pytest.raises(InputLayoutError, match=r"global batch size 6 \(train.train_batch_size\) cannot be split over "
                                               r"2 replica\(s\) into even \[forward, backward\] halves \(bi_data\): "
                                               "use a multiple of 4"):
        build_pretraining(run, strategy=mirrored_strategy, log=lambda line: None)
    assert not (tmp_path / "model").exists()
