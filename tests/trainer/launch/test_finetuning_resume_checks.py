"""`xlnet finetune` refused leaves --model-dir as it was: a resumed run whose labels.json cannot
name its head's classes stops with exit status 3 and one line naming the file
(trainer/runtime/model_dir.py check_labels; a copy of the committed legacy classifier, resumed),
and data refused after the run lock was taken leaves no empty model directory behind
(trainer/launch/run_setup.py hold_run_lock)."""
from __future__ import annotations

import json
import shutil

import xlnet_cli
from tfrecords.errors import EXIT_DATA

from support.bundled_data import REPO

LEGACY = REPO / "tests" / "fixtures" / "legacy"
SETTINGS = ["train_batch_size=4", "eval_batch_size=8", "train_steps=4", "steps_per_loop=2", "checkpoint_every=2",
            "eval_every=0"]


def finetune(model_dir, *flags: str) -> int:
    args = ["finetune", "--task", "classification", "--train", str(LEGACY / "train.tsv"), "--eval",
            str(LEGACY / "dev.tsv"), "--model-dir", str(model_dir), "--max-seq-length", "32", *flags]
    return xlnet_cli.main(args + [arg for item in SETTINGS for arg in ("--set", item)])


def test_a_resumed_run_whose_labels_file_holds_one_label_stops_with_status_3_naming_it(tmp_path, capsys):
    model_dir = tmp_path / "classifier"
    shutil.copytree(LEGACY / "classifier", model_dir)
    (model_dir / "labels.json").write_text(json.dumps(["fresh"]))
    before = sorted(path.name for path in model_dir.iterdir())
    assert finetune(model_dir, "--init-checkpoint", str(LEGACY / "pretrained")) == EXIT_DATA
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"xlnet finetune: error: {model_dir / 'labels.json'} holds 1 label [\"fresh\"]; a classification model has "
        "at least 2; put back what `xlnet finetune` wrote there: the classes of the head its checkpoints hold, "
        "index = class id")
    assert sorted(path.name for path in model_dir.iterdir()) == before  # nothing written, no lock left


def test_training_data_refused_after_the_run_lock_leaves_no_model_directory(tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\na fine film\tfresh\nanother one\tfresh\n")
    model_dir = tmp_path / "new-classifier"
    assert finetune(model_dir, "--init-checkpoint", str(LEGACY / "pretrained"), "--train", str(train)) == 2
    assert "classification needs at least 2 labels" in capsys.readouterr().err.strip().splitlines()[-1]
    assert not model_dir.exists()


def test_a_run_refused_in_an_existing_empty_directory_keeps_the_directory(tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\na fine film\tfresh\nanother one\tfresh\n")
    model_dir = tmp_path / "made-by-the-user"
    model_dir.mkdir()
    assert finetune(model_dir, "--init-checkpoint", str(LEGACY / "pretrained"), "--train", str(train)) == 2
    assert model_dir.is_dir() and not any(model_dir.iterdir())
