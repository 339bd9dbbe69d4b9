"""What each remat mode costs in step time, every mode side by side in one process.

benchmarks/memory.py measures each mode in a process of its own, which its peak memory needs; its
step times then differ by the process as much as by the mode (on this 2-core machine the same
line measured 5.7 s and 6.8 s). Here one process builds the controller `xlnet train` or
`xlnet finetune` would run (memory.py's cases: real data, real optimizer step) for every mode,
compiles each with one step, runs one untimed round, then times one step of each mode in turn,
round after round. Printed as JSON lines: one per round (each mode's step_s), then memory.py's
`remat_step_cost` line per mode: the median over rounds of its step time over none's of the round.

    .venv/bin/python benchmarks/remat_step_cost.py --case base --batch 2 --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from set_items import add_set_option  # noqa: E402  (benchmarks/set_items.py: the --set option)

import memory  # noqa: E402  (benchmarks/memory.py: the cases and how a case's controller is built)
from memory import MODES  # noqa: E402


def time_modes(case: str, batch: int, modes: list[str], rounds: int, workdir: str,
               sets: tuple[str, ...] = ()) -> list[dict]:
    """One row per round: the step time of every mode, timed one after the other."""
    runs = {}
    for mode in modes:
        controller = memory.build(case, mode, batch, workdir, sets)
        iterator = iter(controller.train_dataset())
        controller.run_steps(iterator, 1)  # traces and compiles
        runs[mode] = (controller, iterator)
    # After the other modes' controllers are built, a mode's next step took 3x its usual time
    # (measured at Base, batch 2): one untimed round first.
    for controller, iterator in runs.values():
        controller.run_steps(iterator, 1)
    rows = []
    for round_ in range(rounds):
        step_s = {}
        for mode, (controller, iterator) in runs.items():
            start = time.perf_counter()
            controller.run_steps(iterator, 1)
            step_s[mode] = round(time.perf_counter() - start, 3)
        rows.append({"case": case, "batch": batch, "round": round_, "step_s": step_s})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="base", choices=[name for name, case in memory.CASES.items()
                                                           if set(MODES) <= set(case[4])])
    parser.add_argument("--batch", type=int, default=2, help="micro-batch per step")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                        help="none is always measured: the others are compared with it")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds, one step of each mode per round")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-memory-benchmark"),
                        help="where the preprocessed data and the model directories go")
    add_set_option(parser, "more --set items for the case (e.g. n_layer=1 for a smoke run)")
    args = parser.parse_args()
    for flag, value in (("--batch", args.batch), ("--rounds", args.rounds)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    os.makedirs(args.workdir, exist_ok=True)
    modes = ["none"] + [mode for mode in args.modes if mode != "none"]
    rows = time_modes(args.case, args.batch, modes, args.rounds, args.workdir, tuple(args.sets))
    step_times = {(args.case, args.batch, mode): [row["step_s"][mode] for row in rows] for mode in modes}
    for row in rows + memory.step_costs(step_times):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
