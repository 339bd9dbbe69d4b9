"""Model directories written before trainer/ was split into subpackages (commit a8a65d4, kept in
tests/fixtures/legacy by tests/fixtures/make_legacy_model_dirs.sh) still resume, fine-tune and
export with today's code, and a fresh run writes the step log that code wrote."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xlnet_cli
from trainer.runtime.model_dir import ModelDirectory

REPO = Path(__file__).resolve().parents[2]
LEGACY = REPO / "tests" / "fixtures" / "legacy"
PINNED_COMMIT = (LEGACY / "COMMIT").read_text().strip()
# The settings make_legacy_model_dirs.sh trained with.
MODEL = ["n_layer=2", "d_model=32", "n_head=2", "d_head=16", "d_inner=64", "mem_len=16", "reuse_len=32",
         "dropout=0.1", "dropatt=0.1"]
TRAIN = ["seq_len=64", "num_predict=10", "perm_size=32", "train_batch_size=4", "eval_batch_size=4",
         "steps_per_loop=2", "checkpoint_every=2", "keep_checkpoints=1", "eval_every=0", "deterministic=true",
         "warmup_steps=2", "end_learning_rate=1e-3"]
FINETUNE = ["train_batch_size=4", "eval_batch_size=8", "steps_per_loop=2", "checkpoint_every=2",
            "keep_checkpoints=1", "eval_every=0", "warmup_steps=1", "deterministic=true"]


def sets(items: list[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def xlnet(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`xlnet ARGS` of the code under ``cwd`` in a fresh process (deterministic runs fix TensorFlow's
    thread pools, which only a new process can)."""
    env = dict(os.environ, PYTHONPATH=str(cwd))
    result = subprocess.run([sys.executable, str(cwd / "xlnet_cli.py"), *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def legacy_copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(LEGACY / name, target)
    return target


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_fields_added_since(row: dict) -> dict:
    """A step-log row without the fields added after the pinned commit."""
    return {key: value for key, value in row.items() if key not in STEP_FIELDS_ADDED_SINCE}


def assert_same_steps(actual: list[dict], expected: list[dict]) -> None:
    """The same steps with the same losses and metrics (to float32 rounding: the fixture may come
    from another machine of the same kind; tests/trainer/test_legacy_model_dirs.py's slow test
    compares bytes on one machine)."""
    assert [row["step"] for row in actual] == [row["step"] for row in expected]
    for mine, theirs in zip(actual, expected):
        mine = without_fields_added_since(mine)
        assert set(mine) == set(theirs)
        np.testing.assert_allclose([mine[key] for key in sorted(mine)], [theirs[key] for key in sorted(theirs)],
                                   rtol=1e-5, err_msg=str(mine["step"]))


# Training settings added after the pinned commit, at the defaults that keep its behaviour.
SETTINGS_ADDED_SINCE = {"remat": "none", "auto_fit": False, "profile_steps": "", "async_checkpoint": False,
                        "preemption_grace_seconds": 20.0}
# Fine-tuning settings added since: one segment per text (long documents).
FINETUNE_SETTINGS_ADDED_SINCE = {"max_segments": 1}
# Step-log fields added after the pinned commit, each a figure of the loop of steps a row is in: the
# allocator's peak memory, the model FLOPs per second, the MFU and the peak it is measured against, and
# the seconds the loop waited for input (None where the engine does not tell it apart).
STEP_FIELDS_ADDED_SINCE = {"peak_memory_bytes", "model_flops_per_sec", "mfu", "mfu_peak_source",
                           "input_wait_seconds"}


@pytest.mark.slow  # about 12 s: a resumed run
def test_a_pretrained_directory_resumes_to_the_losses_an_uninterrupted_run_logged(tmp_path):
    model_dir = legacy_copy("pretrained", tmp_path)
    xlnet("train", "--data", str(LEGACY / "data"), "--model-dir", str(model_dir), *sets(MODEL + TRAIN),
          "--set", "train_steps=6")
    assert_same_steps(rows(model_dir / ModelDirectory.STEP_LOG), rows(LEGACY / "train_steps_through_6.jsonl"))


@pytest.mark.slow  # about 13 s: a finetune from the legacy directory
def test_a_pretrained_directory_initialises_a_finetune_with_the_losses_it_gave(tmp_path):
    out = tmp_path / "classifier"
    xlnet("finetune", "--task", "classification", "--train", str(LEGACY / "train.tsv"), "--eval",
          str(LEGACY / "dev.tsv"), "--init-checkpoint", str(LEGACY / "pretrained"), "--model-dir", str(out),
          "--max-seq-length", "32", *sets(FINETUNE + ["train_steps=2"]))
    assert_same_steps(rows(out / ModelDirectory.STEP_LOG), rows(LEGACY / "classifier" / ModelDirectory.STEP_LOG))
    # this model is so small that the CPU's counted allocator sees none of its steps: it reports a
    # peak of 0, which would read as "used no memory", so the field is null (no peak measured)
    assert all(row["peak_memory_bytes"] is None or row["peak_memory_bytes"] > 0
               for row in rows(out / ModelDirectory.STEP_LOG))
    for name in (ModelDirectory.LABELS, ModelDirectory.MODEL_CONFIG):
        assert json.loads((out / name).read_text()) == json.loads((LEGACY / "classifier" / name).read_text())
    legacy_settings = json.loads((LEGACY / "classifier" / ModelDirectory.FINETUNE_CONFIG).read_text())
    written = json.loads((out / ModelDirectory.FINETUNE_CONFIG).read_text())
    assert written == {**legacy_settings, **SETTINGS_ADDED_SINCE, **FINETUNE_SETTINGS_ADDED_SINCE}


@pytest.mark.slow  # 10 s; the fast restore test reads the same checkpoint
def test_a_fine_tuned_squad_directory_resumes(tmp_path):
    model_dir = legacy_copy("squad", tmp_path)
    xlnet("finetune", "--task", "squad", "--train", str(LEGACY / "squad.json"), "--eval", str(LEGACY / "squad.json"),
          "--init-checkpoint", str(LEGACY / "pretrained"), "--model-dir", str(model_dir), "--max-seq-length", "64",
          "--doc-stride", "32", "--max-query-length", "16", *sets(FINETUNE + ["train_steps=4"]))
    steps = rows(model_dir / ModelDirectory.STEP_LOG)
    assert [row["step"] for row in steps] == [1, 2, 3, 4]
    assert steps[:2] == rows(LEGACY / "squad" / ModelDirectory.STEP_LOG)
    assert ModelDirectory(model_dir).latest_checkpoint().endswith("ckpt-4")


@pytest.mark.parametrize("name, head", [("pretrained", None), ("classifier", "XLNetForSequenceTask"),
                                        ("squad", "XLNetForQuestionAnswering")])
def test_a_directory_restores_every_variable_of_its_network_and_head(name, head):
    from trainer.runtime.restore import restore_model

    restored = restore_model(ModelDirectory(str(LEGACY / name)))  # every variable matched, or RestoreError
    assert type(restored.head).__name__ == (head or "NoneType")
    assert restored.checkpoint.endswith("ckpt-4" if name == "pretrained" else "ckpt-2")


@pytest.mark.slow  # 80 s: three SavedModels; the fast test above restores the same checkpoints
@pytest.mark.parametrize("name, signature", [("pretrained", "encode_text"), ("classifier", "classify"),
                                             ("squad", "answer")])
def test_a_directory_exports_with_the_signatures_of_its_task(tmp_path, name, signature):
    import tensorflow as tf

    from trainer.runtime.restore import restore_model
    from trainer.serving.saved_model import signature_names

    directory = ModelDirectory(str(LEGACY / name))
    assert xlnet_cli.main(["export", "--model-dir", directory.path, "--output", str(tmp_path / "serving")]) == 0
    loaded = tf.saved_model.load(str(tmp_path / "serving" / "1"))
    task = directory.finetune_config.task if directory.finetune_config else None
    assert set(loaded.signatures) == set(signature_names(task))
    text = (LEGACY / "dev.tsv").read_text().splitlines()[1].split("\t")[0]
    if signature == "answer":
        answer = loaded.signatures["answer"](question=tf.constant(["Where is it?"]), context=tf.constant([text]))
        start, end = int(answer["char_start"][0]), int(answer["char_end"][0])
        assert answer["answer"][0].numpy().decode() == (text[start:end] if start >= 0 else "")
        return
    outputs = loaded.signatures[signature](text=tf.constant([text]))
    if signature == "classify":
        restored = restore_model(directory)  # the same checkpoint, read by today's code
        ids = {key: outputs_of(loaded, text)[key] for key in ("input_ids", "segment_ids", "input_mask")}
        logits = restored.head(ids, training=False)
        np.testing.assert_allclose(outputs["probabilities"].numpy(), tf.nn.softmax(logits).numpy(), rtol=1e-5)
        assert outputs["label_names"][0].numpy().decode() in directory.labels


def outputs_of(loaded, text: str) -> dict:
    import tensorflow as tf

    return loaded.signatures["encode_text"](text=tf.constant([text]))


@pytest.mark.slow  # 90 s: checks the pinned commit out and trains with its code
def test_a_fresh_run_writes_the_same_step_log_as_the_code_before_the_move(tmp_path):
    if subprocess.run(["git", "cat-file", "-e", PINNED_COMMIT], cwd=REPO).returncode:
        pytest.skip(f"this clone lacks commit {PINNED_COMMIT} (a shallow clone)")
    old = tmp_path / "old-code"
    subprocess.run(["git", "worktree", "add", "--detach", str(old), PINNED_COMMIT], cwd=REPO, check=True,
                   capture_output=True)
    try:
        for code, out in ((old, tmp_path / "before"), (REPO, tmp_path / "after")):
            xlnet("train", "--data", str(LEGACY / "data"), "--model-dir", str(out), *sets(MODEL + TRAIN),
                  "--set", "train_steps=6", cwd=code)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO, capture_output=True)
    before = rows(tmp_path / "before" / ModelDirectory.STEP_LOG)
    after = [without_fields_added_since(row) for row in rows(tmp_path / "after" / ModelDirectory.STEP_LOG)]
    # Every field byte-identical but the gradient norm, which may differ in its last float32 bit:
    # on 2026-11-27, in a fresh .venv, the pinned code gave step 6's grad_norm 1.5129635334014893
    # in every run and the landed code of 2026-11-25 (f736ef1, before that day's changes)
    # 1.5129634141921997 in every run, the losses equal to the bit; the cause was not found.
    assert [{**row, "grad_norm": None} for row in after] == [{**row, "grad_norm": None} for row in before]
    for new_row, old_row in zip(after, before):
        assert abs(new_row["grad_norm"] - old_row["grad_norm"]) <= 2 ** -23 * abs(old_row["grad_norm"]) * 2
