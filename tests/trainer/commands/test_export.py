"""`xlnet export` as a command (trainer/commands/export.py): its help, and SIGINT, SIGTERM and
SIGKILL during a real export in a subprocess."""
from __future__ import annotations

import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import pytest
import tensorflow as tf

import xlnet_cli
from trainer.serving.publishing import LOCAL_STAGING_PREFIX, STAGING_PREFIX

from support.interop_models import tiny_config, write_model_dir
from support.processes import start, wait_for

MAX_LENGTH = 16  # one length bucket: the quickest export


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, vocab) -> Path:
    path = tmp_path_factory.mktemp("export") / "model"
    write_model_dir(str(path), tiny_config(vocab.vocab_size), vocab)
    return path


def start_export(model_dir: Path, output: Path | str) -> subprocess.Popen:
    """A real export in a child process, TensorFlow's logs left on (stderr apart from stdout)."""
    return start(["xlnet_cli.py", "export", "--model-dir", str(model_dir), "--output", str(output),
                  "--max-length", str(MAX_LENGTH)], env={"TF_CPP_MIN_LOG_LEVEL": None}, stderr=subprocess.PIPE)


def staging_directories(output: Path) -> list[Path]:
    return sorted(output.glob(f"{STAGING_PREFIX}*")) if output.is_dir() else []


def local_staging_directories(process: subprocess.Popen) -> list[Path]:
    """Where an export to a bucket stages: the local temporary directory, named with its pid."""
    return sorted(Path(tempfile.gettempdir()).glob(f"{LOCAL_STAGING_PREFIX}*-{process.pid}-*"))


def wait_for_staging(process: subprocess.Popen, find: Callable[[], list[Path]], timeout: float = 120.0) -> Path:
    """The export's staging directory, as soon as it exists (polled, the export still running)."""
    return wait_for(find, process, timeout=timeout, interval=0.01, what="staging")[0]


def versions(output: Path) -> list[str]:
    return sorted(path.name for path in output.iterdir() if path.name.isdigit()) if output.is_dir() else []


def test_help_says_both_casing_flags_default_to_what_training_recorded(capsys):
    with pytest.raises(SystemExit):
        xlnet_cli.main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    default = "(default: as training recorded, else detected from the vocabulary)"
    assert f"--uncased, --no-uncased lower-case input text, or not {default}" in text
    assert f"--cased keep the case of input text, the same as --no-uncased {default}" in text
    assert "(default: True)" not in text and "(default: False)" not in text


def test_help_states_the_exit_status_of_an_interrupted_export(capsys):
    with pytest.raises(SystemExit):
        xlnet_cli.main(["export", "--help"])
    assert "130 or 143 interrupted by SIGINT or SIGTERM" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_export_says_so_in_one_line_and_leaves_nothing(tmp_path, model_dir, signum, status):
    output = tmp_path / "serving"
    process = start_export(model_dir, output)
    wait_for_staging(process, lambda: staging_directories(output))
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.strip().splitlines()[-1] == \
        f"xlnet export: interrupted by {signal.Signals(signum).name}; nothing was published"
    assert staging_directories(output) == [] and versions(output) == []


@pytest.mark.slow  # 20 s; tests/trainer/serving/test_saved_model.py checks the removal rule fast
def test_the_staging_directory_of_a_killed_export_is_removed_by_the_next_export(tmp_path, model_dir):
    output = tmp_path / "serving"
    process = start_export(model_dir, output)
    staging = wait_for_staging(process, lambda: staging_directories(output))
    process.kill()  # SIGKILL: no handler runs, the staging directory stays
    process.communicate(timeout=120)
    assert staging.is_dir() and f"-{process.pid}-" in staging.name
    assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--output", str(output),
                           "--max-length", str(MAX_LENGTH)]) == 0
    assert staging_directories(output) == [] and versions(output) == ["1"]


@pytest.mark.slow  # 21 s; the local SIGTERM/SIGINT test covers the handler
def test_an_interrupted_export_to_a_bucket_leaves_nothing_there_nor_locally(model_dir, gcs_prefix):
    serving = f"{gcs_prefix.rstrip('/')}/serving"
    process = start_export(model_dir, serving)
    wait_for_staging(process, lambda: local_staging_directories(process))
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143 and "Traceback" not in stderr
    assert local_staging_directories(process) == []
    assert not tf.io.gfile.exists(serving) or tf.io.gfile.listdir(serving) == []
    assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--output", serving,
                           "--max-length", str(MAX_LENGTH)]) == 0  # the next export publishes version 1
    assert tf.io.gfile.exists(f"{serving}/1/saved_model.pb")


def test_the_export_line_shows_top_k_only_for_a_pretrained_model():
    # A classifier's export printed top_k=5, which decides nothing about the classify signature.
    from trainer.commands.export import export_line
    from trainer.serving.export_config import ExportConfig

    config = ExportConfig(max_length=64)
    assert export_line("m", config, None, True, "as trained") == \
        "exporting m (max_length=64, top_k=5, uncased text: as trained)"
    assert export_line("m", config, "classification", False, "as trained") == \
        "exporting m (max_length=64, cased text: as trained)"
    assert export_line("m", ExportConfig(max_length=64, max_segments=4, mem_len=64), "regression", True, "x") == \
        "exporting m (max_length=64, max_segments=4, mem_len=64, uncased text: x)"
