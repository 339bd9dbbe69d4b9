"""Goodput of the two training engines side by side: the same `xlnet train` run (the tiny preset on the
bundled corpus, see bundled_data.py) on TensorFlow and on JAX, each a process of its own, in turn.

Prints one JSON line per run: the engine, the steps, the wall time and where it went (goodput.json's
categories: startup, compile, productive, checkpoint, evaluation, other), the productive steps/s, and
for the JAX engine the share of the productive time its steps waited for input (``input_wait_seconds``
per loop of steps, from TensorBoard's train events; TensorFlow's input runs inside its loop and is not
told apart).

    .venv/bin/python benchmarks/engine_goodput.py --steps 300 --rounds 1
    .venv/bin/python benchmarks/engine_goodput.py --steps 6 --engines jax   # a smoke run

``--data DIR`` trains on a data directory preprocessed before (its record shapes given with ``--set``)
instead of preprocessing the bundled corpus: a smoke run on data that is already there.

The JAX runs keep their compiled programs in a compilation cache of this benchmark's own, empty when
it starts (``JAX_COMPILATION_CACHE_DIR`` under the work directory): the first round's JAX run compiles
(``"compilation_cache": "cold"``), the later rounds' load what it compiled, as a restarted or preempted
run does (``"warm"``). TensorFlow keeps no such cache.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from set_items import set_flags  # noqa: E402  (benchmarks/set_items.py: the --set option)

from trainer.runtime.model_dir import ModelDirectory  # noqa: E402  (the step log and events read back)

ENGINES = ("tensorflow", "jax")


def run_engine(engine: str, data: str, model_dir: Path, steps: int, settings: list[str],
               env: dict[str, str] | None = None) -> dict:
    """One `xlnet train --backend ENGINE` run of ``steps`` steps (``env`` added to its environment); its
    goodput record and step log, summarised."""
    sets = set_flags([f"train_steps={steps}", "eval_every=0", *settings])
    command = [sys.executable, "-m", "xlnet_cli", "train", "--backend", engine, "--data", data, "--model-dir",
               str(model_dir), "--preset", "tiny", *sets]
    started = time.perf_counter()
    out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False,
                         env=dict(os.environ, KERAS_BACKEND=engine, TF_CPP_MIN_LOG_LEVEL="3", **(env or {})))
    wall = time.perf_counter() - started
    if out.returncode:
        raise RuntimeError(f"{engine} run failed: {out.stderr[-3000:]}")
    record = json.loads((model_dir / "goodput.json").read_text())
    rows = [json.loads(line) for line in (model_dir / "train_steps.jsonl").read_text().splitlines()]
    seconds = record["seconds"]
    # one figure per loop of steps (TensorBoard's train writer has one event per loop); the first loop compiles
    waits = ModelDirectory(str(model_dir)).scalars("train", "input_wait_seconds")
    waits = {step: value for step, value in waits.items() if step > 1}
    productive_steps = record["productive_steps"]
    line: dict = {"engine": engine, "steps": steps, "wall_s": round(wall, 1), "goodput": round(record["goodput"], 4),
                  "total_s": round(record["total_seconds"], 2),
            **{f"{name}_s": round(value, 2) for name, value in seconds.items()},
            "productive_steps_per_s": round(productive_steps / seconds["productive"], 2)
            if seconds["productive"] else None,
            "last_loss": rows[-1]["loss"]}
    if waits:  # the loops' waits, over the productive loops' time (goodput.json keeps them apart as "input")
        line["input_wait_share_of_productive"] = round(
            sum(waits.values()) / max(seconds["productive"] + seconds.get("input", 0.0), 1e-9), 4)
    return line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps of each run")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each engine, in turn (A B A B)")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated: tensorflow, jax")
    parser.add_argument("--workdir", default=None, help="where the bundled data directory is kept (default: a "
                                                        "temporary directory)")
    parser.add_argument("--data", default=None, help="a preprocessed data directory to train on instead of the "
                                                     "bundled corpus (its seq_len and the like with --set)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="more `xlnet train --set` settings, the same for both engines")
    args = parser.parse_args()
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    unknown = [name for name in engines if name not in ENGINES]
    if unknown or args.steps < 2 or args.rounds < 1:
        parser.error(f"--engines takes {', '.join(ENGINES)}; --steps at least 2; --rounds at least 1")

    from bundled_data import prepare

    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(args.workdir or scratch)
        data = args.data or prepare(workdir / "bundled")
        cache = workdir / "jax-compilation"
        if cache.exists():
            shutil.rmtree(cache)  # the first JAX run compiles: a cold start, whatever an earlier benchmark left
        for round_index in range(args.rounds):
            for engine in engines:
                model_dir = workdir / f"model-{engine}-{round_index}"
                jax_cache = {"JAX_COMPILATION_CACHE_DIR": str(cache)} if engine == "jax" else {}
                warm = cache.exists() and any(cache.iterdir())
                line = run_engine(engine, data, model_dir, args.steps,
                                  [f"checkpoint_every={max(args.steps // 3, 1)}", *args.settings], env=jax_cache)
                if engine == "jax":
                    line["compilation_cache"] = "warm" if warm else "cold"
                print(json.dumps({"round": round_index + 1, **line}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
