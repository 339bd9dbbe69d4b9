"""`xlnet train --backend jax` (trainer/runtime/jax_engine.py under trainer/runtime/training_loop.py): the
model directory the TensorFlow engine writes, written without TensorFlow; exact resume after SIGKILL; a
mixture with --eval-data and accumulation; the flags only the other engine takes refused in one line. Every
run is a process of its own on JAX (the test process runs Keras on TensorFlow)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING
from support.processes import output_of, signal_and_wait, start, wait_for

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
         "eval_batch_size=8", "warmup_steps=2", f"vocab_size={SMALL_DATA['vocab_size']}", "steps_per_loop=2",
         "eval_steps=2"] + SMALL_DATA_TRAINING
STEP_LOG_FIELDS = {"step", "loss", "accuracy", "grad_norm", "peak_memory_bytes", "input_wait_seconds",
                   "model_flops_per_sec", "mfu", "mfu_peak_source"}


def train_args(data: str, model_dir: Path, *settings: str, backend: str = "jax", flags: Sequence[str] = ()
               ) -> list[str]:
    sets = [arg for item in SMALL + list(settings) for arg in ("--set", item)]
    return ["-m", "xlnet_cli", "train", "--backend", backend, "--data", data, "--model-dir", str(model_dir), *flags,
            *sets]


def train(data: str, model_dir: Path, *settings: str, env: dict[str, str | None] | None = None,
          flags: Sequence[str] = ()) -> str:
    process = start(train_args(data, model_dir, *settings, flags=flags), env={"KERAS_BACKEND": "jax", **(env or {})})
    output = output_of(process, timeout=600)[0]
    assert process.returncode == 0, output[-3000:]
    return output


def step_rows(model_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (model_dir / "train_steps.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def jax_run(small_data_dir, tmp_path_factory) -> tuple[Path, str]:
    """A JAX run of 4 steps, a checkpoint every 2, evaluated at step 4, with the machine's cache
    directory under the test's (JAX's variable unset: the engine's default compilation cache)."""
    base = tmp_path_factory.mktemp("jax")
    model_dir = base / "model"
    env = {"XDG_CACHE_HOME": str(base / "cache"), "JAX_COMPILATION_CACHE_DIR": None}
    return model_dir, train(small_data_dir, model_dir, "train_steps=4", "checkpoint_every=2", "eval_every=4", env=env)


def test_a_jax_run_keeps_its_compiled_programs_in_the_machines_cache_directory(jax_run):
    """What a run started again loads instead of compiling (use_compilation_cache)."""
    model_dir, _ = jax_run
    cache = model_dir.parent / "cache" / "xlnet" / "jax-compilation"
    assert cache.is_dir() and any(cache.iterdir())


def test_a_jax_run_logs_every_step_with_the_step_log_fields(jax_run):
    model_dir, _ = jax_run
    rows = step_rows(model_dir)
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert all(set(row) == STEP_LOG_FIELDS for row in rows)
    assert all(row["loss"] > 0 and row["grad_norm"] > 0 and row["input_wait_seconds"] >= 0 for row in rows)
    assert all(0 < row["mfu"] <= 1 and row["mfu_peak_source"] == "measured_matmul_peak (float32, this CPU)"
               for row in rows)


def test_a_jax_run_keeps_orbax_checkpoints_and_the_model_files(jax_run):
    model_dir, _ = jax_run
    assert sorted(path.name for path in (model_dir / "checkpoints").iterdir()) == ["2", "4"]
    for name in ("model_config.json", "train_config.json", "special_ids.json", "spiece.model", "goodput.json"):
        assert (model_dir / name).is_file(), name
    goodput = json.loads((model_dir / "goodput.json").read_text())
    assert goodput["runs"] == 1 and goodput["productive_steps"] == 3  # step 1 of a run is its compilation
    assert 0 <= goodput["seconds"]["input"] < goodput["seconds"]["productive"] + goodput["seconds"]["input"]


def test_a_jax_run_writes_tensorboard_scalars_of_training_and_evaluation(jax_run):
    from trainer.runtime.model_dir import ModelDirectory

    model_dir = ModelDirectory(str(jax_run[0]))
    assert sorted(model_dir.scalars("train", "loss")) == [1, 2, 4]  # per loop: step 1 alone, then loops of 2
    assert {"loss", "plm_accuracy", "learning_rate", "grad_norm", "tokens_per_sec",
            "input_wait_seconds"} <= model_dir.scalar_tags("train")
    assert set(model_dir.scalars("eval", "perplexity")) == {4}


