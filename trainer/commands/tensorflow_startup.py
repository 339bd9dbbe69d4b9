"""Importing TensorFlow without the C++ start-up noise every command would print first.

TensorFlow 2.21 logs through absl before its logging is configured: oneDNN notices, "could
not find cuda drivers", a failed cuInit on machines without a GPU, CPU instruction hints.
TF_CPP_MIN_LOG_LEVEL does not silence those lines, so the commands that need TensorFlow
(`xlnet train`, `xlnet finetune`, `xlnet export`, `xlnet import-checkpoint`, `xlnet inspect`,
`xlnet plan`) import it with the process's standard error captured, and pass on everything but
those known start-up lines.

One notice comes later, from the first kernel that oneDNN declines at run time: "oneDNN supports
DT_INT32 only on platforms with AVX-512. Falling back to the default Eigen-based implementation",
logged at ERROR level (so TF_CPP_MIN_LOG_LEVEL=2 lets it through) by the first tf.data pipeline or
step that transposes an int32 tensor, long after the import. TensorFlow logs it at most once per
process (one ``absl::call_once`` for every data type), so it is drawn out here, while standard
error is still captured, by running such a kernel once: an int32 (and a float16 and a bool)
transpose in a throwaway graph-mode ``Session``. A Session leaves the eager context uninitialised,
so the settings that must precede TensorFlow's first op (thread pools and op determinism for
train.deterministic, a multi-worker or TPU cluster) still apply. Standard error is redirected
during this function only: every later line, an error from TensorFlow's C++ side included, goes
out untouched.

A user who sets TF_CPP_MIN_LOG_LEVEL (to anything) gets TensorFlow's output untouched; otherwise
it is set to 2 (errors only) for the rest of the run.

The CPU allocator's statistics (the step log's ``peak_memory_bytes``) are turned on here too where
TensorFlow's default allocator keeps none (oneDNN off: CPUs without AVX-512): allocator_statistics_on.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile

# absl's INFO/WARNING lines ("I0000 00:00:..."), its "before InitializeLog" banner, CUDA probing
# errors on machines without a GPU, oneDNN's notice that it leaves a data type to Eigen, and the
# CPU feature guard's second line.
STARTUP_NOISE = re.compile(r"WARNING: All log messages before absl::InitializeLog|[IW]\d{4} \d\d:\d\d:"
                           r"|E\d{4} .*(cuInit|cuda|CUDA|oneDNN supports \w+ only on platforms with AVX-512)"
                           r"|To enable the following instructions:")


# TensorFlow's CPU allocator keeps statistics (tf.config.experimental.get_memory_info: a run's peak
# memory) only where it is oneDNN's allocator or the BFC allocator. TensorFlow turns oneDNN on by default
# only on CPUs with AVX-512: on others (an AMD EPYC, say) or with TF_ENABLE_ONEDNN_OPTS=0 the default
# allocator keeps none ("Allocator stats not available for device 'CPU:0'"), and the BFC allocator is
# asked for instead. Only there: where oneDNN is on its allocator stays, since the BFC allocator counts
# differently (a long-document step measured 141.9 MB under BFC, within the planner's 15% under
# oneDNN's), and the planner's CPU figures were checked against oneDNN's.
ALLOCATOR_STATISTICS = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}


def allocator_statistics_on() -> None:
    """Makes the CPU allocator keep statistics in this process and its children where TensorFlow's
    default one keeps none (oneDNN off), unless the user chose an allocator (a variable already set is
    left as it is). TensorFlow reads the variable when it creates its CPU device: call this after the
    import and before the first op."""
    if any(name in os.environ for name in ALLOCATOR_STATISTICS) or _onednn_on():
        return
    os.environ.update(ALLOCATOR_STATISTICS)


def _onednn_on() -> bool:
    """Whether TensorFlow runs with oneDNN in this process (its own answer, known once imported); where
    it cannot be asked, False, so that the BFC allocator keeps the statistics."""
    try:
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return False


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow with the CPU allocator's statistics on, probes its devices and draws out
    oneDNN's once-per-process data type notice, dropping the known start-up noise from stderr."""
    if "tensorflow" in sys.modules:
        allocator_statistics_on()
        return
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        _import_tensorflow_without_jax()
        allocator_statistics_on()
        return
    # Read once, at import: later C++ INFO and WARNING lines (input pipeline notices and the
    # like) stay quiet too; errors still show.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            tf = _import_tensorflow_without_jax()
            allocator_statistics_on()  # before the CPU device exists
            tf.config.list_physical_devices()  # the CUDA probe logs here, not at import
            _draw_out_onednn_notice(tf)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        lines = capture.read().decode("utf-8", errors="replace").splitlines(keepends=True)
    kept = "".join(line for line in lines if not STARTUP_NOISE.match(line))
    if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()


def _import_tensorflow_without_jax():
    """``import tensorflow``, keeping JAX out of the process. Where JAX is installed (the ``jax`` and
    ``test`` extras), TensorFlow Lite's utilities import it at TensorFlow's import, for a JAX-to-TFLite
    path no command takes: 0.4 s of every start and a second XLA runtime beside TensorFlow's. A
    ``None`` in ``sys.modules`` makes that import raise ImportError, which TensorFlow Lite expects
    when JAX is absent; the entry is removed afterwards, so a later ``import jax`` works as usual."""
    blocked = "jax" not in sys.modules
    if blocked:
        sys.modules["jax"] = None  # type: ignore[assignment]
    try:
        import tensorflow as tf
    finally:
        if blocked and sys.modules.get("jax", 0) is None:
            del sys.modules["jax"]
    return tf


def _draw_out_onednn_notice(tf) -> None:
    """Runs the kernels oneDNN leaves to Eigen once, in a graph-mode Session (which, unlike an
    eager op, does not initialise the eager context), so that its once-per-process notice is
    logged now, into the capture (about 20 ms). Nothing is lost if this fails: the notice would
    print later, as before."""
    try:
        import numpy as np

        graph = tf.Graph()
        with graph.as_default():  # fed, not constant: constant folding would remove the transposes
            inputs = {tf.compat.v1.placeholder(dtype, [1, 2]): np.zeros([1, 2], dtype.as_numpy_dtype)
                      for dtype in (tf.int32, tf.float16, tf.bool)}
            outputs = [tf.transpose(value) for value in inputs]
        config = tf.compat.v1.ConfigProto(use_per_session_threads=True, intra_op_parallelism_threads=1,
                                          inter_op_parallelism_threads=1)
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            session.run(outputs, inputs)
    except Exception:  # noqa: BLE001 - only a notice is at stake
        pass
