"""What a run tells its operator (trainer/runtime/controller.py with throughput.py and goodput.py):
model FLOPs/s and MFU in every step-log row, in TensorBoard and on the progress line; goodput.json
and the breakdown printed at the end; `xlnet goodput MODEL_DIR` (trainer/commands/goodput.py).
A kill and a resume: test_goodput_across_a_kill.py."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

import xlnet_cli
from trainer.configs.training import TrainConfig
from trainer.models.config import ModelConfig
from trainer.planning.plan import Workload
from trainer.runtime.goodput import CATEGORIES
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import SMALL_DATA_TRAINING

pytestmark = pytest.mark.slow  # one 6-step run (about 12 s); the default suite checks the fields exist in
# tests/trainer/tasks/test_pretraining.py's run

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "checkpoint_every=2",
         "keep_checkpoints=2", "eval_every=4", "train_steps=6"]


@pytest.fixture(scope="module")
def run(small_data_dir, tmp_path_factory) -> tuple[Path, str]:
    """A 6-step `xlnet train` run (loops of 2 steps, a checkpoint after each, an evaluation at step 4):
    its model directory and standard output."""
    model_dir = tmp_path_factory.mktemp("monitored") / "model"
    args = ["train", "--data", small_data_dir, "--model-dir", str(model_dir), "--preset", "tiny"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert xlnet_cli.main(args + [a for item in SMALL + SMALL_DATA_TRAINING for a in ("--set", item)]) == 0
    return model_dir, out.getvalue()


def step_flops(model_dir: Path) -> float:
    """The one FLOPs rule's model FLOPs of one step of the run's configuration."""
    model = ModelConfig.from_dict(json.loads((model_dir / ModelDirectory.MODEL_CONFIG).read_text()))
    train = TrainConfig.from_dict(json.loads((model_dir / ModelDirectory.TRAIN_CONFIG).read_text()))
    return Workload(model, train, replicas=1).step_flops()[0]


def test_every_step_log_row_has_model_flops_per_second_mfu_and_the_peak_it_was_measured_against(run):
    rows = ModelDirectory(run[0]).step_rows()
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
    for row in rows:
        assert row["mfu_peak_source"] == "measured_matmul_peak (float32, this CPU)"
        assert 0 < row["mfu"] < 1 and row["model_flops_per_sec"] > 0
    peaks = {round(row["model_flops_per_sec"] / row["mfu"]) for row in rows}
    assert len(peaks) == 1  # one peak for the run, measured at its start
    assert rows[2]["model_flops_per_sec"] == rows[3]["model_flops_per_sec"]  # a loop's figure, in each of its rows


def test_tensorboard_model_flops_are_the_flops_rules_per_token_figure_times_tokens_per_second(run):
    model_dir = ModelDirectory(run[0])
    flops, tokens = model_dir.scalars("train", "model_flops_per_sec"), model_dir.scalars("train", "tokens_per_sec")
    assert sorted(flops) == sorted(tokens) == [1, 2, 4, 6] and sorted(model_dir.scalars("train", "mfu")) == [1, 2, 4, 6]
    tokens_per_step = 4 * 64  # train_batch_size x seq_len
    for step in flops:
        assert flops[step] / tokens[step] == pytest.approx(step_flops(run[0]) / tokens_per_step, rel=1e-5)


def test_the_progress_line_shows_mfu(run):
    progress = [line for line in run[1].splitlines() if line.startswith("step 4/6 loss")]
    assert len(progress) == 1 and " MFU " in progress[0] and progress[0].split(" MFU ")[1].split()[0].endswith("%")


def test_goodput_json_holds_the_runs_seconds_by_category_adding_up_to_its_total(run):
    record = json.loads((run[0] / ModelDirectory.GOODPUT).read_text())
    seconds = record["seconds"]
    assert record["runs"] == 1 and set(seconds) == set(CATEGORIES)
    assert record["total_seconds"] == pytest.approx(sum(seconds.values()), abs=1e-6)
    assert record["goodput"] == pytest.approx(seconds["productive"] / record["total_seconds"])
    for name in ("productive", "startup", "compile", "evaluation", "checkpoint", "other"):
        assert seconds[name] > 0, name
    assert seconds["lost"] == 0 and record["productive_steps"] == 5  # step 1 compiled
    assert record["unsaved"]["checkpoint_step"] == record["unsaved"]["last_step"] == 6


def test_the_run_ends_by_printing_the_breakdown(run):
    lines = run[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("goodput of "))
    assert lines[first].endswith("over 1 run")
    assert sorted(line.split()[0] for line in lines[first + 1:first + 1 + len(CATEGORIES)]) == sorted(CATEGORIES)


def test_xlnet_goodput_prints_the_breakdown_and_the_record(run, capsys):
    assert xlnet_cli.main(["goodput", str(run[0])]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"goodput of {run[0]}: ") and "productive" in text and "startup" in text
    assert xlnet_cli.main(["goodput", str(run[0]), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((run[0] / ModelDirectory.GOODPUT).read_text())


def test_xlnet_goodput_of_a_directory_without_a_record_is_a_usage_error_naming_it(tmp_path, capsys):
    assert xlnet_cli.main(["goodput", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"MODEL_DIR {tmp_path} has no goodput.json" in err and "Traceback" not in err


def test_a_resume_sets_a_damaged_goodput_json_aside_and_trains_on(run, small_data_dir, tmp_path, capsys):
    import shutil

    model_dir = Path(shutil.copytree(run[0], tmp_path / "model"))
    record = json.loads((model_dir / ModelDirectory.GOODPUT).read_text())
    (model_dir / ModelDirectory.GOODPUT).write_text(json.dumps(dict(record, runs="many")))
    args = ["train", "--data", small_data_dir, "--model-dir", str(model_dir), "--preset", "tiny"]
    settings = SMALL[:-1] + SMALL_DATA_TRAINING + ["train_steps=8"]
    assert xlnet_cli.main(args + [a for item in settings for a in ("--set", item)]) == 0  # resumed from ckpt-6
    err = capsys.readouterr().err
    assert (f"warning: {model_dir / ModelDirectory.GOODPUT} is not a goodput record (runs is \"many\", not a count of "
            f"runs (an integer >= 0)); set aside as {model_dir / 'damaged' / ModelDirectory.GOODPUT}") in err
    assert "Traceback" not in err
    assert json.loads((model_dir / "damaged" / ModelDirectory.GOODPUT).read_text())["runs"] == "many"
    assert json.loads((model_dir / ModelDirectory.GOODPUT).read_text())["runs"] == 1  # a new record: this run