def test_a_jax_run_prints_the_progress_lines_and_the_summary(jax_run):
    _, output = jax_run
    assert "step 1/4 loss " in output and "(the first step of this run:" in output
    assert "step 4 eval: loss " in output and "goodput of " in output
    summary = json.loads(output.strip().splitlines()[-1])
    assert summary["step"] == 4 and summary["stopped"] == "completed" and set(summary["eval"]) == {
        "loss", "accuracy", "perplexity"}


@pytest.mark.slow
def test_a_killed_jax_run_resumes_with_the_losses_of_a_run_never_stopped(small_data_dir, tmp_path):
    # 12 steps: the kill lands at step 6 or, on a loaded machine, a few steps later, never after the last.
    settings = ("train_steps=12", "checkpoint_every=4", "eval_every=0")
    train(small_data_dir, tmp_path / "straight", *settings)
    killed = tmp_path / "killed"
    process = start(train_args(small_data_dir, killed, *settings), env={"KERAS_BACKEND": "jax"})
    log = killed / "train_steps.jsonl"
    wait_for(lambda: (killed / "checkpoints" / "4").is_dir() and log.exists()
             and len(log.read_text().splitlines()) >= 6, process, timeout=300, interval=0.05, what="step 6")
    signal_and_wait(process)  # SIGKILL, after step 6: the steps logged after the last checkpoint are trained again
    logged = len(log.read_text().splitlines())
    saved = max(int(path.name) for path in (killed / "checkpoints").iterdir() if path.name.isdigit())
    assert saved < 12 and logged >= 6
    output = train(small_data_dir, killed, *settings)
    assert "resumed from " in output and f" at step {saved}" in output
    if logged > saved:
        assert f"at step {saved}; the {logged - saved} steps logged after it will be logged again" in output
    straight, resumed = step_rows(tmp_path / "straight"), step_rows(killed)
    assert [row["step"] for row in resumed] == list(range(1, 13))
    for a, b in zip(straight, resumed):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6, abs=1e-6), a["step"]
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-6, abs=1e-6), a["step"]


def copy_of(data: str, directory: Path, valid_is_train: bool = False) -> str:
    """A copy of the data directory ``data``; ``valid_is_train``: its valid split made of its train records
    (other records to evaluate on, for a manifest edit rather than another preprocessing)."""
    shutil.copytree(data, directory)
    if valid_is_train:
        manifest = json.loads((directory / "manifest.json").read_text())
        manifest["splits"]["valid"] = manifest["splits"]["train"]
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return str(directory)


@pytest.fixture(scope="module")
def mixture(small_data_dir, tmp_path_factory) -> dict[str, str]:
    """Two directories to mix (first, second: the same train records, other valid ones) and one to
    evaluate on only (held-out: a copy of first)."""
    base = tmp_path_factory.mktemp("mixture")
    return {"first": copy_of(small_data_dir, base / "first"),
            "second": copy_of(small_data_dir, base / "second", valid_is_train=True),
            "held-out": copy_of(small_data_dir, base / "held-out")}


@pytest.fixture(scope="module")
def mixture_run(mixture, tmp_path_factory) -> tuple[Path, str]:
    """A JAX run of 4 steps of 2 micro-steps on first and second weighted 1:3, evaluated at step 4 with
    held-out (--eval-data)."""
    model_dir = tmp_path_factory.mktemp("jax_mixture") / "model"
    flags = ["--data", mixture["second"], "--mixture-weights", "1,3", "--eval-data", mixture["held-out"]]
    return model_dir, train(mixture["first"], model_dir, "train_steps=4", "checkpoint_every=4", "eval_every=4",
                            "accumulation_steps=2", flags=flags)


