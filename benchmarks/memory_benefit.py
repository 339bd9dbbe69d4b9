"""Does Transformer-XL memory help? The tiny model trained twice on the bundled corpus.

Both runs are identical (data, seed, steps, schedule) except mem_len: the preset's 64 versus 0.
Prints one JSON line per run (train loss at the start and the end, valid loss / accuracy /
perplexity on the valid split with memory carried across eval steps from zero) and a summary
line with the difference. The loss curve shows the tiny model learning within a few hundred steps.

    .venv/bin/python benchmarks/memory_benefit.py --steps 300
    .venv/bin/python benchmarks/memory_benefit.py --steps 1000 --batch 8
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def train_once(data_dir: str, model_dir: str, mem_len: int, steps: int, eval_steps: int, batch: int,
               learning_rate: float) -> dict:
    from tfrecords.manifest import load_manifest
    from trainer.train_config import resolve_configs
    from trainer.training_loop import STEP_LOG, Trainer
    import numpy as np
    import tensorflow as tf

    manifest = load_manifest(data_dir)
    model, train, _ = resolve_configs("tiny", None, [
        f"mem_len={mem_len}", f"train_steps={steps}", "steps_per_loop=50", f"warmup_steps={max(steps // 10, 1)}",
        f"train_batch_size={batch}", f"learning_rate={learning_rate}",
        f"checkpoint_every={steps}", "eval_every=0", f"eval_steps={eval_steps}"])
    model = model.replace(vocab_size=int(manifest.vocab["vocab_size"]))
    trainer = Trainer(model, train, manifest=manifest, model_dir=model_dir,
                      strategy=tf.distribute.get_strategy(), log=lambda line: None)
    began = time.time()
    trainer.train()
    seconds = time.time() - began
    metrics = trainer.evaluate()
    losses = [json.loads(line)["loss"] for line in (Path(model_dir) / STEP_LOG).read_text().splitlines()]
    window = min(20, len(losses))
    return {"benchmark": "memory_benefit", "mem_len": mem_len, "steps": steps,
            "train_batch_size": train.train_batch_size, "seq_len": train.seq_len,
            "train_loss_first_20": round(float(np.mean(losses[:window])), 4),
            "train_loss_last_20": round(float(np.mean(losses[-window:])), 4),
            "valid_loss": round(metrics["loss"], 4), "valid_accuracy": round(metrics["accuracy"], 4),
            "valid_perplexity": round(metrics["perplexity"], 2), "eval_steps": eval_steps,
            "train_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--eval-steps", type=int, default=40)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-bench"))
    parser.add_argument("--mem-len", type=int, default=64, help="memory length of the run with memory")
    parser.add_argument("--batch", type=int, default=16, help="global train batch (rows)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    args = parser.parse_args()

    from bundled_data import prepare

    data_dir = prepare(args.workdir)
    results = {}
    for mem_len in (args.mem_len, 0):
        model_dir = tempfile.mkdtemp(prefix=f"mem{mem_len}-", dir=args.workdir)
        results[mem_len] = train_once(data_dir, model_dir, mem_len, args.steps, args.eval_steps, args.batch,
                                      args.learning_rate)
        print(json.dumps(results[mem_len]), flush=True)
    with_memory, without = results[args.mem_len], results[0]
    print(json.dumps({"benchmark": "memory_benefit_summary", "valid_loss_with_memory": with_memory["valid_loss"],
                      "valid_loss_without_memory": without["valid_loss"],
                      "difference": round(without["valid_loss"] - with_memory["valid_loss"], 4),
                      "memory_helps": with_memory["valid_loss"] < without["valid_loss"]}), flush=True)


if __name__ == "__main__":
    main()
