"""The test run itself (tests/conftest.py), as `make test` runs it (pytest-xdist, two workers): it opens
without TensorFlow's C++ start-up lines, and its workers end without a full collection of their heaps
after they have reported finished (execnet sends a worker that takes more than 5 s to end a SIGINT,
which surfaced as a KeyboardInterrupt in JAX's gc callback closing the run). One real run of two tests,
with a probe plugin that times the collection pytest's unconfigure runs in each worker."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.bundled_data import REPO

PROBE = """
import gc, json, os, time
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        started = time.perf_counter()
        gc.collect()
        with open(os.path.join(os.environ["PROBE_DIR"], f"{os.getpid()}.json"), "w") as file:
            json.dump({"frozen": gc.get_freeze_count(), "seconds": time.perf_counter() - started}, file)
"""
TESTS = ["tests/trainer/runtime/test_goodput.py::test_a_heartbeat_before_the_last_record_loses_nothing_more",
         "tests/trainer/runtime/test_goodput.py::test_the_breakdown_lists_each_category_with_its_share_largest_first"]


@pytest.fixture(scope="module")
def test_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """(the run, each worker's probe: objects frozen and seconds of the full collection at unconfigure)."""
    probe = tmp_path_factory.mktemp("probe")
    (probe / "gc_probe.py").write_text(PROBE)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTEST_") and name != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(PYTHONPATH=str(probe), PROBE_DIR=str(probe))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "gc_probe", "-p", "no:cacheprovider",
                          *TESTS], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return run, [json.loads(path.read_text()) for path in probe.glob("*.json")]


@pytest.mark.slow  # 20-40 s: a pytest run of three processes, each importing TensorFlow
def test_the_test_run_opens_without_tensorflow_start_up_lines(test_run):
    run, _ = test_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    output = run.stdout + run.stderr
    assert not [line for line in output.splitlines()
                if "absl::InitializeLog" in line or "cuInit" in line or line.startswith(("I0000", "W0000", "E0000"))]


@pytest.mark.slow  # shares the run above
def test_a_worker_ends_without_walking_its_heap_after_it_reported_finished(test_run):
    run, probes = test_run
    assert len(probes) == 2, run.stdout[-3000:]
    # the session's objects (TensorFlow's, Keras's: hundreds of thousands) frozen before the worker reported
    assert all(probe["frozen"] > 100_000 for probe in probes), probes
    assert all(probe["seconds"] < 0.2 for probe in probes), probes  # 0.8-1.1 s each before, two of them
    assert "PytestUnraisableExceptionWarning" not in run.stdout + run.stderr