@pytest.mark.slow  # a JAX run of 4 accumulated steps and 3 evaluations (about 40 s), shared with the test below
def test_a_jax_mixture_run_logs_each_directorys_records_and_epochs_as_the_schedule_gives_them(mixture, mixture_run):
    from tfrecords.manifest import load_manifest
    from tfrecords.mixture_schedule import MixtureLayout, MixtureSource, by_name, records_read
    from trainer.runtime.model_dir import ModelDirectory

    model_dir, _ = mixture_run
    seed = json.loads((model_dir / "train_config.json").read_text())["seed"]
    sources = [MixtureSource(mixture[name], load_manifest(mixture[name]), weight)
               for name, weight in (("first", 0.25), ("second", 0.75))]
    schedule = MixtureLayout(sources, 8, 64, True, seed=seed, accumulation_steps=2).schedule()
    rows = step_rows(model_dir)
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    for row in rows:
        records, epochs = records_read(schedule, row["step"], 2, True)
        assert row["records_by_source"] == by_name(sources, records)
        assert row["epoch_by_source"] == by_name(sources, epochs)
        assert sum(row["records_by_source"].values()) == 8 * 2 * row["step"]  # 2 micro-steps of 8 rows a step
    last = rows[-1]["records_by_source"]
    shares = ModelDirectory(str(model_dir)).scalars("train", "mixture_share/second")
    assert shares[4] == pytest.approx(last[mixture["second"]] / (8 * 2 * 4))


@pytest.mark.slow  # the run above
def test_a_jax_mixture_run_evaluates_each_directory_and_mixes_the_training_ones_by_weight(mixture_run):
    from trainer.runtime.model_dir import ModelDirectory

    model_dir, output = mixture_run
    directory = ModelDirectory(str(model_dir))
    figures = {tag: directory.scalars("eval", tag)[4] for tag in directory.scalar_tags("eval")}
    assert {f"{name}/{label}" for name in ("loss", "accuracy", "perplexity")
            for label in ("first", "second", "held-out")} | {"loss", "accuracy", "perplexity"} <= set(figures)
    for name in ("loss", "accuracy"):
        assert figures[name] == pytest.approx(0.25 * figures[f"{name}/first"] + 0.75 * figures[f"{name}/second"],
                                              rel=1e-6)
        assert figures[f"{name}/held-out"] == pytest.approx(figures[f"{name}/first"], rel=1e-6)  # the same records
    assert figures["loss/second"] != pytest.approx(figures["loss/first"], rel=1e-3)  # other records
    assert json.loads(output.strip().splitlines()[-1])["eval"]["loss/held-out"] == pytest.approx(
        figures["loss/held-out"], rel=1e-6)


def test_a_mixture_batch_its_directories_streams_cannot_feed_is_refused_at_start_up(mixture, tmp_path):
    """The streams of both directories count (8 forward streams): 12 forward rows are too many."""
    result = refused("--backend", "jax", "--data", mixture["first"], "--data", mixture["second"],
                     "--mixture-weights", "1,1", "--model-dir", str(tmp_path / "m"),
                     *[arg for item in SMALL + ["train_batch_size=24"] for arg in ("--set", item)])
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().startswith(
        f"xlnet train: error: the mixture of --data {mixture['first']}, {mixture['second']} (train splits) has 8 "
        "non-empty forward text stream(s)")
    assert not (tmp_path / "m").exists()


def refused(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlnet_cli", "train", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=Path(__file__).resolve().parents[3])


@pytest.mark.parametrize("flags, words", [
    (["--strategy", "mirrored"], "--strategy and --tpu are the TensorFlow engine's"),
    (["--tpu", "local"], "--strategy and --tpu are the TensorFlow engine's"),
])
def test_flags_of_the_tensorflow_engine_are_refused_under_jax_in_one_line(small_data_dir, tmp_path, flags, words):
    result = refused("--backend", "jax", "--data", small_data_dir, "--model-dir", str(tmp_path / "m"), *flags)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().startswith("xlnet train: error: ") and words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_backend_is_refused_naming_the_two(small_data_dir, tmp_path):
    import os

    result = refused("--data", small_data_dir, "--model-dir", str(tmp_path / "m"),
                     env={**os.environ, "KERAS_BACKEND": "torch"})
    assert result.returncode == 2
    assert result.stderr.strip() == ("xlnet train: error: KERAS_BACKEND=torch: `xlnet train` runs on tensorflow or "
                                     "jax (--backend)")
    result = refused("--backend", "torch", "--data", small_data_dir, "--model-dir", str(tmp_path / "m"))
    assert result.returncode == 2 and "invalid choice: 'torch' (choose from 'tensorflow', 'jax')" in result.stderr


def test_mixed_float16_is_refused_under_jax_naming_the_way_that_does(small_data_dir, tmp_path):
    result = refused("--backend", "jax", "--data", small_data_dir, "--model-dir", str(tmp_path / "m"),
                     *[arg for item in SMALL + ["precision=mixed_float16"] for arg in ("--set", item)])
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip() == ("xlnet train: error: precision mixed_float16 needs dynamic loss scaling, which "
                                     "--backend jax does not do; use mixed_bfloat16 (or float32), or --backend "
                                     "tensorflow")
    assert not (tmp_path / "m").exists()  # refused before the model directory is written


def test_a_model_directory_of_the_tensorflow_engine_is_not_resumed_on_jax(small_data_dir, tmp_path):
    checkpoints = tmp_path / "m" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "ckpt-2.index").write_bytes(b"written by the TensorFlow engine")
    result = refused("--backend", "jax", "--data", small_data_dir, "--model-dir", str(tmp_path / "m"),
                     *[arg for item in SMALL for arg in ("--set", item)])
    assert result.returncode == 3, result.stderr[-2000:]
    assert "holds the TensorFlow engine's checkpoints" in result.stderr and "--backend tensorflow" in result.stderr
    assert sorted(path.name for path in checkpoints.iterdir()) == ["ckpt-2.index"]


