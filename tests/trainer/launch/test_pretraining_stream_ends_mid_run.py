"""A training shard that ends early once `xlnet train` runs (past its start-up check: the file is cut
short, in place, after the run's first step) stops the run with exit status 3 and one line naming
the shard and the stream, never a silent short epoch (the reader's missing-record marker,
tfrecords/reader.py, turned into a TrainingDataError by trainer/runtime/controller.py). A real
`xlnet train` process on a copy of the small bundled data directory."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import output_of, start, stopped, wait_for

from tfrecords.errors import EXIT_DATA
from trainer.runtime.model_dir import ModelDirectory

SHARD = "train-00000-of-00002.tfrecord"  # streams 0, 2, 4, 6: stream 6 is its last 45 records (183-227)
SETTINGS = ["n_layer=1", "d_model=32", "n_head=2", "d_head=16", "d_inner=64", "mem_len=16", "train_batch_size=2",
            "steps_per_loop=10", "warmup_steps=2", "checkpoint_every=50", "eval_every=0", "train_steps=100000"]


def record_offsets(path: Path) -> list[int]:
    """The byte offset of each record of a TFRecord file (length 8, its CRC 4, data, CRC 4)."""
    data, offsets, offset = path.read_bytes(), [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 12 + int.from_bytes(data[offset:offset + 8], "little") + 4
    return offsets


@pytest.mark.slow  # a training process that runs until the cut records are reached: about 20 s
def test_a_stream_that_ends_early_mid_run_stops_xlnet_train_with_status_3_naming_the_shard_and_stream(
        small_data_dir, tmp_path):
    data, model_dir = tmp_path / "data", tmp_path / "model"
    shutil.copytree(small_data_dir, data)
    settings = SMALL_DATA_TRAINING + SETTINGS
    process = start(["-m", "xlnet_cli", "train", "--data", str(data), "--model-dir", str(model_dir), "--preset",
                     "tiny", *[arg for item in settings for arg in ("--set", item)]])
    with stopped(process):
        # the first step is logged once the start-up check has passed
        wait_for(lambda: (model_dir / ModelDirectory.STEP_LOG).exists(), process, what="the first step")
        shard = data / SHARD
        with open(shard, "r+b") as handle:  # in place, as a rewrite of the file would: whole records 0-217
            handle.truncate(record_offsets(shard)[218])
        [output] = output_of(process)
    assert process.returncode == EXIT_DATA, output[-3000:]
    assert "Traceback" not in output
    # the reader's missing-record report (an InvalidArgumentError), not a damaged record's DataLossError
    assert "the training input could not be read after step " in output and " (InvalidArgumentError: " in output
    [line] = [line for line in output.splitlines() if line.startswith("xlnet train: error: ")]
    assert line.startswith("xlnet train: error: the training input could not be read after step ")
    assert (f"DAMAGED {shard}: " in line and "stream 6 ends early: the manifest lists 45 records of it from "
            "record 183" in line)
    assert f"`xlnet inspect {data} --verify`" in line and "Training stopped; the checkpoints so far are kept" in line
    # the steps it ran are logged; none was trained on a stream that moved on early
    stopped_after = int(line.split("after step ")[1].split(":")[0])
    assert [row["step"] for row in ModelDirectory(str(model_dir)).step_rows()] == list(range(1, stopped_after + 1))
