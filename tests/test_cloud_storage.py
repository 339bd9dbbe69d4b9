"""Every user path on gs://, end to end, against a real GCS JSON API on 127.0.0.1 (tests/support/gcs_emulator.py).

The default suite runs one compact flow: corpus and vocabulary uploaded to the bucket,
`xlnet preprocess` gs:// -> gs:// on the multi-processing runner with 2 workers, `xlnet train`
with data and model directory in the bucket, `xlnet export` bucket -> bucket, the SavedModel
loaded from the bucket, --init-checkpoint gs://. Slow tests add a SIGKILLed run resumed from
the bucket and injected faults (503s, dropped uploads).
"""
from __future__ import annotations

import os
import posixpath
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import xlnet_cli
from pipeline.preprocess_command import preprocess
from pipeline.preprocess_config import PreprocessConfig
from tfrecords.manifest import load_manifest
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import REPO, TINY_DATA
from support.processes import output_of, signal_and_wait, start, wait_for
# The tiny preset made smaller still (as in tests/trainer/tasks/test_pretraining.py), so a step takes milliseconds.
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32",
         "train_batch_size=4", "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2"]
RUN = ["train_steps=8", "checkpoint_every=4", "eval_every=8"]
PATH_FIELDS = ("inputs", "output", "vocab")


def upload(local: str, remote: str) -> str:
    tf.io.gfile.makedirs(posixpath.dirname(remote))
    tf.io.gfile.copy(local, remote, overwrite=True)
    return remote


def train_args(data: str, model_dir: str, *overrides: str, small: bool = True) -> list[str]:
    args = ["train", "--data", data, "--model-dir", model_dir, "--preset", "tiny"]
    for item in (SMALL if small else []) + list(overrides):
        args += ["--set", item]
    return args




def shard_bytes(manifest) -> dict[str, bytes]:
    files = [shard.file for split in manifest.splits.values() for shard in split.shards]
    return {name: tf.io.gfile.GFile(manifest.shard_path(name), "rb").read() for name in files}


def without_paths(manifest) -> dict:
    values = manifest.to_dict()
    values["config"] = {k: v for k, v in values["config"].items() if k not in PATH_FIELDS}
    values["vocab"] = {k: v for k, v in values["vocab"].items() if k != "path"}
    return values


def bucket_preprocess(corpus: str, vocab: str, output: str, workers: int = 2):
    config = PreprocessConfig(inputs=(corpus,), output=output, vocab=vocab, **TINY_DATA)
    return preprocess(config, runner="FnApiRunner", workers=workers)[0]


def no_local_gs_directory() -> bool:
    """pathlib would have turned gs://b/x into the local directory gs:/b/x."""
    return not any(Path(root, "gs:").exists() for root in {os.getcwd(), str(REPO)})


@pytest.fixture(scope="module")
def bucket_run(gcs, tmp_path_factory, corpus_sample, spm_model):
    """The compact flow: inputs uploaded, preprocessed, trained and exported, all in the bucket."""
    root = gcs.new_prefix("bucket-run")
    corpus = upload(corpus_sample, posixpath.join(root, "corpus", "sample.txt"))
    vocab = upload(spm_model, posixpath.join(root, "spiece.model"))
    began = time.time()
    manifest = bucket_preprocess(corpus, vocab, posixpath.join(root, "data"))
    model_dir = posixpath.join(root, "model")
    assert xlnet_cli.main(train_args(manifest.directory, model_dir, *RUN)) == 0
    serving = posixpath.join(root, "serving")
    assert xlnet_cli.main(["export", "--model-dir", model_dir, "--output", serving, "--max-length", "32"]) == 0
    return {"root": root, "corpus": corpus, "vocab": vocab, "manifest": manifest, "model_dir": model_dir,
            "serving": serving, "seconds": time.time() - began}


@pytest.mark.xdist_group("bucket_run")  # its module fixture (preprocess, train, export: ~70 s) built once
def test_preprocessing_from_and_to_the_bucket_gives_the_local_bytes(bucket_run, tiny_data_dir):
    remote, local = bucket_run["manifest"], load_manifest(tiny_data_dir)
    assert remote.directory == posixpath.join(bucket_run["root"], "data")
    assert remote.config["vocab"].startswith("gs://") and remote.config["inputs"][0].startswith("gs://")
    assert without_paths(remote) == without_paths(local)
    remote_shards, local_shards = shard_bytes(remote), shard_bytes(local)
    assert sorted(remote_shards) == sorted(local_shards) and len(remote_shards) == 6
    assert all(remote_shards[name] == local_shards[name] for name in local_shards)


