"""tests/support/xdist_groups.py: under ``-n 2 --dist loadgroup`` the tests of one ``xdist_group`` run on
one worker, so the module fixture they share is built once (it was built on both workers on pytest 9)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import pytest
from support.xdist_groups import apply_groups

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    apply_groups(config, items)
"""

# A grouped module whose fixture records the worker that builds it, and a module of other tests
# beside it, so that both workers have work while the group runs.
GROUPED = """
import os, time, pytest
pytestmark = pytest.mark.xdist_group("shared")

@pytest.fixture(scope="module")
def built():
    with open("built.txt", "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("n", range(8))
def test_grouped(built, n):
    time.sleep(0.1)
"""
OTHERS = """
import time, pytest

@pytest.mark.parametrize("n", range(8))
def test_other(n):
    time.sleep(0.1)
"""


def workers_of(tmp_path, modules: dict[str, str], names: tuple[str, ...]) -> dict[str, list[str]]:
    """Runs ``modules`` (file name -> text, beside the conftest) under ``-n 2 --dist loadgroup``; for each
    test function of ``names``, the workers ("[gw0]", "[gw1]") its passed cases ran on."""
    for name, text in {"conftest.py": CONFTEST, **modules}.items():
        (tmp_path / name).write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2", "--dist",
                          "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {name: [line.split()[0] for line in run.stdout.splitlines() if f"::{name}[" in line and "PASSED" in line]
            for name in names}


def test_a_groups_tests_run_on_one_worker_which_builds_their_module_fixture_once(tmp_path):
    workers = workers_of(tmp_path, {"test_grouped.py": GROUPED, "test_others.py": OTHERS}, ("test_grouped", "test_other"))
    grouped = workers["test_grouped"]
    assert len(grouped) == 8 and len(set(grouped)) == 1, workers
    assert set(grouped + workers["test_other"]) == {"[gw0]", "[gw1]"}, workers  # both workers had work
    assert (tmp_path / "built.txt").read_text().split() == [grouped[0].strip("[]")]


# An unmarked module whose module fixture is shared by its tests, beside one with nothing shared.
SHARED = """
import os, time, pytest

@pytest.fixture(scope="module")
def built():
    with open("built.txt", "a") as log:
        log.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("n", range(8))
def test_sharing(built, n):
    time.sleep(0.1)
"""


def test_unmarked_tests_sharing_a_module_fixture_run_on_one_worker_which_builds_it_once(tmp_path):
    workers = workers_of(tmp_path, {"test_shared.py": SHARED, "test_others.py": OTHERS}, ("test_sharing", "test_other"))
    sharing = workers["test_sharing"]
    assert len(sharing) == 8 and len(set(sharing)) == 1, workers
    assert set(sharing + workers["test_other"]) == {"[gw0]", "[gw1]"}, workers  # both workers had work
    assert (tmp_path / "built.txt").read_text().split() == [sharing[0].strip("[]")]
