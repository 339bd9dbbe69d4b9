"""Throughput of the whole training loop (reader included) against the bare train step.

For each shape: the input pipeline alone (examples/s of the stream-ordered reader), the
training loop fed by the reader (tokens/s, MFU against a float32 matmul peak measured next to
each timed loop with benchmarks/train_step.py's helpers, best peak kept), and the same loop
fed one constant batch already in memory (the bare step). reader_cost = 1 - bare step time /
loop step time (must stay under 5%);
input_headroom = reader examples/s / loop examples/s (must be >= 10). The two loops alternate
and the best of the repeats is kept, because the machine is shared.

Shapes (data: the bundled corpus at seq_len 128, vocabulary 8000, see bundled_data.py):
  tiny         the tiny preset as is (4 layers, d_model 128, batch 16)
  base-shaped  XLNet-Base widths (d_model 768, 12 heads x 64, d_inner 3072) with 4 layers,
               seq_len 128, mem_len 128, batch 8 (a full Base step takes too long on 2 cores)

    .venv/bin/python benchmarks/train.py [--shapes tiny base-shaped] [--steps 10] [--repeats 2]
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
from set_items import add_set_option  # noqa: E402  (benchmarks/set_items.py: the --set option)

SHAPES = {
    "tiny": [],
    "base-shaped": ["n_layer=4", "d_model=768", "n_head=12", "d_head=64", "d_inner=3072", "mem_len=128",
                    "train_batch_size=8"],
}


def reader_examples_per_sec(trainer, batches: int) -> float:
    """Records/s of the reader alone (parsing, perm seeds, batching included)."""
    dataset = trainer.task.reader("train", trainer.config.train_batch_size).dataset()
    iterator = iter(dataset)
    next(iterator)
    began = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * trainer.config.examples_per_step / (time.perf_counter() - began)


def constant_iterator(trainer):
    """The first batch of the reader, repeated from memory: the loop without input cost."""
    import tensorflow as tf

    first = next(iter(trainer.task.reader("train", trainer.config.train_batch_size).dataset()))
    first = {name: value.numpy() for name, value in first.items()}
    dataset = trainer.strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensors(first).repeat())
    return iter(dataset)


def seconds_per_step(trainer, iterator, steps: int) -> float:
    began = time.perf_counter()
    trainer.run_steps(iterator, steps)
    return (time.perf_counter() - began) / steps


def measure(shape: str, data_dir: str, workdir: str, steps: int, repeats: int, extra: tuple[str, ...] = ()
            ) -> list[dict]:
    import tensorflow as tf
    from train_step import matmul_peak, model_flops_per_step

    from trainer.runtime.throughput import utilisation

    from trainer.launch.pretraining_run import PretrainingRun, build_pretraining

    settings = (*SHAPES[shape], *extra, "train_steps=1000000", "eval_every=0", "checkpoint_every=1000000")
    trainer = build_pretraining(PretrainingRun(data=(data_dir,), model_dir=tempfile.mkdtemp(dir=workdir),
                                               preset="tiny", overrides=settings),
                                strategy=tf.distribute.get_strategy(), log=lambda line: None)
    model, train = trainer.task.model_config, trainer.config
    loop_iterator, bare_iterator = iter(trainer.train_dataset()), constant_iterator(trainer)
    trainer.run_steps(loop_iterator, 1)  # trace and compile both paths once
    trainer.run_steps(bare_iterator, 1)
    loop, bare, peak = float("inf"), float("inf"), 0.0
    for _ in range(repeats):  # the peak is re-measured next to the loops: the machine's load changes
        peak = max(peak, matmul_peak("float32"))
        loop = min(loop, seconds_per_step(trainer, loop_iterator, steps))
        bare = min(bare, seconds_per_step(trainer, bare_iterator, steps))
    input_rate = reader_examples_per_sec(trainer, max(50, steps * 5))
    examples = train.examples_per_step
    tokens = examples * train.seq_len
    flops = model_flops_per_step(model.n_layer, model.d_model, model.d_inner, train.seq_len, model.mem_len,
                                 train.num_predict, train.train_batch_size, model.vocab_size)
    shape_info = {"n_layer": model.n_layer, "d_model": model.d_model, "d_inner": model.d_inner,
                  "seq_len": train.seq_len, "mem_len": model.mem_len, "batch": train.train_batch_size,
                  "vocab": model.vocab_size, "precision": train.precision, "steps": steps, "repeats": repeats}
    loop_mfu, loop_peak = utilisation(flops / loop, peak)  # never above 1 (trainer/runtime/throughput.py)
    bare_mfu, bare_peak = utilisation(flops / bare, peak)
    return [
        {"benchmark": "matmul_peak", "shape": shape, "dtype": "float32", "flops_per_sec": round(peak),
         "peak_source": f"measured_matmul_peak (float32, 2048 x 2048, best of 6), timed before each of the "
                        f"{repeats} timed loops, the highest"},
        {"benchmark": "train_loop", "shape": shape, "tokens_per_sec": round(tokens / loop, 1),
         "examples_per_sec": round(examples / loop, 2), "mfu": round(loop_mfu, 4),
         "mfu_peak_flops": round(loop_peak), **shape_info},
        {"benchmark": "bare_train_step", "shape": shape, "tokens_per_sec": round(tokens / bare, 1),
         "examples_per_sec": round(examples / bare, 2), "mfu": round(bare_mfu, 4), "mfu_peak_flops": round(bare_peak)},
        {"benchmark": "input_pipeline", "shape": shape, "examples_per_sec": round(input_rate, 1)},
        {"benchmark": "reader_overhead", "shape": shape, "reader_cost": round(1.0 - bare / loop, 4),
         "input_headroom": round(input_rate / (examples / loop), 1)},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--steps", type=int, default=10, help="steps per timed loop")
    parser.add_argument("--repeats", type=int, default=2)
    add_set_option(parser, "more --set items for every shape (e.g. n_layer=1 for a smoke run)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-bench"))
    args = parser.parse_args()

    from bundled_data import prepare

    data_dir = prepare(args.workdir)
    for shape in args.shapes:
        for line in measure(shape, data_dir, args.workdir, args.steps, args.repeats, tuple(args.sets)):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
