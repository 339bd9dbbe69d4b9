"""A fine-tuning input file on storage that does not answer (no network, a host that cannot be
resolved) is exit status 3, one line naming the file and saying the command line may be right;
a path that is wrong stays a usage error, exit status 2 (trainer/inputs/text_files.py, the rule of
tfrecords/tensorflow_errors.py is_unreachable shared with trainer/runtime/storage.py)."""
from __future__ import annotations

import re
import subprocess

import pytest
import tensorflow as tf

from tfrecords.errors import EXIT_DATA, EXIT_USAGE, exit_code
from trainer.inputs.text_files import FinetuneDataError, InputUnreachableError, input_failure, read_text

from support.bundled_data import SMALL_DATA_DIR
from support.processes import output_of, start
from support.unreachable_storage import unreachable_gcs_environment

RESOLVE_FAILED = ("Error executing an HTTP request: libcurl code 6 meaning 'Could not resolve hostname', error "
                  "details: Could not resolve host: storage.googleapis.com")


def test_a_host_that_cannot_be_resolved_is_unreachable_input_with_status_3():
    error = input_failure("gs://b/train.csv", "cannot read", tf.errors.FailedPreconditionError(None, None,
                                                                                             RESOLVE_FAILED))
    assert isinstance(error, InputUnreachableError) and exit_code(error) == EXIT_DATA
    assert str(error) == (f"gs://b/train.csv cannot be reached: {RESOLVE_FAILED} (no network, or the storage "
                          "service is down; the command line may be right, try again later)")


def test_a_missing_local_file_stays_a_usage_error(tmp_path):
    with pytest.raises(FinetuneDataError, match="cannot read") as raised:
        read_text(str(tmp_path / "missing.csv"))
    assert exit_code(raised.value) == EXIT_USAGE


@pytest.mark.slow  # a TensorFlow process: 10 s
def test_xlnet_finetune_with_train_on_unreachable_storage_exits_3_with_one_line(tmp_path):
    environment, closed = unreachable_gcs_environment()
    (tmp_path / "eval.csv").write_text("text,label\na,x\nb,y\n")
    args = ["xlnet_cli.py", "finetune", "--task", "classification", "--train", "gs://xlnet-unreachable/train.csv",
            "--eval", str(tmp_path / "eval.csv"), "--model-dir", str(tmp_path / "model"), "--preset", "tiny",
            "--vocab", str(SMALL_DATA_DIR / "spiece.model")]
    process = start(args, env={**environment, "TF_CPP_MIN_LOG_LEVEL": None}, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE)
    [err] = output_of(process, timeout=120)
    assert process.returncode == EXIT_DATA, err
    assert "Traceback" not in err
    assert re.fullmatch(
        re.escape("xlnet finetune: error: gs://xlnet-unreachable/train.csv cannot be reached: All 1 retry attempts "
                  "failed. The last failure: Error executing an HTTP request: libcurl code 7 meaning 'Could not "
                  f"connect to server', error details: Failed to connect to 127.0.0.1 port {closed} after ")
        + r"\d+ ms" + re.escape(": Could not connect to server (no network, or the storage service is down; the "
                                 "command line may be right, try again later)"), err.splitlines()[-1]), err
    assert not (tmp_path / "model").exists()  # refused after the run lock: the directory it made removed