@pytest.fixture(scope="module")
def huggingface_dir(tmp_path_factory) -> Path:
    """A Hugging Face directory of the legacy pretrained fixture (its export, spiece.model beside it)."""
    from support.bundled_data import REPO

    output = tmp_path_factory.mktemp("hf") / "xlnet"
    process = start(["-m", "xlnet_cli", "export", "--model-dir", str(REPO / "tests" / "fixtures" / "legacy" /
                                                                       "pretrained"),
                     "--format", "huggingface", "--output", str(output)])
    assert process.wait(timeout=600) == 0, output_of(process)[0][-3000:]
    return output


@pytest.mark.slow
def test_both_engines_train_the_same_from_the_same_hugging_face_weights(small_data_dir, huggingface_dir, tmp_path):
    """From one Hugging Face directory, dropout off: the two engines' first 20 losses and gradient norms agree
    to 1e-4 (TensorFlow's network and reader, JAX's network and the NumPy reader, one optimizer)."""
    settings = ["train_batch_size=8", "warmup_steps=2", "train_steps=20", "checkpoint_every=20", "eval_every=0",
                "steps_per_loop=5", "dropout=0", "dropatt=0", *SMALL_DATA_TRAINING]
    rows = {}
    for backend in ("tensorflow", "jax"):
        model_dir = tmp_path / backend
        args = ["-m", "xlnet_cli", "train", "--backend", backend, "--data", small_data_dir, "--model-dir",
                str(model_dir), "--init-checkpoint", str(huggingface_dir),
                *[arg for item in settings for arg in ("--set", item)]]
        process = start(args, env={"KERAS_BACKEND": backend})
        output = output_of(process, timeout=900)[0]
        assert process.returncode == 0, output[-3000:]
        assert f"initialised the model from {huggingface_dir} (Hugging Face weights)" in output
        rows[backend] = step_rows(model_dir)
    assert set(rows["tensorflow"][0]) == set(rows["jax"][0]) == STEP_LOG_FIELDS  # one step log, two engines
    for a, b in zip(rows["tensorflow"], rows["jax"], strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), a["step"]
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4), a["step"]


@pytest.mark.slow
def test_a_model_directory_the_jax_engine_trained_exports_its_weights_to_hugging_face(jax_run, tmp_path):
    from safetensors.numpy import load_file

    from trainer.runtime.orbax_checkpoints import read_network_weights

    model_dir, _ = jax_run
    output = tmp_path / "hf"
    process = start(["-m", "xlnet_cli", "export", "--model-dir", str(model_dir), "--format", "huggingface",
                     "--output", str(output)])
    text = output_of(process, timeout=600)[0]
    assert process.returncode == 0, text[-3000:]
    tensors = load_file(str(output / "model.safetensors"))
    weights = read_network_weights(str(model_dir / "checkpoints"), 4)
    embedding = next(w for w in weights if w.shape == (SMALL_DATA["vocab_size"], 64))
    assert (tensors["transformer.word_embedding.weight"] == embedding).all()


@pytest.fixture(scope="module")
def tensorflow_from_jax(jax_run, small_data_dir, tmp_path_factory) -> tuple[Path, str]:
    """A TensorFlow run of 1 step started from jax_run's model directory. Its first update is of learning
    rate 0 (the warm-up's first step), so its checkpoint holds jax_run's last weights exactly."""
    model_dir, _ = jax_run
    tf_dir = tmp_path_factory.mktemp("tf_from_jax") / "tf"
    args = ["-m", "xlnet_cli", "train", "--backend", "tensorflow", "--data", small_data_dir, "--model-dir",
            str(tf_dir), "--init-checkpoint", str(model_dir),
            *[arg for item in SMALL + ["train_steps=1", "eval_every=0"] for arg in ("--set", item)]]
    process = start(args, env={"KERAS_BACKEND": "tensorflow"})
    text = output_of(process, timeout=600)[0]
    assert process.returncode == 0, text[-3000:]
    return tf_dir, text


