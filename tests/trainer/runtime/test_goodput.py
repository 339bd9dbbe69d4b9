"""Goodput (trainer/runtime/goodput.py): each second of a run in one category, the job's record in
goodput.json kept across runs, a killed run's work after its last checkpoint moved to "lost" when
the next run trains it again. The record of a real run: tests/trainer/runtime/test_run_monitoring.py."""
from __future__ import annotations

import json
import os
import time

import pytest

from trainer.runtime.goodput import CATEGORIES, GoodputRecorder, describe, read_goodput
from trainer.runtime.model_dir import ModelDirectory


def recorded(path) -> dict:
    return json.loads((path / ModelDirectory.GOODPUT).read_text())


def run_for(recorder: GoodputRecorder, category: str, seconds: float, steps: int = 0) -> None:
    with recorder.timed(category, steps=steps):
        time.sleep(seconds)


def test_a_runs_seconds_fall_in_one_category_each_and_add_up_to_its_wall_time(tmp_path):
    started = time.time() - 0.2  # the command started 0.2 s ago
    recorder = GoodputRecorder(ModelDirectory(str(tmp_path)), started)
    recorder.begin(0)
    run_for(recorder, "compile", 0.05, steps=1)
    run_for(recorder, "productive", 0.1, steps=3)
    run_for(recorder, "checkpoint", 0.05)
    run_for(recorder, "evaluation", 0.05)
    record = recorder.record()
    ended = time.time()
    assert record == recorded(tmp_path)
    seconds = record["seconds"]
    assert set(seconds) == set(CATEGORIES)
    assert seconds["startup"] >= 0.2 and seconds["compile"] >= 0.05 and seconds["productive"] >= 0.1
    assert seconds["checkpoint"] >= 0.05 and seconds["evaluation"] >= 0.05 and seconds["lost"] == 0
    assert record["total_seconds"] == pytest.approx(sum(seconds.values()), abs=1e-9)
    assert record["total_seconds"] == pytest.approx(ended - started, abs=0.01)
    assert record["goodput"] == pytest.approx(seconds["productive"] / record["total_seconds"])
    assert record["runs"] == 1 and record["productive_steps"] == 3


def test_a_killed_runs_work_after_its_last_checkpoint_is_lost_once_the_next_run_trains_it_again(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    killed = GoodputRecorder(directory, time.time())
    killed.begin(0)
    run_for(killed, "productive", 0.05, steps=4)
    run_for(killed, "checkpoint", 0.01)
    killed.saved(4)
    run_for(killed, "productive", 0.1, steps=2)
    killed.record()  # then SIGKILL: nothing more is written
    before = recorded(tmp_path)
    after_checkpoint = before["unsaved"]["productive_seconds"]
    assert before["unsaved"] == {"checkpoint_step": 4, "last_step": 6, "productive_steps": 2,
                                 "productive_seconds": after_checkpoint}
    resumed = GoodputRecorder(directory, time.time())
    assert resumed.begin(4) == after_checkpoint >= 0.1
    record = recorded(tmp_path)
    assert record["runs"] == 2
    assert record["seconds"]["lost"] == after_checkpoint
    assert record["seconds"]["productive"] == pytest.approx(before["seconds"]["productive"] - after_checkpoint)
    assert record["productive_steps"] == 4
    assert record["total_seconds"] == pytest.approx(sum(record["seconds"].values()), abs=1e-9)


def run_saving_at_4(directory: ModelDirectory, seconds_after: float, steps_after: int) -> dict:
    """A first run: 4 steps (0.04 s), the checkpoint of step 4, then ``steps_after`` steps taking
    ``seconds_after`` and no checkpoint; its record as it stops."""
    run = GoodputRecorder(directory, time.time())
    run.begin(0)
    run_for(run, "productive", 0.04, steps=4)
    run.saved(4)
    if steps_after:
        run_for(run, "productive", seconds_after, steps=steps_after)
    return run.record()


def test_resuming_from_an_older_checkpoint_counts_the_steps_before_the_newer_one_at_the_mean_step_time(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    before = run_saving_at_4(directory, 0.04, steps_after=2)
    per_step = before["seconds"]["productive"] / before["productive_steps"]
    lost = GoodputRecorder(directory, time.time()).begin(2)  # checkpoint 4 was damaged: 2 resumes
    assert lost == pytest.approx(before["unsaved"]["productive_seconds"] + 2 * per_step)
    assert recorded(tmp_path)["productive_steps"] == 2


def test_a_run_that_saved_its_last_step_leaves_nothing_to_lose(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    run_saving_at_4(directory, 0.0, steps_after=0)
    assert GoodputRecorder(directory, time.time()).begin(4) == 0.0
    assert recorded(tmp_path)["seconds"]["lost"] == 0.0


def test_off_the_chief_nothing_is_read_or_written(tmp_path):
    recorder = GoodputRecorder(ModelDirectory(str(tmp_path)), time.time(), enabled=False)
    recorder.begin(0)
    run_for(recorder, "productive", 0.01, steps=1)
    assert recorder.record()["runs"] == 1
    assert os.listdir(tmp_path) == []


def test_the_record_is_replaced_whole(tmp_path):
    recorder = GoodputRecorder(ModelDirectory(str(tmp_path)), time.time())
    recorder.begin(0)
    recorder.record()
    assert os.listdir(tmp_path) == [ModelDirectory.GOODPUT]  # no temporary file left beside it


def test_a_file_that_is_not_a_record_is_named(tmp_path):
    (tmp_path / ModelDirectory.GOODPUT).write_text('{"goodput": 1}')
    with pytest.raises(ValueError, match="goodput.json is not a goodput record"):
        read_goodput(ModelDirectory(str(tmp_path)))


def test_the_breakdown_lists_each_category_with_its_share_largest_first():
    seconds = dict.fromkeys(CATEGORIES, 0.0) | {"productive": 60.0, "startup": 30.0, "lost": 10.0}
    text = describe({"goodput": 0.6, "runs": 2, "total_seconds": 100.0, "seconds": seconds}, "gs://b/m")
    lines = text.splitlines()
    assert lines[0] == "goodput of gs://b/m: 60.0% of 0:01:40 over 2 runs"
    assert [line.split()[0] for line in lines[1:4]] == ["productive", "startup", "lost"]
    assert lines[1].split() == ["productive", "60.0", "s", "60.0%"]
    assert len(lines) == 1 + len(CATEGORIES)


def test_on_gcs_the_record_is_kept_across_runs_and_xlnet_goodput_prints_it(gcs_prefix, capsys):
    import xlnet_cli

    directory = ModelDirectory(gcs_prefix + "model")
    for _ in range(2):
        recorder = GoodputRecorder(directory, time.time())
        recorder.begin(0)
        run_for(recorder, "productive", 0.01, steps=1)
        recorder.record()
    assert read_goodput(directory)["runs"] == 2
    assert xlnet_cli.main(["goodput", directory.path]) == 0
    assert capsys.readouterr().out.startswith(f"goodput of {directory.path}: ")
    assert xlnet_cli.main(["goodput", gcs_prefix + "nothing"]) == 2
    assert f"MODEL_DIR {gcs_prefix}nothing has no goodput.json" in capsys.readouterr().err
