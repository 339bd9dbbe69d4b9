"""Run a function under another Keras backend, in a fresh Python process, with NumPy arrays in and out.

Keras picks its backend once, at import, so a test process that runs TensorFlow computes the JAX side in
a child process: ``run_on_backend(compute, inputs)`` calls ``compute(inputs, **options)`` there, with
``KERAS_BACKEND=jax`` and JAX's float32 matmuls at "highest" precision (exact float32, as TensorFlow
computes them on the CPU), and returns what it returned. Arrays travel as .npz files in a temporary
folder; a failure in the child fails the test with the child's stderr.

``compute`` must be a module-level function of a file the child can import by its path (a test module,
say): ``compute(inputs: dict[str, np.ndarray], **options) -> dict[str, array-like]``. The child imports
that file under the other backend, so the file must not import TensorFlow (or anything that does) at
module level; import it inside the TensorFlow side's tests instead. ``options`` are JSON values
(sizes, flags, names).

    def compute(inputs, rate):                      # runs under JAX
        from trainer.layers.dropout import HashDropout
        return {"y": HashDropout(rate, seed=1)(inputs["x"], training=True)}

    jax = run_on_backend(compute, {"x": x}, rate=0.1)   # {"y": np.ndarray}
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from support.bundled_data import REPO

# The child: pins the backend and JAX's matmul precision before Keras is imported, loads the function's
# file by path, calls it, and saves what it returned.
CHILD = '''
import importlib.util, json, sys
folder, source, name = sys.argv[1:4]
try:
    import jax
    jax.config.update("jax_default_matmul_precision", "highest")
except ImportError:
    pass
import numpy as np
spec = importlib.util.spec_from_file_location("backend_function_module", source)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
with np.load(folder + "/inputs.npz") as inputs:
    arrays = {key: inputs[key] for key in inputs.files}
with open(folder + "/options.json") as options:
    result = getattr(module, name)(arrays, **json.load(options))
import keras
np.savez(folder + "/outputs.npz", **{key: keras.ops.convert_to_numpy(value) for key, value in result.items()})
'''


def run_on_backend(compute: Callable[..., Mapping[str, Any]], inputs: Mapping[str, np.ndarray], *,
                   backend: str = "jax", timeout: float = 300, env: Mapping[str, str] | None = None,
                   **options: Any) -> dict[str, np.ndarray]:
    """``compute(inputs, **options)`` computed in a fresh process with ``KERAS_BACKEND=backend``.

    Args:
      compute: a module-level function of an importable file (see the module docstring).
      inputs: NumPy arrays by name.
      backend: the Keras backend of the child process.
      timeout: seconds the child may run.
      env: variables added to the child's environment (e.g. ``{"JAX_PLATFORMS": "cuda"}``); by default
        JAX runs on the CPU.
      options: JSON values passed to ``compute`` as keyword arguments.
    Returns:
      What ``compute`` returned, each value as a NumPy array.
    Raises:
      AssertionError: the child failed; the message holds the end of its stderr.
    """
    source, name = inspect.getsourcefile(compute), compute.__name__
    if compute.__qualname__ != name:
        raise ValueError(f"{compute.__qualname__} is not a module-level function: the child cannot find it")
    path = [str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH")]
    environment = {**os.environ, "KERAS_BACKEND": backend, "JAX_DEFAULT_MATMUL_PRECISION": "highest",
                   "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "PYTHONPATH": os.pathsep.join(filter(None, path)), **(env or {})}
    with tempfile.TemporaryDirectory(prefix="backend-") as folder:
        np.savez(Path(folder) / "inputs.npz", **inputs)
        (Path(folder) / "options.json").write_text(json.dumps(options))
        child = subprocess.run([sys.executable, "-c", CHILD, folder, source, name], cwd=REPO, env=environment,
                               capture_output=True, text=True, timeout=timeout)
        assert child.returncode == 0, f"{name} failed under KERAS_BACKEND={backend}:\n{child.stderr[-5000:]}"
        with np.load(Path(folder) / "outputs.npz") as outputs:
            return {key: outputs[key] for key in outputs.files}


def module_level_imports(path: Path) -> set[str]:
    """The top-level packages a Python file imports at module level (not inside functions)."""
    tree = ast.parse(Path(path).read_text())
    imported = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    return imported | {node.module.split(".")[0] for node in tree.body
                       if isinstance(node, ast.ImportFrom) and node.module and not node.level}
