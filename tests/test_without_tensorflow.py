"""Where TensorFlow is not installed (``pip install ".[jax]"``, ``".[pipeline]"``): the packaging lists it only
in the ``tensorflow`` extra, a command that needs it says which extra to install, and what is written for
hosts without it (the NumPy reader, the Orbax checkpoints, preprocessing) runs. Each case runs in an
interpreter in which ``import tensorflow`` fails, as on a GPU machine with JAX only."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TENSORFLOW = ("tensorflow", "tensorflow_text", "tensorboard", "tf_keras")

# Installed on sys.path through PYTHONPATH: an interpreter in which TensorFlow is absent. A module set to
# None in sys.modules is what Python treats as not installed: its import raises ModuleNotFoundError, and
# importlib.util.find_spec (how some libraries ask) answers None.
WITHOUT_TENSORFLOW = f"""
import sys

for name in {TENSORFLOW!r}:
    sys.modules[name] = None
"""


def run_without_tensorflow(tmp_path: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python ARGS`` (a script or ``-c CODE``) from the repository, TensorFlow not importable."""
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(WITHOUT_TENSORFLOW)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]), KERAS_BACKEND="jax")
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def requirement_lists() -> dict[str, list[str]]:
    """setup.py's requirement lists by name (``INSTALL_REQUIRES``, ``JAX_REQUIRES``, ...), read without running it."""
    tree = ast.parse((REPO / "setup.py").read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.endswith("_REQUIRES")}


def test_the_base_install_and_the_jax_and_pipeline_extras_bring_no_tensorflow():
    lists = requirement_lists()
    for name in ("INSTALL_REQUIRES", "JAX_REQUIRES", "PIPELINE_REQUIRES", "DASK_REQUIRES"):
        assert not [req for req in lists[name] if req.split("=")[0].split("[")[0].replace("-", "_") in TENSORFLOW], name
    assert {req.split("==")[0] for req in lists["TENSORFLOW_REQUIRES"]} == {"tensorflow", "tensorflow-text",
                                                                            "tensorboard"}


def test_a_command_that_needs_tensorflow_names_the_extra_to_install(tmp_path, small_data_dir):
    result = run_without_tensorflow(tmp_path, str(REPO / "xlnet_cli.py"), "train", "--data", small_data_dir,
                                    "--model-dir", str(tmp_path / "model"), "--backend", "tensorflow")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == ('xlnet train: error: needs TensorFlow (tensorflow is not installed); install the '
                                     'tensorflow extra: pip install "xlnet-pretrain[tensorflow]" (preprocessing does '
                                     'not need it)')



def test_a_tensorflow_model_directory_as_the_jax_init_checkpoint_says_to_export_it_where_tensorflow_is(
        tmp_path, small_data_dir):
    init = tmp_path / "tf_model"
    (init / "checkpoints").mkdir(parents=True)
    (init / "checkpoints" / "ckpt-3.index").write_bytes(b"the TensorFlow engine's")
    (init / "model_config.json").write_text("{}")
    result = run_without_tensorflow(tmp_path, str(REPO / "xlnet_cli.py"), "train", "--data", small_data_dir,
                                    "--model-dir", str(tmp_path / "model"), "--backend", "jax",
                                    "--init-checkpoint", str(init))
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == (
        f"xlnet train: error: --init-checkpoint {init} holds the TensorFlow engine's checkpoints, which --backend "
        "jax reads through TensorFlow, not installed here: on a machine with it, `xlnet export --model-dir "
        f"{init} --format huggingface --output DIR`, then --init-checkpoint DIR")

READ_AND_CHECKPOINT = """
import sys
import jax.numpy as jnp
from tfrecords.numpy_reader import NumpyStreamReader
from tfrecords.record_files import load_local_manifest
from trainer.runtime.jax_step import StepState
from trainer.runtime.orbax_checkpoints import OrbaxCheckpoints

manifest = load_local_manifest(sys.argv[1])
reader = NumpyStreamReader(manifest, "train", 4, manifest.seq_len, manifest.num_predict, manifest.bi_data)
with reader.host_batches() as batches:
    batch = next(batches)
state = StepState([jnp.asarray(batch["input_ids"])], [], [], None)
with OrbaxCheckpoints(sys.argv[2], keep=1) as checkpoints:
    checkpoints.save(1, state, {"records": 1})
    checkpoints.wait()
    restored = checkpoints.restore_latest(state)
assert (restored.state.trainable[0] == batch["input_ids"]).all() and restored.position == {"records": 1}
loaded = sorted(name for name, module in sys.modules.items()
                if module is not None and name.split(".")[0] in ("tensorflow", "apache_beam"))
print(batch["input_ids"].shape, loaded)
"""


def test_the_numpy_reader_and_orbax_checkpoints_run_without_tensorflow(tmp_path, small_data_dir):
    pytest.importorskip("orbax.checkpoint")
    result = run_without_tensorflow(tmp_path, "-c", READ_AND_CHECKPOINT, small_data_dir, str(tmp_path / "ckpt"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "(1, 4, 64) []"


@pytest.mark.slow  # a real preprocessing run (FnApiRunner, in process), about 20 s
def test_preprocessing_runs_without_tensorflow(tmp_path, corpus_sample, spm_model):
    result = run_without_tensorflow(tmp_path, str(REPO / "xlnet_cli.py"), "preprocess", "--input", corpus_sample,
                                    "--output", str(tmp_path / "data"), "--vocab", spm_model, "--seq-len", "64",
                                    "--reuse-len", "32", "--num-predict", "10", "--num-streams", "2", "--num-shards",
                                    "1", "--valid-shards", "1", "--runner", "FnApiRunner", "--workers", "1",
                                    "--direct_running_mode=in_memory")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "data" / "manifest.json").is_file()


@pytest.mark.slow
def test_jax_pretraining_runs_resumes_and_exports_where_tensorflow_is_not_installed(tmp_path, small_data_dir):
    from support.bundled_data import SMALL_DATA, SMALL_DATA_TRAINING

    settings = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32",
                "train_batch_size=8", "eval_batch_size=8", f"vocab_size={SMALL_DATA['vocab_size']}",
                "checkpoint_every=2", "eval_every=0", *SMALL_DATA_TRAINING]
    args = [str(REPO / "xlnet_cli.py"), "train", "--backend", "jax", "--data", small_data_dir, "--model-dir",
            str(tmp_path / "model"), *[arg for item in settings for arg in ("--set", item)]]
    first = run_without_tensorflow(tmp_path, *args, "--set", "train_steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_without_tensorflow(tmp_path, *args, "--set", "train_steps=4")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from " in second.stdout and "at step 2" in second.stdout
    steps = [json.loads(line)["step"] for line in (tmp_path / "model" / "train_steps.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert sorted(path.name for path in (tmp_path / "model" / "checkpoints").iterdir()) == ["2", "4"]
    # the directory exports to Hugging Face there; a SavedModel names the extra it needs
    exported = run_without_tensorflow(tmp_path, str(REPO / "xlnet_cli.py"), "export", "--model-dir",
                                      str(tmp_path / "model"), "--format", "huggingface", "--output",
                                      str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert {"config.json", "model.safetensors", "spiece.model"} <= {path.name for path in (tmp_path / "hf").iterdir()}
    savedmodel = run_without_tensorflow(tmp_path, str(REPO / "xlnet_cli.py"), "export", "--model-dir",
                                        str(tmp_path / "model"), "--output", str(tmp_path / "sm"))
    assert savedmodel.returncode == 2 and "install the tensorflow extra" in savedmodel.stderr

