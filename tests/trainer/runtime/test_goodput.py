"""Goodput (trainer/runtime/goodput.py): each second of a run in one category, the job's record in
goodput.json kept across runs, a killed run's work after its last checkpoint moved to "lost" when
the next run trains it again. The record of a real run: tests/trainer/runtime/test_run_monitoring.py."""
from __future__ import annotations

import json
import os
import socket
import sys
import time

import pytest

from support.processes import cli_loads_tensorflow
from trainer.runtime.goodput import (CATEGORIES, GoodputFileError, GoodputRecorder, describe, read_goodput,
                                     unrecorded_seconds)
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.run_lock import RunLock, taken_over_from

from support.bundled_data import REPO
from support.processes import exited_pid, signal_and_wait, start, stopped, wait_for


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
    with pytest.raises(GoodputFileError, match="goodput.json is not a goodput record"):
        read_goodput(str(tmp_path))


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
    assert read_goodput(directory.path)["runs"] == 2
    assert xlnet_cli.main(["goodput", directory.path]) == 0
    assert capsys.readouterr().out.startswith(f"goodput of {directory.path}: ")
    assert xlnet_cli.main(["goodput", gcs_prefix + "nothing"]) == 2
    assert f"MODEL_DIR {gcs_prefix}nothing has no goodput.json" in capsys.readouterr().err


# ------------------------------------------------------------------ a damaged record never stops a run
def write_record(path, **changes) -> None:
    record = GoodputRecorder(ModelDirectory(str(path)), time.time())
    record.begin(0)
    values = json.loads((path / ModelDirectory.GOODPUT).read_text()) | changes
    (path / ModelDirectory.GOODPUT).write_text(json.dumps(values))


@pytest.mark.parametrize("field, value, said", [
    ("runs", "many", 'runs is "many", not a count of runs'),
    ("goodput", None, "goodput is null, not a fraction"),
    ("total_seconds", [1], "total_seconds is [1], not a number of seconds"),
    ("seconds", 3, "seconds is 3, not an object"),
    ("productive_steps", 2.5, "productive_steps is 2.5, not a count of steps"),
    ("unsaved", "x", 'unsaved is "x", not null or an object'),
    ("this_run_seconds", True, "this_run_seconds is true, not a number of seconds"),
    ("written_at", "now", 'written_at is "now", not a time'),
])
def test_each_field_of_another_type_is_named(tmp_path, field, value, said):
    write_record(tmp_path, **{field: value})
    with pytest.raises(GoodputFileError) as raised:
        read_goodput(str(tmp_path))
    assert said in str(raised.value) and str(tmp_path / ModelDirectory.GOODPUT) in str(raised.value)


@pytest.mark.parametrize("changes, said", [
    ({"seconds": {"productive": "x"}}, 'seconds.productive is "x", not a number of seconds'),
    ({"seconds": {"idle": 1.0}}, "seconds.idle is not a category"),
    ({"unsaved": {"checkpoint_step": 0, "last_step": "4", "productive_steps": 0, "productive_seconds": 0.0}},
     'unsaved.last_step is "4", not a step'),
    ({"unsaved": {"checkpoint_step": 0}}, "unsaved.last_step is missing"),
])
def test_the_fields_inside_seconds_and_unsaved_are_checked_too(tmp_path, changes, said):
    write_record(tmp_path, **changes)
    with pytest.raises(GoodputFileError, match=said):
        read_goodput(str(tmp_path))


def test_a_file_that_is_not_json_is_named_with_what_to_do(tmp_path):
    (tmp_path / ModelDirectory.GOODPUT).write_text('{"goodput": 0.5, "ru')
    with pytest.raises(GoodputFileError, match=r"goodput.json is not a goodput record: not JSON: .*remove it, or let "
                                               r"the next `xlnet train` or `xlnet finetune` set it aside"):
        read_goodput(str(tmp_path))


def test_a_deeply_nested_file_is_named_in_one_sentence_not_a_recursion_error(tmp_path):
    (tmp_path / ModelDirectory.GOODPUT).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GoodputFileError, match=r"goodput.json is not a goodput record: not JSON: it nests arrays or "
                                               r"objects deeper than 64 levels"):
        read_goodput(str(tmp_path))


@pytest.mark.parametrize("content", [b'{"goodput": 0.5, "ru', b'{"goodput": 1, "runs": "many", "total_seconds": 1, '
                                     b'"seconds": {}}', b"\xff\xfe not UTF-8"])
def test_a_run_sets_a_damaged_record_aside_with_a_warning_and_starts_a_new_one(tmp_path, capsys, content):
    (tmp_path / ModelDirectory.GOODPUT).write_bytes(content)
    recorder = GoodputRecorder(ModelDirectory(str(tmp_path)), time.time())
    assert recorder.begin(0) == 0.0
    run_for(recorder, "productive", 0.01, steps=1)
    assert recorder.record()["runs"] == 1 and recorded(tmp_path)["runs"] == 1
    assert (tmp_path / "damaged" / ModelDirectory.GOODPUT).read_bytes() == content  # kept as it was
    warning = capsys.readouterr().err.splitlines()
    assert len(warning) == 1 and warning[0].startswith(f"warning: {tmp_path / ModelDirectory.GOODPUT} is not a "
                                                       "goodput record (")
    assert warning[0].endswith(f"set aside as {tmp_path / 'damaged' / ModelDirectory.GOODPUT}, a new record starts "
                               "with this run")


def test_a_record_set_aside_before_is_never_overwritten(tmp_path):
    for _ in range(2):
        (tmp_path / ModelDirectory.GOODPUT).write_text("[]")
        GoodputRecorder(ModelDirectory(str(tmp_path)), time.time()).begin(0)
    assert sorted(os.listdir(tmp_path / "damaged")) == ["goodput.json", "goodput_2.json"]


