"""The summary line of `benchmarks/accelerator_run.sh train`: what a JAX engine's run on a GPU measured,
read from its model directory (the step log, goodput.json), beside the planner's figure.

    python3 benchmarks/accelerator_train_summary.py MODEL_DIR

Prints one JSON object: steps, tokens/s and MFU (the mean of the loops after the first, which compiles),
goodput and its categories, the share of the productive time spent waiting for input, the devices'
peak memory against the planner's memory model for the run's configuration (trainer/planning/), and the
GPU's name. The issue's goals: MFU >= 0.40, input wait under 5% of step time, planner within 10%.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def summary(model_dir: str) -> dict:
    from trainer.configs.training import TrainConfig
    from trainer.models.config import ModelConfig
    from trainer.planning.memory import memory_breakdown
    from trainer.planning.plan import Workload
    from trainer.runtime.model_dir import ModelDirectory

    directory = ModelDirectory(model_dir)
    rows = directory.step_rows()
    if not rows:
        return {"model_dir": model_dir, "status": "no step logged (see train.txt)"}
    later = [row for row in rows if row["step"] > 1] or rows
    goodput = json.loads(Path(model_dir, "goodput.json").read_text())
    waits = directory.scalars("train", "input_wait_seconds")
    waits = {step: value for step, value in waits.items() if step > 1}
    model = ModelConfig.from_dict(json.loads(Path(model_dir, "model_config.json").read_text()))
    train = TrainConfig.from_dict(json.loads(Path(model_dir, "train_config.json").read_text()))
    workload = Workload(model, train)
    planned = memory_breakdown(model, workload.shape(train.train_batch_size).replace(eval_batch=0), train.remat).total
    peak = max((row["peak_memory_bytes"] or 0 for row in rows), default=0) or None
    productive = goodput["seconds"]["productive"]
    return {"model_dir": model_dir, "steps": rows[-1]["step"], "last_loss": rows[-1]["loss"],
            "tokens_per_sec": train.train_batch_size * train.seq_len * len(later) / productive if productive else None,
            "mfu_mean": sum(row["mfu"] for row in later) / len(later), "mfu_peak_source": rows[-1]["mfu_peak_source"],
            "goodput": goodput["goodput"], "seconds": goodput["seconds"],
            "input_wait_share": sum(waits.values()) / productive if productive else None,
            "peak_memory_bytes": peak, "planned_memory_bytes": planned,
            "planned_over_measured": planned / peak if peak else None}


if __name__ == "__main__":
    print(json.dumps(summary(sys.argv[1]), indent=1))