@pytest.mark.xdist_group("bucket_run")  # its module fixture (preprocess, train, export: ~70 s) built once
def test_training_keeps_its_whole_model_directory_in_the_bucket(bucket_run):
    model_dir = bucket_run["model_dir"]
    for name in ("model_config.json", "train_config.json", "spiece.model", "special_ids.json",
                 "text_normalization.json", "checkpoints/ckpt-8.index", "checkpoints/ckpt-4.index"):
        assert tf.io.gfile.exists(posixpath.join(model_dir, name)), name
    assert tf.train.latest_checkpoint(posixpath.join(model_dir, "checkpoints")).endswith("ckpt-8")
    assert sorted(ModelDirectory(model_dir).step_losses()) == list(range(1, 9))
    for writer in ("train", "eval"):
        assert tf.io.gfile.glob(posixpath.join(model_dir, "tensorboard", writer, "events.out.tfevents.*")), writer
    assert no_local_gs_directory()


@pytest.mark.xdist_group("bucket_run")  # its module fixture (preprocess, train, export: ~70 s) built once
def test_training_on_bucket_data_has_the_losses_of_training_on_local_data(bucket_run, tiny_data_dir, tmp_path):
    assert xlnet_cli.main(train_args(tiny_data_dir, str(tmp_path / "local"), *RUN)) == 0
    local = ModelDirectory(str(tmp_path / "local")).step_losses()
    remote = ModelDirectory(bucket_run["model_dir"]).step_losses()
    np.testing.assert_allclose([remote[s] for s in range(1, 9)], [local[s] for s in range(1, 9)], rtol=1e-5)


@pytest.mark.slow  # about 55 s: an export to the bucket and a fresh process serving it
@pytest.mark.xdist_group("bucket_run")  # its module fixture (preprocess, train, export: ~70 s) built once
def test_the_saved_model_exported_to_the_bucket_serves_from_the_bucket(bucket_run, tmp_path):
    serving = bucket_run["serving"]
    assert [name.rstrip("/") for name in tf.io.gfile.listdir(serving)] == ["1"]  # no staging left behind
    local_base = str(tmp_path / "serving")
    assert xlnet_cli.main(["export", "--model-dir", bucket_run["model_dir"], "--output", local_base,
                           "--max-length", "32"]) == 0
    text = tf.constant(["The <mask> of the river runs to the sea."])
    remote_out = tf.saved_model.load(posixpath.join(serving, "1")).signatures["predict_masked"](text=text)
    local_out = tf.saved_model.load(posixpath.join(local_base, "1")).signatures["predict_masked"](text=text)
    assert remote_out["num_masks"].numpy().tolist() == [1]
    assert remote_out["top_k_tokens"].numpy().tolist() == local_out["top_k_tokens"].numpy().tolist()
    np.testing.assert_allclose(remote_out["top_k_probabilities"].numpy(), local_out["top_k_probabilities"].numpy(),
                               rtol=1e-6)