@pytest.mark.slow
def test_the_tensorflow_engine_starts_from_a_model_directory_the_jax_engine_trained(jax_run, tensorflow_from_jax):
    model_dir, _ = jax_run
    assert f"initialised the model from {model_dir / 'checkpoints' / '4'}" in tensorflow_from_jax[1]


def first_step_weights(init: Path, data: str, tmp_path: Path) -> tuple[list, str]:
    """The network weights of step 1 (an update of learning rate 0) of a JAX run started from ``init``."""
    from trainer.runtime.orbax_checkpoints import read_network_weights

    model_dir = tmp_path / "jax"
    output = train(data, model_dir, "train_steps=1", "eval_every=0", flags=["--init-checkpoint", str(init)])
    return read_network_weights(str(model_dir / "checkpoints"), 1), output


@pytest.mark.slow
def test_the_jax_engine_starts_from_a_model_directory_the_jax_engine_trained(jax_run, small_data_dir, tmp_path):
    from trainer.runtime.orbax_checkpoints import read_network_weights

    model_dir, _ = jax_run
    weights, output = first_step_weights(model_dir, small_data_dir, tmp_path)
    assert f"initialised the model from {model_dir / 'checkpoints' / '4'}" in output
    for got, want in zip(weights, read_network_weights(str(model_dir / "checkpoints"), 4), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_the_jax_engine_starts_from_a_model_directory_the_tensorflow_engine_trained(jax_run, tensorflow_from_jax,
                                                                                  small_data_dir, tmp_path):
    """Through a Hugging Face export under TensorFlow in a child process: jax_run's weights come back
    exactly, after a round trip JAX -> TensorFlow -> JAX."""
    from trainer.runtime.orbax_checkpoints import read_network_weights

    (model_dir, _), (tf_dir, _) = jax_run, tensorflow_from_jax
    weights, output = first_step_weights(tf_dir, small_data_dir, tmp_path)
    assert f"initialised the model from {tf_dir / 'checkpoints' / 'ckpt-1'} (the TensorFlow engine's" in output
    for got, want in zip(weights, read_network_weights(str(model_dir / "checkpoints"), 4), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_tensorflow_model_directory_without_a_checkpoint_is_refused_under_jax(small_data_dir, tmp_path):
    init = tmp_path / "init"
    (init / "checkpoints").mkdir(parents=True)
    (init / "model_config.json").write_text("{}")
    result = refused("--backend", "jax", "--data", small_data_dir, "--model-dir", str(tmp_path / "m"),
                     "--init-checkpoint", str(init), *[arg for item in SMALL for arg in ("--set", item)])
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"--init-checkpoint {init} holds no checkpoint under checkpoints/ (train first)" in result.stderr


@pytest.mark.slow
def test_a_damaged_shard_stops_a_jax_run_naming_it_and_keeping_the_checkpoints(small_data_dir, tmp_path):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(small_data_dir, data)
    shard = sorted(data.glob("train-*.tfrecord*"))[0]
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # one flipped byte inside a record
    shard.write_bytes(bytes(damaged))
    process = start(train_args(str(data), tmp_path / "m", "train_steps=200", "checkpoint_every=1", "eval_every=0"),
                    env={"KERAS_BACKEND": "jax"})
    output = output_of(process, timeout=600)[0]
    assert process.returncode == 3, output[-3000:]
    assert "xlnet train: error: the training input could not be read after step" in output
    assert shard.name in output and "corrupted record" in output
    assert "Training stopped; the checkpoints so far are kept" in output


@pytest.mark.slow
def test_sigterm_saves_a_jax_run_at_the_next_loop_boundary_and_exits_0(jax_run, small_data_dir, tmp_path):
    """Run in mixed_bfloat16 with full remat, which the same run shows trains as the float32 one."""
    import signal

    model_dir = tmp_path / "m"
    process = start(train_args(small_data_dir, model_dir, "train_steps=100000", "checkpoint_every=100000",
                               "eval_every=0", "steps_per_loop=1", "precision=mixed_bfloat16", "remat=full"),
                    env={"KERAS_BACKEND": "jax"})
    log = model_dir / "train_steps.jsonl"
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2, process, timeout=300, interval=0.05,
             what="step 2")
    output = signal_and_wait(process, signal.SIGTERM)
    assert process.returncode == 0, output[-3000:]
    saved = int(output.split(": saved checkpoint at step ")[1].split(",")[0])
    assert f"received signal {int(signal.SIGTERM)}: saved checkpoint at step {saved}, exiting" in output
    assert (model_dir / "checkpoints" / str(saved)).is_dir()
    rows = step_rows(model_dir)
    assert [row["step"] for row in rows] == list(range(1, saved + 1))
    # step 1 is before any update (the schedules differ after): the same weights and batch as the float32 run's,
    # bfloat16's 8 bits of mantissa apart
    assert rows[0]["loss"] == pytest.approx(step_rows(jax_run[0])[0]["loss"], abs=0.02)


def test_the_accelerator_runs_summary_reads_a_jax_runs_directory(jax_run):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from accelerator_train_summary import summary

    line = summary(str(jax_run[0]))
    assert line["steps"] == 4 and line["tokens_per_sec"] > 0 and 0 < line["mfu_mean"] <= 1
    assert 0 <= line["input_wait_share"] < 1 and line["planned_memory_bytes"] > 0
    assert line["peak_memory_bytes"] is None and line["planned_over_measured"] is None  # a CPU reports no peak



@pytest.mark.slow  # three short JAX runs on a tmpfs
def test_a_full_disk_during_an_orbax_write_stops_with_status_3_and_the_run_resumes_once_space_is_freed(
        small_data_dir, tmp_path):
    import os

    from support.small_disk import resize, small_tmpfs

    with small_tmpfs(tmp_path / "disk", 64 << 20) as disk:
        model_dir = disk / "model"
        train(small_data_dir, model_dir, "train_steps=2", "checkpoint_every=2")
        checkpoint = sum(path.stat().st_size for path in (model_dir / "checkpoints" / "2").rglob("*") if path.is_file())
        stat = os.statvfs(disk)
        resize(disk, (stat.f_blocks - stat.f_bfree) * stat.f_frsize + checkpoint // 2)  # no room for step 4's
        process = start(train_args(small_data_dir, model_dir, "train_steps=6", "checkpoint_every=2"),
                        env={"KERAS_BACKEND": "jax"})
        output = output_of(process, timeout=600)[0]
        assert process.returncode == 3, output[-3000:]
        checkpoints = model_dir / "checkpoints"
        assert f"cannot save checkpoint {checkpoints / '4'}: no space left on the device (" in output
        assert "its partial files were removed (4.orbax-checkpoint-tmp)" in output
        assert f"Free space under {checkpoints} and run the same command again: the run resumes from " \
               f"{checkpoints / '2'}" in output
        assert "Traceback" not in output, output
        assert sorted(path.name for path in checkpoints.iterdir()) == ["2"]
        resize(disk, 64 << 20)
        train(small_data_dir, model_dir, "train_steps=6", "checkpoint_every=2")
        assert [row["step"] for row in step_rows(model_dir)] == list(range(1, 7))
        assert sorted(path.name for path in checkpoints.iterdir()) == ["2", "4", "6"]


@pytest.mark.slow  # a JAX run, then two refused starts
def test_a_jax_directory_whose_every_checkpoint_was_set_aside_does_not_start_over(small_data_dir, tmp_path):
    model_dir = tmp_path / "model"
    train(small_data_dir, model_dir, "train_steps=2", "checkpoint_every=2")
    (model_dir / "checkpoints" / "2" / "position" / "metadata").unlink()  # its only checkpoint unreadable
    for attempt in ("sets it aside", "finds only what was set aside"):
        process = start(train_args(small_data_dir, model_dir, "train_steps=4", "checkpoint_every=2"),
                        env={"KERAS_BACKEND": "jax"})
        output = output_of(process, timeout=600)[0]
        assert process.returncode == 3, (attempt, output[-3000:])
        assert f"no checkpoint under {model_dir / 'checkpoints'} can be read" in output and "Traceback" not in output
    assert "were set aside to " in output and "put a readable checkpoint back" in output  # not a new run at step 1
    assert [row["step"] for row in step_rows(model_dir)] == [1, 2]
    assert sorted(path.name for path in (model_dir / "checkpoints" / "damaged").iterdir()) == ["2"]
