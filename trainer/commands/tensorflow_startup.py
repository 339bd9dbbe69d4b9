"""Importing TensorFlow without the C++ start-up noise every command would print first.

TensorFlow 2.21 logs through absl before its logging is configured: oneDNN notices, "could
not find cuda drivers", a failed cuInit on machines without a GPU, CPU instruction hints.
TF_CPP_MIN_LOG_LEVEL does not silence those lines, so the commands that need TensorFlow
(`xlnet train`, `xlnet export`, `xlnet import-checkpoint`) import it with the process's
standard error captured, and pass on everything but those known start-up lines.

A user who sets TF_CPP_MIN_LOG_LEVEL (to anything) gets TensorFlow's output untouched; otherwise
it is set to 2 (errors only) for the rest of the run.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile

# absl's INFO/WARNING lines ("I0000 00:00:..."), its "before InitializeLog" banner, CUDA probing
# errors on machines without a GPU, and the CPU feature guard's second line.
STARTUP_NOISE = re.compile(r"WARNING: All log messages before absl::InitializeLog|[IW]\d{4} \d\d:\d\d:"
                           r"|E\d{4} .*(cuInit|cuda|CUDA)|To enable the following instructions:")


def import_tensorflow_quietly() -> None:
    """Imports TensorFlow and probes its devices, dropping the known start-up noise from stderr."""
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or "tensorflow" in sys.modules:
        return
    # Read once, at import: later C++ INFO and WARNING lines (input pipeline notices and the
    # like) stay quiet too; errors still show.
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            import tensorflow as tf

            tf.config.list_physical_devices()  # the CUDA probe logs here, not at import
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        lines = capture.read().decode("utf-8", errors="replace").splitlines(keepends=True)
    kept = "".join(line for line in lines if not STARTUP_NOISE.match(line))
    if kept:
        sys.stderr.write(kept)
        sys.stderr.flush()