def test_xlnet_goodput_of_a_damaged_record_says_what_is_wrong_in_one_line_with_exit_3(tmp_path, capsys):
    import xlnet_cli

    write_record(tmp_path, goodput=None)
    assert xlnet_cli.main(["goodput", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"xlnet goodput: error: {tmp_path / ModelDirectory.GOODPUT} is not a goodput record: "
                          "goodput is null, not a fraction (a number). It only monitors the job: remove it")


def test_xlnet_goodput_imports_no_tensorflow(tmp_path):
    write_record(tmp_path)
    assert not cli_loads_tensorflow(["goodput", str(tmp_path)])


# ------------------------------------------------------------------ a killed run's last loop is lost
def test_a_killed_runs_time_after_its_last_record_up_to_its_last_heartbeat_is_lost():
    assert unrecorded_seconds(1000.0, {"started": 900.0, "heartbeat": 1030.0}) == 30.0


def test_a_killed_run_that_started_after_the_last_record_loses_the_time_from_its_start():
    assert unrecorded_seconds(1000.0, {"started": 1200.0, "heartbeat": 1260.0}) == 60.0  # the pause between runs


def test_a_heartbeat_before_the_last_record_loses_nothing_more():
    assert unrecorded_seconds(1000.0, {"started": 900.0, "heartbeat": 990.0}) == 0.0


@pytest.mark.parametrize("written_at, killed_run", [
    (None, {"started": 900.0, "heartbeat": 1030.0}),  # a record from before the field existed
    (1000.0, None),  # the lock was not taken over: no run was killed
    (1000.0, {"started": 900.0}),  # a lock without a heartbeat
    (1000.0, {"started": 900.0, "heartbeat": "x"}),
    (1000.0, {"started": 900.0, "heartbeat": time.time() + 3600}),  # a clock set wrong
])
def test_nothing_more_is_lost_when_a_time_is_unknown(written_at, killed_run):
    assert unrecorded_seconds(written_at, killed_run) == 0.0


def test_the_next_run_taking_over_a_killed_runs_lock_counts_its_unrecorded_time_as_lost(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    killed = GoodputRecorder(directory, time.time())
    killed.begin(0)
    run_for(killed, "productive", 0.01, steps=2)
    last = killed.record()
    last["written_at"] -= 10.0  # written 10 s ago; 7 s into its next loop, a heartbeat; then SIGKILL
    (tmp_path / ModelDirectory.GOODPUT).write_text(json.dumps(last))
    (tmp_path / RunLock.FILE).write_text(json.dumps({
        "host": socket.gethostname(), "pid": exited_pid(), "started": last["written_at"] - 60,
        "heartbeat": last["written_at"] + 7.0, "token": "killed"}))
    with RunLock(directory, log=lambda line: None):  # takes the killed run's lock over, as the next run does
        lost = GoodputRecorder(directory, time.time()).begin(0, taken_over_from(directory))
    assert lost == pytest.approx(7.0 + last["unsaved"]["productive_seconds"])  # + the steps it trains again
    record = recorded(tmp_path)
    assert record["seconds"]["lost"] == pytest.approx(lost)
    assert record["total_seconds"] == pytest.approx(last["total_seconds"] + 7.0, abs=0.5)  # + this run's start


# A run holding its model directory's lock, its heartbeat every 0.1 s, until it is killed.
HOLDS_THE_LOCK = """
import sys, time
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.run_lock import RunLock

RunLock(ModelDirectory(sys.argv[1]), heartbeat_seconds=0.1).acquire()
time.sleep(600)
"""


def last_heartbeat(path) -> float:
    """The heartbeat in the run.heartbeat file; 0 while it is absent or being rewritten."""
    try:
        return float(json.loads((path / RunLock.HEARTBEAT_FILE).read_text())["heartbeat"])
    except (OSError, ValueError, KeyError):
        return 0.0


def test_a_killed_runs_unrecorded_time_is_lost_even_when_its_lock_was_removed_by_hand(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    with stopped(start(["-c", HOLDS_THE_LOCK, str(tmp_path)])) as process:
        wait_for(lambda: last_heartbeat(tmp_path) > 0, process, what="the lock taken")
        killed = GoodputRecorder(directory, time.time())  # the killed run's record, written after its start
        killed.begin(0)
        written_at = killed.record()["written_at"]
        wait_for(lambda: last_heartbeat(tmp_path) > written_at + 0.5, process, what="a heartbeat after the record")
        signal_and_wait(process)  # SIGKILL
    heartbeat = last_heartbeat(tmp_path)
    (tmp_path / RunLock.FILE).unlink()  # what the "in use by another run" message offers once that run is gone
    with RunLock(directory, log=lambda line: None):
        lost = GoodputRecorder(directory, time.time()).begin(0, taken_over_from(directory))
    assert lost == pytest.approx(heartbeat - written_at) and lost > 0.5
    assert not (tmp_path / RunLock.HEARTBEAT_FILE).exists()  # the next run ended as runs end: nothing left


def test_input_waits_move_from_productive_to_input(tmp_path):
    from trainer.runtime.model_dir import ModelDirectory

    recorder = GoodputRecorder(ModelDirectory(str(tmp_path)), started=time.time())
    recorder.begin(0)
    with recorder.timed("productive", steps=2):
        time.sleep(0.2)
    recorder.waited_for_input(0.05)
    seconds = recorder.record()["seconds"]
    assert seconds["input"] == pytest.approx(0.05) and seconds["productive"] >= 0.15 - 1e-3
    recorder.waited_for_input(99.0)  # never more than the productive time there is
    assert recorder.record()["seconds"]["productive"] == 0.0
