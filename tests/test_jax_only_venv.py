"""A real ``pip install -e ".[jax]"`` (``make test-jax-venv``, .venv-jax: the extra and pytest, nothing else):
pip's resolution of the extra brings no TensorFlow, and the installed ``xlnet`` command trains on JAX, resumes,
plans, inspects what needs no TensorFlow and exports to Hugging Face there, while a command that needs
TensorFlow (or Apache Beam) says in one line which extra to install. tests/test_without_tensorflow.py hides
TensorFlow inside the main venv; here it is not installed at all, as on a GPU machine that runs JAX only.

Skipped where TensorFlow is installed, outside .venv-jax (the main .venv: ``make test`` is unaffected). The
Makefile runs this file with ``--noconftest``: tests/conftest.py imports TensorFlow when pytest starts. The data
directory is the committed one the ``small_data_dir`` fixture copies (tests/fixtures/legacy/data, written by the
real pipeline), copied as committed (training notes that its manifest records no shard sizes): `xlnet
preprocess` cannot run here (no Beam), and so no other interpreter is needed. The JAX runs share the test
suite's compilation cache (tests/support/processes.py).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# In .venv-jax nothing is skipped: TensorFlow installed there (brought by a dependency of the extra) fails the tests.
if importlib.util.find_spec("tensorflow") is not None and Path(sys.prefix).name != ".venv-jax":
    pytest.skip("TensorFlow is installed here: `make test-jax-venv` runs this file in .venv-jax (\".[jax]\" only)",
                allow_module_level=True)

from support.bundled_data import SMALL_DATA, SMALL_DATA_DIR, SMALL_DATA_TRAINING  # noqa: E402
from support.processes import ENVIRONMENT  # noqa: E402

# The installed console script (pip's entry point for xlnet_cli:main), beside this venv's python.
XLNET = Path(sys.executable).parent / "xlnet"
# tests/test_without_tensorflow.py's expectations, the lines the project prints today.
NEEDS_TENSORFLOW = ('xlnet {}: error: needs TensorFlow (tensorflow is not installed); install the tensorflow extra: '
                    'pip install "xlnet-pretrain[tensorflow]" (preprocessing does not need it)')
NEEDS_BEAM = ('xlnet preprocess: error: needs Apache Beam, which this installation lacks; install the pipeline '
              'extra: pip install "xlnet-pretrain[pipeline]" (training, import and export do not need it)')
SETTINGS = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=8",
            "eval_batch_size=8", f"vocab_size={SMALL_DATA['vocab_size']}", "checkpoint_every=2", "eval_every=0",
            *SMALL_DATA_TRAINING]


def xlnet(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed ``xlnet ARGS`` as a user runs it: no PYTHONPATH, no backend named in the environment."""
    env = {**os.environ, **ENVIRONMENT}
    for name in ("PYTHONPATH", "KERAS_BACKEND"):
        env.pop(name, None)
    return subprocess.run([str(XLNET), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A copy of the committed data directory, and a JAX run of 2 steps resumed to 4 in a model directory."""
    assert XLNET.is_file(), f"{XLNET} missing: pip install -e \".[jax]\" installs the xlnet command"
    base = tmp_path_factory.mktemp("jax_only")
    shutil.copytree(SMALL_DATA_DIR, base / "data")
    args = ["train", "--backend", "jax", "--data", str(base / "data"), "--model-dir", str(base / "model"),
            *[arg for item in SETTINGS for arg in ("--set", item)]]
    first = xlnet(base, *args, "--set", "train_steps=2")
    second = xlnet(base, *args, "--set", "train_steps=4") if first.returncode == 0 else None
    return {"base": base, "data": base / "data", "model": base / "model", "first": first, "second": second}


def test_the_jax_extra_installs_no_tensorflow():
    def installed(name: str) -> bool:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    absent = ["tensorflow", "tensorflow-text", "tensorboard", "tf-keras", "apache-beam"]
    present = ["jax", "jaxlib", "keras", "orbax-checkpoint", "xlnet-pretrain"]
    assert [name for name in absent if installed(name)] == []
    assert [name for name in present if not installed(name)] == []
    assert importlib.util.find_spec("tensorflow") is None and importlib.util.find_spec("apache_beam") is None


def test_jax_training_runs_resumes_and_writes_the_step_log(trained):
    first, second = trained["first"], trained["second"]
    assert first.returncode == 0, first.stderr[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    assert "step 2/2 loss" in first.stdout
    assert f"resumed from {trained['model'] / 'checkpoints' / '2'} at step 2" in second.stdout
    rows = [json.loads(line) for line in (trained["model"] / "train_steps.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert all(row["loss"] > 0 for row in rows)
    assert sorted(path.name for path in (trained["model"] / "checkpoints").iterdir()) == ["2", "4"]
    goodput = xlnet(trained["base"], "goodput", str(trained["model"]))
    assert goodput.returncode == 0, goodput.stderr[-3000:]
    assert "over 2 runs" in goodput.stdout


def test_plan_and_inspect_run_where_they_need_no_tensorflow(trained):
    plan = xlnet(trained["base"], "plan", "--device", "a100-40gb", "--format", "json")
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert json.loads(plan.stdout)["fits"] is True
    cleaning = xlnet(trained["base"], "inspect", str(trained["data"]), "--cleaning")
    assert cleaning.returncode == 0, cleaning.stderr[-3000:]
    assert "preprocessed without cleaning" in cleaning.stdout


def test_the_jax_model_directory_exports_to_hugging_face(trained):
    import numpy as np
    from safetensors.numpy import load_file

    assert trained["second"] is not None and trained["second"].returncode == 0, "the training run failed"
    output = trained["base"] / "hf"
    exported = xlnet(trained["base"], "export", "--model-dir", str(trained["model"]), "--format", "huggingface",
                     "--output", str(output))
    assert exported.returncode == 0, exported.stderr[-3000:]
    config = json.loads((output / "config.json").read_text())
    assert (config["n_layer"], config["d_model"], config["vocab_size"]) == (2, 64, SMALL_DATA["vocab_size"])
    weights = load_file(str(output / "model.safetensors"))
    assert weights["transformer.word_embedding.weight"].shape == (SMALL_DATA["vocab_size"], 64)
    assert all(np.isfinite(value).all() for value in weights.values())


@pytest.mark.parametrize("command", [
    ["export", "--output", "{base}/savedmodel"],
    ["generate", "--prompt", "The"],
    ["score", "--input", "{data}/spiece.model"],
], ids=lambda command: command[0])
def test_a_command_that_needs_tensorflow_names_the_extra_in_one_line(trained, command):
    args = [arg.format(base=trained["base"], data=trained["data"]) for arg in command]
    result = xlnet(trained["base"], args[0], "--model-dir", str(trained["model"]), *args[1:])
    assert (result.returncode, result.stderr.strip()) == (2, NEEDS_TENSORFLOW.format(args[0]))
    assert not (trained["base"] / "savedmodel").exists()


def test_preprocessing_names_the_pipeline_extra(tmp_path):
    (tmp_path / "corpus.txt").write_text("One sentence.\n")
    result = xlnet(tmp_path, "preprocess", "--input", str(tmp_path / "corpus.txt"), "--output",
                   str(tmp_path / "data"), "--vocab", str(SMALL_DATA_DIR / "spiece.model"))
    assert (result.returncode, result.stderr.strip()) == (2, NEEDS_BEAM)
