"""TensorFlow's C++ start-up log is silenced (trainer/commands/tensorflow_startup.py), the lines that
come after the import included: oneDNN's once-per-process "oneDNN supports DT_INT32 only on platforms
with AVX-512" (logged at ERROR level by the first int32 transpose, in tf.data or a train step) and the
failed cuInit. Nothing else is hidden: the command's own stderr, tracebacks and C++ lines written
after start-up all show, and the settings that must precede TensorFlow's first op still apply.
(A user-set TF_CPP_MIN_LOG_LEVEL leaving the log untouched: tests/test_xlnet_cli.py.)"""
from __future__ import annotations

import subprocess

import pytest

from support.processes import output_of, start

# After the quiet import: the kernels that log oneDNN's notice (eager, in a tf.function, in tf.data),
# the settings `train.deterministic` makes before the first op, then a C++-style line, a message of
# the command's own and a traceback, all written to stderr.
CHILD = r"""
import os, sys
from trainer.commands.tensorflow_startup import import_tensorflow_quietly

import_tensorflow_quietly()
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)  # RuntimeError once an eager op has run
tf.config.threading.set_inter_op_parallelism_threads(1)
ints = tf.reshape(tf.range(6), [2, 3])
tf.transpose(ints)
tf.function(lambda x: tf.transpose(x, [1, 0]))(ints)
list(tf.data.Dataset.from_tensors(ints).map(tf.transpose))
sys.stderr.flush()
os.write(2, b"E0000 00:00:0.0 1 fake.cc:1] a C++ error after start-up\n")
print("xlnet test: error: the command's own message", file=sys.stderr)
raise SystemExit(f"a traceback follows: {1 / 0}")
"""


def test_no_tensorflow_log_line_before_or_after_start_up_and_real_errors_still_show():
    process = start(["-c", CHILD], env={"TF_CPP_MIN_LOG_LEVEL": None}, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE)
    err = output_of(process)[0]
    assert process.returncode == 1, err
    lines = err.splitlines()
    assert not [line for line in lines if "oneDNN" in line or "cuInit" in line or line.startswith(("I0000", "W0000"))
                or "absl::InitializeLog" in line], err
    assert [line for line in lines if line.startswith("E0000")] == \
           ["E0000 00:00:0.0 1 fake.cc:1] a C++ error after start-up"], err
    assert "xlnet test: error: the command's own message" in lines, err
    assert "Traceback (most recent call last):" in err and "ZeroDivisionError: division by zero" in err, err


@pytest.mark.slow
def test_xlnet_inspect_permutation_prints_no_tensorflow_line(tiny_data_dir):
    """The command a user saw it in: `xlnet inspect DATA --permutation 0` runs the trainer's tf.data reader
    (slow: about 10 s on a busy 2-core machine, with the data fixture)."""
    process = start(["xlnet_cli.py", "inspect", tiny_data_dir, "--permutation", "0", "--records", "1"],
                    env={"TF_CPP_MIN_LOG_LEVEL": None}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert err == "", err
    assert "factorisation order" in out


# Where JAX is installed: TensorFlow imported the commands' way, then JAX imported by the caller.
WITHOUT_JAX = r"""
import sys
from trainer.commands.tensorflow_startup import import_tensorflow_quietly

import_tensorflow_quietly()
import keras
after_tensorflow = "jax" in sys.modules
import jax.numpy
print(after_tensorflow, float(jax.numpy.ones(2).sum()))
"""


@pytest.mark.parametrize("log_level", [None, "2"], ids=["quiet import", "user's TF_CPP_MIN_LOG_LEVEL"])
def test_tensorflow_is_imported_without_jax_and_jax_still_imports_after(log_level):
    pytest.importorskip("jax")
    process = start(["-c", WITHOUT_JAX], env={"TF_CPP_MIN_LOG_LEVEL": log_level}, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert out.split() == ["False", "2.0"], err
