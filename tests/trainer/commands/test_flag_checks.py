"""A usage error of a TensorFlow command returns before TensorFlow loads (xlnet_cli.py INPUT_FLAGS and
each command's check_flags, trainer/commands/flag_checks.py): a local input that does not exist, a
setting the configuration refuses, flags that do not go together. Each case runs in a fresh process,
which reports its exit status and whether TensorFlow was imported; TensorFlow's import alone takes
5-25 s, so these also bound the time to the error."""
from __future__ import annotations

import subprocess
import sys

import pytest

from support.bundled_data import REPO

CHILD = """
import sys
import xlnet_cli

status = xlnet_cli.run_subcommand(sys.argv[1], sys.argv[2:])
print(status, "tensorflow" in sys.modules)
"""

# (command and flags, with {dir} an existing empty directory and {file} an existing file; what stderr says)
CASES = {
    "train, a missing --data": (["train", "--data", "{dir}/missing", "--model-dir", "{dir}/model"],
                                "--data {dir}/missing: {dir}/missing/manifest.json not found: not a preprocessed "
                                "data directory"),
    "train, an unknown --set key": (["train", "--data", "{dir}/missing", "--model-dir", "{dir}/model", "--set",
                                     "bogus=1"],
                                    "--set bogus: no such field in ModelConfig or TrainConfig"),
    "train, a missing --config": (["train", "--data", "{dir}/missing", "--model-dir", "{dir}/model", "--config",
                                   "{dir}/missing.json"], "--config {dir}/missing.json: file not found"),
    "finetune, an unknown --set key": (["finetune", "--task", "classification", "--train", "{file}", "--eval",
                                        "{file}", "--model-dir", "{dir}/model", "--set", "bogus=1"],
                                       "--set bogus: no such field in ModelConfig or FinetuneConfig"),
    "finetune, a missing --train": (["finetune", "--task", "classification", "--train", "{dir}/missing.tsv",
                                     "--eval", "{file}", "--model-dir", "{dir}/model"],
                                    "--train '{dir}/missing.tsv' does not exist"),
    "export, a missing --model-dir": (["export", "--model-dir", "{dir}/missing", "--output", "{dir}/out"],
                                      "--model-dir '{dir}/missing' does not exist"),
    "export, a SavedModel flag with another format": (
        ["export", "--model-dir", "{dir}", "--output", "{dir}/out", "--format", "huggingface", "--max-segments", "2"],
        "--max-segments applies to the SavedModel (--format savedmodel), not to --format huggingface"),
    "import-checkpoint, a missing --huggingface": (["import-checkpoint", "--huggingface", "{dir}/missing",
                                                    "--output", "{dir}/model"],
                                                   "--huggingface '{dir}/missing' does not exist"),
    "import-checkpoint, --huggingface beside a release's flags": (
        ["import-checkpoint", "--huggingface", "{dir}", "--spm", "{file}", "--output", "{dir}/model"],
        "--huggingface reads one directory; drop --spm"),
    "import-checkpoint, a release without --spm": (
        ["import-checkpoint", "--checkpoint", "{dir}/model.ckpt", "--config", "{file}", "--output", "{dir}/model"],
        "an original release needs --spm as well (or pass --huggingface DIR)"),
    "import-checkpoint, a missing --config": (
        ["import-checkpoint", "--checkpoint", "{dir}/model.ckpt", "--config", "{dir}/missing.json", "--spm", "{file}",
         "--output", "{dir}/model"], "--config '{dir}/missing.json' does not exist"),
    "plan for this CPU, an unknown --set key": (["plan", "--device", "cpu", "--set", "bogus=1"],
                                                "--set bogus: no such field in ModelConfig or TrainConfig"),
    "plan, a missing --init-checkpoint": (["plan", "--init-checkpoint", "{dir}/missing"],
                                          "--init-checkpoint '{dir}/missing' does not exist"),
    "score, a missing --input": (["score", "--model-dir", "{dir}", "--input", "{dir}/missing.txt"],
                                 "--input '{dir}/missing.txt' does not exist"),
    "score, a bad setting": (["score", "--model-dir", "{dir}", "--input", "{file}", "--batch-size", "0"],
                             "batch_size must be positive, got 0 (set by --batch-size)"),
    "generate, a missing --model-dir": (["generate", "--model-dir", "{dir}/missing", "--prompt", "hi"],
                                        "--model-dir '{dir}/missing' does not exist"),
    "generate, a bad setting": (["generate", "--model-dir", "{dir}", "--prompt", "hi", "--max-new-tokens", "0"],
                                "max_new_tokens must be in 1..4096, got 0 (set by --max-new-tokens)"),
    "inspect, a directory without manifest": (["inspect", "{dir}"], "DATA_DIR {dir}: {dir}/manifest.json not found"),
    "inspect, --set without --permutation": (["inspect", "{dir}", "--set", "seq_len=64"],
                                             "--config and --set give the training settings of --permutation"),
    "inspect, an unknown --set key": (["inspect", "{dir}", "--permutation", "0", "--set", "bogus=1"],
                                      "--set bogus: no such field in ModelConfig or TrainConfig"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_usage_error_is_reported_before_tensorflow_loads(tmp_path, case):
    argv, said = CASES[case]
    (tmp_path / "file.tsv").write_text("text\tlabel\na\t0\n")
    fill = lambda text: text.format(dir=tmp_path, file=tmp_path / "file.tsv")
    child = subprocess.run([sys.executable, "-c", CHILD, *map(fill, argv)], cwd=REPO, capture_output=True,
                           text=True, timeout=120)
    assert child.stdout.split() == ["2", "False"], child.stderr  # exit status 2, TensorFlow never imported
    [line] = child.stderr.splitlines()
    assert line.startswith(f"xlnet {argv[0]}: error: ") and fill(said) in line, line
