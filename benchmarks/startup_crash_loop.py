"""Starts `xlnet train` again and again (a tiny model, 2 steps each) and counts the starts that end in
a native crash: the loop that reproduces a rare segmentation fault at start-up (issue 40).

Every start runs with faulthandler on (``python -X faulthandler``), so a native crash prints the
Python stack of every thread; a start that ends on a signal (exit status < 0) or with a
"Fatal Python error" is a crash, and its stacks are kept. Prints one JSON line per start
({"start", "exit", "seconds", "crash"[, "stack"]}) and a summary line ({"starts", "crashes",
"exits", "median_s"}). Rare races need load: run it beside other work, or with ``--burners N``
(N processes spinning on the CPU for the loop's length).

    python benchmarks/startup_crash_loop.py --starts 50 --data tests/fixtures/legacy/data
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from set_items import set_flags  # benchmarks/set_items.py, beside this script

REPO = Path(__file__).resolve().parent.parent
# A two-layer model on the small data directory's record shapes (tests/support/bundled_data.py's
# SMALL_DATA): 2 steps, one loop, one checkpoint, no evaluation.
TINY = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
        "eval_batch_size=4", "steps_per_loop=2", "eval_steps=2", "warmup_steps=2", "eval_every=0", "train_steps=2",
        "checkpoint_every=2"]
SMALL_DATA_SHAPES = ["seq_len=64", "reuse_len=32", "num_predict=10", "perm_size=32"]


def burn(seconds: float) -> None:
    """Spins on one CPU for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def start_once(index: int, repo: Path, data: str, workdir: Path, shapes: list[str]) -> dict:
    """One `xlnet train` start into a new model directory: its exit status, time, and a crash's stacks."""
    settings = set_flags(TINY + shapes)
    command = [sys.executable, "-X", "faulthandler", str(repo / "xlnet_cli.py"), "train", "--data", data,
               "--model-dir", str(workdir / f"model-{index}"), "--preset", "tiny", *settings]
    began = time.monotonic()
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, errors="replace")
    result = {"start": index, "exit": done.returncode, "seconds": round(time.monotonic() - began, 1)}
    result["crash"] = done.returncode < 0 or "Fatal Python error" in done.stderr
    if result["crash"] or done.returncode != 0:
        result["stack"] = done.stderr.splitlines()[-60:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1, help="starts at a time")
    parser.add_argument("--burners", type=int, default=0, help="CPU-spinning processes beside the loop")
    parser.add_argument("--data", default=str(REPO / "tests" / "fixtures" / "legacy" / "data"))
    parser.add_argument("--repo", default=str(REPO), help="the checkout whose xlnet_cli.py is started")
    parser.add_argument("--demo-shapes", action="store_true",
                        help="the data has the tiny preset's record shapes (seq_len 128), not the small data's")
    args = parser.parse_args(argv)
    shapes = [] if args.demo_shapes else SMALL_DATA_SHAPES
    burners = [multiprocessing.Process(target=burn, args=(24 * 3600,), daemon=True) for _ in range(args.burners)]
    for each in burners:
        each.start()
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="startup-crash-") as workdir, ThreadPoolExecutor(args.jobs) as pool:
            runs = pool.map(lambda i: start_once(i, Path(args.repo), os.path.abspath(args.data), Path(workdir), shapes),
                            range(args.starts))
            for result in runs:
                results.append(result)
                print(json.dumps(result), flush=True)
    finally:
        for each in burners:
            each.terminate()
    exits = collections.Counter(str(r["exit"]) for r in results)
    print(json.dumps({"starts": len(results), "crashes": sum(r["crash"] for r in results), "exits": exits,
                      "median_s": statistics.median(r["seconds"] for r in results) if results else None,
                      "load_average": os.getloadavg()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
