"""`xlnet train` on a mixture of data directories: accounting, per-source evaluation, exact resume,
the saved mixture and the errors of the command line (the reader itself: tests/tfrecords/test_mixture.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tensorflow as tf

import xlnet_cli
from support.distribution import assert_two_replicas_step_as_one_device
from support.processes import signal_and_wait, start, wait_for
from tfrecords.manifest import load_manifest
from tfrecords.mixture import MixtureSource
from trainer.configs.overrides import resolve_configs
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import pretraining_controller

# One xdist worker runs every test of the mixture directories (make test: --dist loadgroup), so that
# they are preprocessed once.
pytestmark = pytest.mark.xdist_group("mixture")
# A constant learning rate after warm-up (end_learning_rate = learning_rate), so that a run stopped at
# train_steps=4 and resumed to 6 follows the schedule of a straight run to 6.
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "learning_rate=0.001",
         "end_learning_rate=0.001", "vocab_size=8000"]


def command(dirs: dict[str, str], model_dir, names=("wiki-a", "bible"), weights="1,3", *extra: str) -> list[str]:
    args = ["train", "--model-dir", str(model_dir), "--preset", "tiny", "--mixture-weights", weights]
    for name in names:
        args += ["--data", dirs[name]]
    for item in SMALL + list(extra):
        args += ["--set", item]
    return args


def controller(sources: list[MixtureSource], model_dir, eval_sources=(), init_checkpoint=None, **changes):
    model, train, _ = resolve_configs("tiny", None, SMALL + [f"{k}={v}" for k, v in changes.items()])
    if len(sources) > 1:
        train = train.replace(mixture=tuple((source.name, source.weight) for source in sources))
    return pretraining_controller(model, train, manifest=sources[0].manifest, model_dir=str(model_dir),
                                  strategy=tf.distribute.get_strategy(), log=lambda line: None,
                                  mixture=sources if len(sources) > 1 else (), eval_sources=eval_sources,
                                  init_checkpoint=init_checkpoint)


def source(directory: str, weight: float = 1.0) -> MixtureSource:
    return MixtureSource(directory, load_manifest(directory), weight)


@pytest.fixture(scope="module")
def mixed_run(mixture_dirs, tmp_path_factory) -> Path:
    """6 steps on wiki-a (0.25) and bible (0.75), checkpoints every 2, evaluated at the end, with
    wiki-b only evaluated on."""
    model_dir = tmp_path_factory.mktemp("mixed") / "model"
    args = command(mixture_dirs, model_dir, ("wiki-a", "bible"), "1,3", "train_steps=6", "checkpoint_every=2",
                   "eval_every=6") + ["--eval-data", mixture_dirs["wiki-b"]]
    assert xlnet_cli.main(args) == 0
    return model_dir


def test_the_mixture_is_saved_in_the_training_configuration(mixture_dirs, mixed_run):
    saved = json.loads((mixed_run / ModelDirectory.TRAIN_CONFIG).read_text())["mixture"]
    assert saved == [[mixture_dirs["wiki-a"], 0.25], [mixture_dirs["bible"], 0.75]]


def test_every_step_row_counts_records_and_epochs_by_directory_as_given(mixture_dirs, mixed_run):
    rows = ModelDirectory(str(mixed_run)).step_rows()
    assert [row["step"] for row in rows] == list(range(1, 7))
    for row in rows:
        assert set(row["records_by_source"]) == {mixture_dirs["wiki-a"], mixture_dirs["bible"]}
        assert sum(row["records_by_source"].values()) == 4 * row["step"]
        assert set(row["epoch_by_source"].values()) == {0}
    shares = ModelDirectory(str(mixed_run)).scalars("train", "mixture_share/bible")
    last = rows[-1]["records_by_source"]
    assert shares[6] == pytest.approx(last[mixture_dirs["bible"]] / 24)


def test_evaluation_reports_each_directory_and_the_weighted_mixture(mixed_run):
    directory = ModelDirectory(str(mixed_run))
    tags = directory.scalar_tags("eval")
    assert {"loss", "accuracy", "loss/wiki-a", "loss/bible", "loss/wiki-b", "accuracy/wiki-b"} <= tags
    loss = {tag: directory.scalars("eval", tag)[6] for tag in ("loss", "loss/wiki-a", "loss/bible")}
    assert loss["loss"] == pytest.approx(0.25 * loss["loss/wiki-a"] + 0.75 * loss["loss/bible"], rel=1e-6)


def test_each_directory_is_evaluated_as_a_run_on_it_alone_would(mixture_dirs, mixed_run, tmp_path):
    mixed = controller([source(mixture_dirs["wiki-a"], 0.25), source(mixture_dirs["bible"], 0.75)], mixed_run,
                       eval_sources=[source(mixture_dirs["wiki-b"])], train_steps=6).evaluate()
    for name in ("bible", "wiki-b"):
        alone = controller([source(mixture_dirs[name])], tmp_path / name, init_checkpoint=str(mixed_run)).evaluate()
        assert mixed[f"loss/{name}"] == pytest.approx(alone["loss"], rel=1e-6)
        assert mixed[f"accuracy/{name}"] == pytest.approx(alone["accuracy"], rel=1e-6)
    # --eval-data beside one --data: that directory's figures unlabelled, the evaluated one's labelled
    one = controller([source(mixture_dirs["bible"])], tmp_path / "one", eval_sources=[source(mixture_dirs["wiki-b"])],
                     init_checkpoint=str(mixed_run)).evaluate()
    assert one["loss"] == pytest.approx(mixed["loss/bible"], rel=1e-6)
    assert one["loss/wiki-b"] == pytest.approx(mixed["loss/wiki-b"], rel=1e-6)
    assert "loss/bible" not in one


@pytest.mark.slow  # 33 s; the reader's restart at a step is tests/tfrecords/test_mixture.py's, the rest is the loop's
def test_a_resumed_mixture_run_continues_with_the_same_losses(mixture_dirs, mixed_run, tmp_path):
    model_dir = tmp_path / "resumed"
    assert xlnet_cli.main(command(mixture_dirs, model_dir, ("wiki-a", "bible"), "1,3", "train_steps=4",
                                  "checkpoint_every=2", "eval_every=0")) == 0
    assert xlnet_cli.main(command(mixture_dirs, model_dir, ("wiki-a", "bible"), "1,3", "train_steps=6",
                                  "checkpoint_every=2", "eval_every=0")) == 0
    straight = ModelDirectory(str(mixed_run)).step_rows()
    resumed = ModelDirectory(str(model_dir)).step_rows()
    assert [row["loss"] for row in resumed] == pytest.approx([row["loss"] for row in straight], rel=1e-5)
    assert [row["records_by_source"] for row in resumed] == [row["records_by_source"] for row in straight]


@pytest.mark.slow  # 40 s: a subprocess killed mid-run; the in-process resume above covers the reader's restart
def test_sigkill_then_rerun_of_a_mixture_gives_the_same_per_step_losses(mixture_dirs, mixed_run, tmp_path):
    model_dir = tmp_path / "killed"
    args = command(mixture_dirs, model_dir, ("wiki-a", "bible"), "1,3", "train_steps=6", "checkpoint_every=2",
                   "eval_every=0", "steps_per_loop=1")
    process = start(["xlnet_cli.py", *args])
    step_log = model_dir / ModelDirectory.STEP_LOG
    wait_for(lambda: step_log.exists() and len(step_log.read_text().splitlines()) >= 3, process, interval=0.1,
             what="step 3")
    signal_and_wait(process)  # SIGKILL
    assert xlnet_cli.main(args) == 0
    straight = {row["step"]: row["loss"] for row in ModelDirectory(str(mixed_run)).step_rows()}
    assert ModelDirectory(str(model_dir)).step_losses() == pytest.approx(straight, rel=1e-5)


def test_resuming_with_another_mixture_is_refused_naming_both(mixture_dirs, mixed_run, tmp_path, capsys):
    model_dir = tmp_path / "copy"
    shutil.copytree(mixed_run, model_dir)
    assert xlnet_cli.main(command(mixture_dirs, model_dir, ("wiki-a", "bible"), "1,1", "train_steps=8")) == 2
    error = capsys.readouterr().err
    assert f"trained on {mixture_dirs['wiki-a']} (0.25), {mixture_dirs['bible']} (0.75)" in error
    assert f"this command gives {mixture_dirs['wiki-a']} (0.5), {mixture_dirs['bible']} (0.5)" in error


@pytest.mark.parametrize("weights, names, problem", [
    ("1,0", ("wiki-a", "bible"), "every weight must be a positive number, got 0"),
    ("1,x", ("wiki-a", "bible"), "'x' is not a number"),
    ("1", ("wiki-a", "bible"), "1 weight(s) for 2 --data directories"),
    ("1,1", ("bible", "bible"), "the same data directory is given twice"),
])
def test_bad_mixtures_exit_2_with_the_problem_named(mixture_dirs, tmp_path, capsys, weights, names, problem):
    assert xlnet_cli.main(command(mixture_dirs, tmp_path / "model", names, weights)) == 2
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


def test_a_directory_of_another_shape_is_refused_naming_it_the_field_and_both_values(mixture_dirs, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(mixture_dirs["bible"], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["config"]["reuse_len"] = 32
    (other / "manifest.json").write_text(json.dumps(manifest))
    args = command({**mixture_dirs, "other": str(other)}, tmp_path / "model", ("wiki-a", "other"), "1,1")
    assert xlnet_cli.main(args) == 2
    assert f"{other}: reuse_len is 32, but {mixture_dirs['wiki-a']} has 64" in capsys.readouterr().err


@pytest.mark.slow  # 30 s; one reader's slots are split over replicas as tests/trainer/runtime/test_distribution.py checks
def test_two_mirrored_replicas_read_a_mixture_as_one_device_does(mixture_dirs, tmp_path, mirrored_strategy):
    sources = [source(mixture_dirs["wiki-a"], 0.5), source(mixture_dirs["bible"], 0.5)]
    model, train, _ = resolve_configs("tiny", None, SMALL + ["dropout=0", "dropatt=0"])
    train = train.replace(mixture=tuple((s.name, s.weight) for s in sources))

    def make_trainer(strategy, name):
        return pretraining_controller(model, train, manifest=sources[0].manifest, model_dir=str(tmp_path / name),
                                      strategy=strategy, log=lambda line: None, mixture=sources)

    assert_two_replicas_step_as_one_device(make_trainer, mirrored_strategy)
