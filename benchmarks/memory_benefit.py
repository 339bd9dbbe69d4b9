"""Does Transformer-XL memory lower the valid loss? The tiny model trained with and without it.

For every seed, two runs on the bundled corpus that are identical (data, seed, steps, schedule,
deterministic kernels) except mem_len: 32 versus 0. Prints one JSON line per run: train loss per
500 steps, valid loss / accuracy / perplexity with memory carried across the valid split from
zero, and the valid loss by target position in the segment; for the run with memory also its
weights evaluated with mem_len=0. A summary line gives the difference per seed.

Why these shapes (tiny preset, seq_len 32, reuse_len 16, num_predict 5, no dropout, 12000 steps):
memory gives context to the first positions of a segment, which otherwise have none on their
left. At seq_len 128 those positions are few, the tiny model first sits for 500-2200 steps on
the unigram plateau (about 6.4) at a step that varies with the seed and with mem_len, and a run
short enough for this machine compares plateau exits instead of memory (README, Training
benchmarks). Without dropout both runs leave the plateau within a few hundred steps of each
other; memory, which slows the start, is ahead after about 4000 steps.

Each run is a process of its own, single-threaded and deterministic (train.deterministic), so
`--jobs 2` runs a seed's two runs side by side on two cores and a rerun gives the same numbers.

    .venv/bin/python benchmarks/memory_benefit.py                   # seeds 0 1 2, ~45 min on 2 cores
    .venv/bin/python benchmarks/memory_benefit.py --seeds 0 --steps 3000
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from set_items import add_set_option  # noqa: E402  (benchmarks/set_items.py: the --set option)


def run_settings(args: argparse.Namespace, seed: int, mem_len: int) -> list[str]:
    """The --set overrides of one run on top of the tiny preset."""
    return [f"seq_len={args.seq_len}", f"reuse_len={args.reuse_len}", f"perm_size={args.reuse_len}",
            f"num_predict={args.num_predict}", f"mem_len={mem_len}", f"dropout={args.dropout}",
            f"dropatt={args.dropout}", f"train_steps={args.steps}", "steps_per_loop=50",
            f"warmup_steps={max(args.steps // 10, 1)}", f"train_batch_size={args.batch}",
            f"eval_batch_size={args.batch}", f"learning_rate={args.learning_rate}",
            f"checkpoint_every={args.steps}", "eval_every=0", f"seed={seed}", "deterministic=true", *args.sets]


def make_trainer(data_dir: str, model_dir: str, settings: list[str], init_checkpoint: str | None = None):
    """A pretraining controller of the tiny preset with these overrides on the prepared data."""
    import tensorflow as tf

    from trainer.launch.pretraining_run import PretrainingRun, build_pretraining

    run = PretrainingRun(data=(data_dir,), model_dir=model_dir, preset="tiny", overrides=tuple(settings),
                         init_checkpoint=init_checkpoint)
    return build_pretraining(run, strategy=tf.distribute.get_strategy(), log=lambda line: None)


def loss_by_position(trainer, steps: int) -> dict:
    """Valid loss over ``steps`` batches with memory carried from zero, overall and by target position.

    Positions are bucketed [0, 2) (no left context without memory), [2, 4), [4, 8), [8, reuse_len)
    (the rest of the reuse context) and [reuse_len, seq_len) (A, B and the functional tokens).
    """
    import numpy as np
    import tensorflow as tf

    pretrainer, model = trainer.task.pretrainer, trainer.task.model_config
    seq_len, batch = trainer.config.seq_len, trainer.config.eval_batch_size

    @tf.function
    def step(features, mems):
        out = pretrainer.compute(features, mems, training=False)
        return out["cross_entropy"], out["correct"], out["target_positions"], out["target_valid"], out["new_mems"]

    mems = [tf.zeros([batch, model.mem_len, model.d_model]) for _ in range(model.n_layer)] if model.mem_len else None
    loss_sums, correct_sums, counts = np.zeros(seq_len), np.zeros(seq_len), np.zeros(seq_len)
    for features in trainer.task.reader("valid", batch).dataset().take(steps):
        loss, correct, positions, valid, new_mems = step({k: v[0] for k, v in features.items()}, mems)
        mems = new_mems if model.mem_len else None
        positions, valid = positions.numpy().ravel(), valid.numpy().ravel()
        np.add.at(loss_sums, positions, loss.numpy().ravel() * valid)
        np.add.at(correct_sums, positions, correct.numpy().ravel() * valid)
        np.add.at(counts, positions, valid)
    loss = float(loss_sums.sum() / counts.sum())
    bands = [(0, 2), (2, 4), (4, 8), (8, model.reuse_len), (model.reuse_len, seq_len)]
    return {"loss": round(loss, 4), "accuracy": round(float(correct_sums.sum() / counts.sum()), 4),
            "perplexity": round(float(np.exp(loss)), 2), "targets": int(counts.sum()),
            "loss_by_position": {f"{a}-{b}": round(float(loss_sums[a:b].sum() / counts[a:b].sum()), 4)
                                 for a, b in bands},
            "targets_by_position": {f"{a}-{b}": int(counts[a:b].sum()) for a, b in bands}}


def train_and_evaluate(job: dict) -> dict:
    """One run in a fresh process: train, then evaluate (and, with memory, evaluate its weights without)."""
    import numpy as np

    from trainer.runtime.distribution import make_deterministic
    from trainer.tasks.pretraining import STEP_LOG

    make_deterministic()
    trainer = make_trainer(job["data_dir"], job["model_dir"], job["settings"])
    began = time.time()
    trainer.train()
    seconds = time.time() - began
    losses = [json.loads(line)["loss"] for line in (Path(job["model_dir"]) / STEP_LOG).read_text().splitlines()]
    result = {"benchmark": "memory_benefit", "seed": job["seed"], "mem_len": job["mem_len"], "steps": len(losses),
              "seq_len": trainer.config.seq_len, "reuse_len": trainer.task.model_config.reuse_len,
              "train_batch_size": trainer.config.train_batch_size, "dropout": trainer.task.model_config.dropout,
              "train_loss_per_500_steps": [round(float(np.mean(losses[i:i + 500])), 3)
                                           for i in range(0, len(losses), 500)],
              "train_loss_last_1000": round(float(np.mean(losses[-1000:])), 4),
              "valid": loss_by_position(trainer, job["eval_steps"]), "train_seconds": round(seconds, 1)}
    if job["mem_len"]:
        # The same weights without memory: how much of the result is what memory carries?
        blind = make_trainer(job["data_dir"], tempfile.mkdtemp(prefix="blind-", dir=job["workdir"]),
                             [*job["settings"], "mem_len=0"], init_checkpoint=job["model_dir"])
        result["valid_same_weights_without_memory"] = loss_by_position(blind, job["eval_steps"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12000)
    parser.add_argument("--eval-steps", type=int, default=400, help="valid batches (400 x 16 rows x 5 targets)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-bench"))
    parser.add_argument("--mem-len", type=int, default=32, help="memory length of the run with memory")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--reuse-len", type=int, default=16)
    parser.add_argument("--num-predict", type=int, default=5)
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout and dropatt")
    parser.add_argument("--batch", type=int, default=16, help="global train and eval batch (rows)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side (one process and core each)")
    add_set_option(parser, "more --set items for every run, after the above (e.g. n_layer=1 for a smoke run)")
    args = parser.parse_args()

    from bundled_data import prepare

    data_dir = prepare(args.workdir, seq_len=args.seq_len, reuse_len=args.reuse_len, num_predict=args.num_predict)
    jobs = [{"seed": seed, "mem_len": mem_len, "data_dir": data_dir, "workdir": args.workdir,
             "eval_steps": args.eval_steps, "settings": run_settings(args, seed, mem_len),
             "model_dir": tempfile.mkdtemp(prefix=f"mem{mem_len}-seed{seed}-", dir=args.workdir)}
            for seed in args.seeds for mem_len in (args.mem_len, 0)]
    # spawn, not fork: every run gets a TensorFlow whose thread pools it can still configure
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = {}
        for job, result in zip(jobs, pool.map(train_and_evaluate, jobs)):
            results[job["seed"], job["mem_len"]] = result
            print(json.dumps(result), flush=True)
    per_seed = {}
    for seed in args.seeds:
        memory, none = results[seed, args.mem_len], results[seed, 0]
        per_seed[seed] = {"valid_loss_with_memory": memory["valid"]["loss"],
                          "valid_loss_same_weights_without_memory":
                              memory["valid_same_weights_without_memory"]["loss"],
                          "valid_loss_without_memory": none["valid"]["loss"],
                          "difference": round(none["valid"]["loss"] - memory["valid"]["loss"], 4)}
    differences = [d["difference"] for d in per_seed.values()]
    print(json.dumps({"benchmark": "memory_benefit_summary", "steps": args.steps, "mem_len": args.mem_len,
                      "per_seed": per_seed, "mean_difference": round(sum(differences) / len(differences), 4),
                      "memory_helps_every_seed": all(d > 0 for d in differences)}), flush=True)


if __name__ == "__main__":
    main()
