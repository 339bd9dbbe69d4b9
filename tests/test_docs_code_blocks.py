"""Every Python code block of the docs (docs/*.md, README.md) runs as printed.

The blocks of one document run in order in one fresh process, so a block may use what the blocks before
it defined; a block whose first line is ``# KERAS_BACKEND=jax ...`` runs with the blocks of its document
that say the same, in a process of that backend. The working directory holds the bundled tiny model
directory's files (``spiece.model``, ``special_ids.json``), so that a block may read them as a user
reads their own. A block that needs what a test cannot have (a Cloud Storage bucket, the network, a
released checkpoint, a model exported beforehand) says so on its first line,
``# not run by the docs test: REASON``, and is left out.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest
from support.bundled_data import REPO

NOT_RUN = "# not run by the docs test:"
FILES_IN_THE_WORKING_DIRECTORY = ("spiece.model", "special_ids.json")
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)  # a block may be indented (in a list item)


class Block(NamedTuple):
    doc: str
    line: int
    backend: str
    code: str


def python_blocks() -> list[Block]:
    """The ```python blocks of docs/*.md and README.md, with the Keras backend each runs on."""
    blocks = []
    for path in sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            code = textwrap.dedent(match.group(2))
            backend = "jax" if code.startswith("# KERAS_BACKEND=jax") else "tensorflow"
            blocks.append(Block(path.relative_to(REPO).as_posix(), text[:match.start()].count("\n") + 2, backend,
                                code))
    return blocks


def groups() -> dict[str, list[Block]]:
    """The blocks to run, by "DOC (BACKEND)": each group one process."""
    out: dict[str, list[Block]] = {}
    for block in python_blocks():
        if not block.code.startswith(NOT_RUN):
            out.setdefault(f"{block.doc} ({block.backend})", []).append(block)
    return out


# The process that runs a group: each block compiled under its document's name and line, so that a failure
# names the block.
RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for doc, line, code in json.load(sys.stdin):
    print(f"--- {doc}:{line}", flush=True)
    exec(compile("\\n" * (line - 1) + code, doc, "exec"), namespace)
"""


def run_group(blocks: list[Block], workdir: Path) -> subprocess.CompletedProcess:
    import json

    for name in FILES_IN_THE_WORKING_DIRECTORY:
        (workdir / name).symlink_to(REPO / "tests" / "fixtures" / "legacy" / "pretrained" / name)
    env = {**os.environ, "KERAS_BACKEND": blocks[0].backend, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3",
           "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps([(b.doc, b.line, b.code) for b in blocks]),
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=600)


# The groups that train or compile a step take longer than a few seconds.
SLOW_GROUPS = {"docs/model-api.md (jax)", "docs/model-api.md (tensorflow)"}


@pytest.mark.parametrize("group", [pytest.param(name, marks=[pytest.mark.slow] if name in SLOW_GROUPS else [])
                                   for name in sorted(groups())])
def test_each_documents_python_blocks_run_as_printed(group, tmp_path):
    result = run_group(groups()[group], tmp_path)
    assert result.returncode == 0, f"{group}: {result.stdout[-2000:]}\n{result.stderr[-4000:]}"


def test_a_block_left_out_says_why_and_the_runner_finds_the_others():
    blocks = python_blocks()
    left_out = [block for block in blocks if block.code.startswith(NOT_RUN)]
    assert all(len(block.code.splitlines()[0]) > len(NOT_RUN) + 10 for block in left_out)  # a reason is given
    assert len(blocks) >= 16 and len(blocks) - len(left_out) >= 9
