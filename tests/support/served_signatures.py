"""Calling exported signatures in a fresh interpreter that imports only tensorflow and tensorflow_text,
as a client of the SavedModel would (tests of trainer/serving/)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any, Sequence

# argv[1]: JSON list of [name, SavedModel path, signature, inputs]; prints the outputs by name and
# the project modules the interpreter imported (none, for a SavedModel that needs no project code).
SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # registers the SentencePiece ops
    results = {}
    for name, path, signature, inputs in json.loads(sys.argv[1]):
        outputs = tf.saved_model.load(path).signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
        results[name] = {k: (v.numpy().astype(str) if v.dtype == tf.string else v.numpy()).tolist()
                         for k, v in outputs.items()}
    ours = sorted(m for m in sys.modules if m.split(".")[0] in ("trainer", "tfrecords", "pipeline"))
    print(json.dumps({"results": results, "project_modules": ours}))
""")


def served_in_a_fresh_process(requests: Sequence[Sequence[Any]], timeout: float = 600) -> dict[str, Any]:
    """``requests``: [name, SavedModel path (local or gs://, this process's environment passed on),
    signature, inputs as JSON-ready lists] -> {"results": {name: outputs as lists}, "project_modules": [...]}."""
    completed = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(list(requests))], capture_output=True,
                               text=True, timeout=timeout, cwd="/")
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.splitlines()[-1])
