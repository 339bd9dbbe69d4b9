"""Does Transformer-XL memory help? The tiny model trained with and without it on the bundled corpus.

For every seed, two runs that are identical (data, seed, steps, schedule) except mem_len: the
preset's 64 versus 0. Prints one JSON line per run (train loss per 100 steps, the first step
whose 100-step mean falls below the unigram plateau, valid loss / accuracy / perplexity on the
valid split with memory carried across eval steps from zero; for the run with memory also the
valid loss of its weights evaluated with mem_len=0) and a summary line with the difference
per seed.

Why 3000 steps: the tiny model first sits at the unigram loss (about 6.4) and leaves that
plateau after 500 to 1200 steps, at a step that varies with the seed and with mem_len. Runs
stopped near that point compare how early each left it, not what memory adds; at 3000 steps
both runs have left it for more than 1500 steps.

    .venv/bin/python benchmarks/memory_benefit.py                      # seed 0, 3000 steps, ~13 min
    .venv/bin/python benchmarks/memory_benefit.py --seeds 0 1 2
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


PLATEAU = 6.0  # below the unigram loss (~6.4): the model has started to use its context


def make_trainer(data_dir: str, model_dir: str, mem_len: int, steps: int, eval_steps: int, batch: int,
                 learning_rate: float, seed: int, init_checkpoint: str | None = None):
    """A Trainer of the tiny preset on the bundled data with this benchmark's schedule."""
    from tfrecords.manifest import load_manifest
    from trainer.train_config import resolve_configs
    from trainer.training_loop import Trainer
    import tensorflow as tf

    manifest = load_manifest(data_dir)
    model, train, _ = resolve_configs("tiny", None, [
        f"mem_len={mem_len}", f"train_steps={steps}", "steps_per_loop=50", f"warmup_steps={max(steps // 10, 1)}",
        f"train_batch_size={batch}", f"learning_rate={learning_rate}",
        f"checkpoint_every={steps}", "eval_every=0", f"eval_steps={eval_steps}", f"seed={seed}"])
    model = model.replace(vocab_size=int(manifest.vocab["vocab_size"]))
    return Trainer(model, train, manifest=manifest, model_dir=model_dir, strategy=tf.distribute.get_strategy(),
                   init_checkpoint=init_checkpoint, log=lambda line: None)


def train_once(data_dir: str, model_dir: str, mem_len: int, steps: int, eval_steps: int, batch: int,
               learning_rate: float, seed: int) -> dict:
    from trainer.training_loop import STEP_LOG
    import numpy as np

    trainer = make_trainer(data_dir, model_dir, mem_len, steps, eval_steps, batch, learning_rate, seed)
    began = time.time()
    trainer.train()
    seconds = time.time() - began
    metrics = trainer.evaluate()
    losses = [json.loads(line)["loss"] for line in (Path(model_dir) / STEP_LOG).read_text().splitlines()]
    window = min(20, len(losses))
    per_100 = [round(float(np.mean(losses[i:i + 100])), 3) for i in range(0, len(losses), 100)]
    below = [100 * (i + 1) for i, loss in enumerate(per_100) if loss < PLATEAU]
    return {"benchmark": "memory_benefit", "seed": seed, "mem_len": mem_len, "steps": steps,
            "train_batch_size": trainer.config.train_batch_size, "seq_len": trainer.config.seq_len,
            "train_loss_first_20": round(float(np.mean(losses[:window])), 4),
            "train_loss_last_20": round(float(np.mean(losses[-window:])), 4),
            "train_loss_per_100_steps": per_100, f"first_step_below_{PLATEAU}": below[0] if below else None,
            "valid_loss": round(metrics["loss"], 4), "valid_accuracy": round(metrics["accuracy"], 4),
            "valid_perplexity": round(metrics["perplexity"], 2), "eval_steps": eval_steps,
            "train_seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-steps", type=int, default=40)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-bench"))
    parser.add_argument("--mem-len", type=int, default=64, help="memory length of the run with memory")
    parser.add_argument("--batch", type=int, default=8, help="global train batch (rows)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()

    from bundled_data import prepare

    data_dir = prepare(args.workdir)
    differences = {}
    for seed in args.seeds:
        results = {}
        for mem_len in (args.mem_len, 0):
            model_dir = tempfile.mkdtemp(prefix=f"mem{mem_len}-seed{seed}-", dir=args.workdir)
            results[mem_len] = train_once(data_dir, model_dir, mem_len, args.steps, args.eval_steps, args.batch,
                                          args.learning_rate, seed)
            if mem_len:
                # The same weights evaluated without memory: does the model use what memory carries?
                blind = make_trainer(data_dir, tempfile.mkdtemp(prefix="blind-", dir=args.workdir), 0, args.steps,
                                     args.eval_steps, args.batch, args.learning_rate, seed, init_checkpoint=model_dir)
                results[mem_len]["valid_loss_same_weights_without_memory"] = round(blind.evaluate()["loss"], 4)
            print(json.dumps(results[mem_len]), flush=True)
        differences[seed] = {"valid_loss_with_memory": results[args.mem_len]["valid_loss"],
                             "valid_loss_same_weights_without_memory":
                                 results[args.mem_len]["valid_loss_same_weights_without_memory"],
                             "valid_loss_without_memory": results[0]["valid_loss"],
                             "difference": round(results[0]["valid_loss"] - results[args.mem_len]["valid_loss"], 4)}
    print(json.dumps({"benchmark": "memory_benefit_summary", "steps": args.steps, "per_seed": differences,
                      "mean_difference": round(sum(d["difference"] for d in differences.values()) / len(differences), 4),
                      "memory_helps_every_seed": all(d["difference"] > 0 for d in differences.values())}), flush=True)


if __name__ == "__main__":
    main()