@pytest.mark.xdist_group("bucket_run")  # its module fixture (preprocess, train, export: ~70 s) built once
def test_init_checkpoint_from_the_bucket_initialises_the_weights(bucket_run, tiny_data_dir, tmp_path):
    from trainer.configs.overrides import resolve_configs
    from trainer.models.network import build_network
    from trainer.tasks.pretraining import pretraining_controller

    source = ModelDirectory(bucket_run["model_dir"])
    model, train, _ = resolve_configs("tiny", None, SMALL + ["train_steps=1"], base_model=source.model_config)
    trainer = pretraining_controller(model, train, manifest=load_manifest(tiny_data_dir), model_dir=str(tmp_path / "fine"),
                      strategy=tf.distribute.get_strategy(), init_checkpoint=source.path, log=lambda line: None)
    expected = build_network(model)
    tf.train.Checkpoint(model=expected).restore(source.latest_checkpoint()).expect_partial()
    assert len(trainer.network.weights) == len(expected.weights) > 0
    for got, want in zip(trainer.network.weights, expected.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.xdist_group("bucket_run")  # its module fixture (preprocess, train, export: ~70 s) built once
def test_train_command_takes_its_init_checkpoint_from_the_bucket(bucket_run, tiny_data_dir, tmp_path, capsys):
    source = bucket_run["model_dir"]
    args = train_args(tiny_data_dir, str(tmp_path / "fine"), "train_steps=2", "eval_every=0")
    assert xlnet_cli.main(args + ["--init-checkpoint", source]) == 0
    assert f"initialised the model from {source}/checkpoints/ckpt-8" in capsys.readouterr().out
    with tf.io.gfile.GFile(posixpath.join(source, "spiece.model"), "rb") as handle:
        assert (tmp_path / "fine" / "spiece.model").read_bytes() == handle.read()


def test_vocabulary_trained_from_and_written_to_the_bucket_equals_the_local_one(gcs_prefix, corpus_sample, tmp_path):
    corpus = upload(corpus_sample, posixpath.join(gcs_prefix, "sample.txt"))
    settings = ["--vocab-size", "1000", "--input-sentence-size", "3000", "--num-threads", "1"]
    assert xlnet_cli.main(["vocab", "--input", corpus, "--output", posixpath.join(gcs_prefix, "spiece")] + settings) == 0
    assert xlnet_cli.main(["vocab", "--input", corpus_sample, "--output", str(tmp_path / "spiece")] + settings) == 0
    remote = tf.io.gfile.GFile(posixpath.join(gcs_prefix, "spiece.model"), "rb").read()
    assert remote == (tmp_path / "spiece.model").read_bytes()


# ------------------------------------------------------------------------------- slow tests
# The tiny preset itself (steps of ~0.1 s, not milliseconds), so the run is still going when killed:
# killed once step 12 and ckpt-8 are in the bucket, it has 12 steps and two checkpoints (16, 24) to go.
KILLED = ["train_steps=24", "checkpoint_every=8", "steps_per_loop=4", "warmup_steps=4", "eval_every=0"]


def start_training(args: list[str]) -> subprocess.Popen:
    """`python -m trainer.task` in a child process that talks to the emulator (os.environ holds its settings)."""
    return start(["-m", "trainer.task", *args[1:]])


def finish(process: subprocess.Popen, timeout: float = 600) -> str:
    (output,) = output_of(process, timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


# The slow tests train on bucket_run's data (the tiny data set preprocessed into the bucket, fault-free):
# the slow suite builds that fixture for the serving test above anyway, and a fixture of their own
# preprocessed the same corpus into the bucket a second time.
@pytest.mark.slow
@pytest.mark.xdist_group("bucket_run")
def test_a_killed_run_resumes_from_the_bucket_with_the_same_losses(bucket_run, gcs_prefix, tmp_path):
    data = bucket_run["manifest"].directory
    # the uninterrupted run in this process (no start-up of its own); the killed one and its resume are children
    assert xlnet_cli.main(train_args(data, str(tmp_path / "straight"), *KILLED, small=False)) == 0
    model_dir = posixpath.join(gcs_prefix, "killed")
    log = posixpath.join(model_dir, "train_steps.jsonl")
    process = start_training(train_args(data, model_dir, *KILLED, small=False))
    wait_for(lambda: tf.io.gfile.exists(posixpath.join(model_dir, "checkpoints", "ckpt-8.index"))
             and tf.io.gfile.exists(log) and len(ModelDirectory(model_dir).step_losses()) >= 12, process,
             timeout=300, what="step 12 and its checkpoint 8")
    signal_and_wait(process)  # SIGKILL
    assert tf.train.latest_checkpoint(posixpath.join(model_dir, "checkpoints")) is not None
    output = finish(start_training(train_args(data, model_dir, *KILLED, small=False)))
    assert f"resumed from {model_dir}/checkpoints/ckpt-" in output
    expected, resumed = ModelDirectory(str(tmp_path / "straight")).step_losses(), ModelDirectory(model_dir).step_losses()
    assert sorted(resumed) == list(range(1, 25))
    np.testing.assert_allclose([resumed[s] for s in range(1, 25)], [expected[s] for s in range(1, 25)], rtol=1e-5)
    assert no_local_gs_directory()


@pytest.mark.slow
@pytest.mark.xdist_group("bucket_run")
def test_preprocessing_training_and_export_complete_identically_under_injected_faults(gcs, bucket_run, gcs_prefix):
    settings = ["train_steps=8", "checkpoint_every=2", "eval_every=4", "deterministic=true"]
    clean_model = posixpath.join(gcs_prefix, "clean-model")
    finish(start_training(train_args(bucket_run["manifest"].directory, clean_model, *settings)))
    gcs.set_faults(fail_share=0.1, drop_upload_share=0.1, seed=1)
    try:
        faulty = bucket_preprocess(bucket_run["corpus"], bucket_run["vocab"], posixpath.join(gcs_prefix, "data"))
        faulty_model = posixpath.join(gcs_prefix, "faulty-model")
        finish(start_training(train_args(faulty.directory, faulty_model, *settings)))
        serving = posixpath.join(gcs_prefix, "serving")
        assert xlnet_cli.main(["export", "--model-dir", faulty_model, "--output", serving, "--max-length", "32"]) == 0
        counts = gcs.fault_counts()
    finally:
        gcs.set_faults()
    served = tf.saved_model.load(posixpath.join(serving, "1")).signatures["encode_text"](text=tf.constant(["Amen."]))
    assert served["pooled_output"].shape == (1, 64)
    assert counts["unavailable"] > 0 and counts["dropped_uploads"] > 0, counts
    assert without_paths(faulty) == without_paths(bucket_run["manifest"])
    assert shard_bytes(faulty) == shard_bytes(bucket_run["manifest"])
    logs = [ModelDirectory(model).reproducible_step_rows() for model in (clean_model, faulty_model)]
    assert [row["step"] for row in logs[0]] == list(range(1, 9)) and logs[1] == logs[0]
    for model in (clean_model, faulty_model):
        assert tf.train.latest_checkpoint(posixpath.join(model, "checkpoints")).endswith("ckpt-8")
