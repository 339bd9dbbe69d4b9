"""What a checkpoint costs the step loop, synchronous and asynchronous (``async_checkpoint``).

One process builds the controller `xlnet train` would run (trainer/launch/pretraining_run.py: the
bundled corpus preprocessed at the chosen seq_len, the real optimizer step) at the XLNet-Large shape:
24 layers, d_model 1024, 16 heads, d_inner 4096, float32, with the bundled data's vocabulary of
8000 (336M weights, 25M fewer than the release's 32000-row embedding: with AdamW's two slots
about 4.0 GB of checkpointed state, the release's 4.3 GB). The sequence and
batch are short (default seq_len 64, mem_len 64, batch 2) so that a step is affordable on 2 CPU
cores; a checkpoint's size does not depend on them.

After two untimed steps (the first compiles), each round runs, on the same controller and data, a
loop of EVERY steps after each of these, and times it:

* nothing: the round's baseline loop;
* a snapshot held (trainer/runtime/checkpoint_writer.py's, no write): what copy on write costs;
* a synchronous checkpoint (tf.train.Checkpoint's write, as without async_checkpoint);
* an asynchronous checkpoint (BackgroundWrites, as with async_checkpoint=true: the call waits
  for the write before it, snapshots, returns), its writing thread at niceness 0, then the same
  at niceness 19; after the loop beside the write, a wait for it to finish (zero when it had).

A checkpoint's cost to the step loop is the time it adds to its round: the save call, plus the loop
after it less the baseline loop (the copies of updated variables whose old values a snapshot
holds, the cores shared with a writing thread, the kernel writing pages back), plus the wait.
Each is measured in wall seconds and in CPU seconds of this process: the machine is shared, and
CPU time does not count the turns other processes took on the cores. Every round is one JSON
line; then one line per mode with the medians over rounds (the step time of a run checkpointing
every EVERY steps is the baseline's plus the cost divided by EVERY), and a last line with each
asynchronous mode's cost over the synchronous one (goal: 0.10 or less).

    flock /tmp/xlnet-heavy.lock .venv/bin/python benchmarks/checkpoints.py          # Large (~10 GB peak)
    .venv/bin/python benchmarks/checkpoints.py --preset tiny --seq-len 64 --rounds 2 --every 2
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from set_items import add_set_option  # noqa: E402  (benchmarks/set_items.py: the --set option)


def build(preset: str, seq_len: int, batch: int, workdir: str, model_dir: str, extra: tuple[str, ...] = ()):
    """The `xlnet train` controller of ``preset`` (with the ``extra`` --set items) on the bundled corpus at
    ``seq_len``."""
    import bundled_data

    from trainer.launch.pretraining_run import PretrainingRun, build_pretraining

    data = bundled_data.prepare(workdir, seq_len=seq_len, reuse_len=seq_len // 2, num_predict=max(seq_len // 6, 1))
    # the data's vocabulary (8000, the bundled corpus's): the embedding is 8.2M weights, not the release's 32.8M
    sets = (f"seq_len={seq_len}", f"reuse_len={seq_len // 2}", f"num_predict={max(seq_len // 6, 1)}",
            f"perm_size={seq_len // 2}", f"mem_len={seq_len}", f"train_batch_size={batch}", f"eval_batch_size={batch}",
            "steps_per_loop=1000", "train_steps=100000", "eval_every=0", "checkpoint_every=100000",
            "keep_checkpoints=1", *extra)
    return build_pretraining(PretrainingRun(data=(data,), model_dir=model_dir, preset=preset,
                                            overrides=sets), log=lambda line: None)


def checkpoint_files_bytes(prefix: str) -> int:
    """Bytes of checkpoint ``prefix``'s files (index and data)."""
    import tensorflow as tf

    return sum(tf.io.gfile.stat(path).length for path in tf.io.gfile.glob(prefix + ".*"))


ASYNC_MODES = {"async_nice0": 0, "async_nice19": 19}  # the writing thread's niceness


def process_cpu() -> float:
    """User and system CPU seconds of this process so far (every thread)."""
    times = os.times()
    return times.user + times.system


def costs(save: tuple[float, float], after: tuple[float, float], wait: tuple[float, float],
          baseline: tuple[float, float]) -> dict:
    """A checkpoint's timings and cost to its round, each (wall, CPU): the save call, the loop after it,
    the wait for its write; cost = save + loop after - the baseline loop + wait."""
    line = {"save_call_s": round(save[0], 3), "loop_after_s": round(after[0], 3), "wait_s": round(wait[0], 3),
            "cost_s": round(save[0] + after[0] - baseline[0] + wait[0], 3)}
    line["cost_cpu_s"] = round(save[1] + after[1] - baseline[1] + wait[1], 3)
    return line


def run(args: argparse.Namespace) -> list[dict]:
    import tensorflow as tf

    from trainer.runtime.checkpoint_writer import BackgroundWrites, snapshot

    workdir = tempfile.mkdtemp(dir=args.workdir)
    try:
        directory = Path(workdir)
        controller = build(args.preset, args.seq_len, args.batch, args.workdir, str(directory / "model"),
                           tuple(args.sets))
        iterator = iter(controller.train_dataset())
        written = {}  # mode -> (seconds, CPU seconds of the writing thread) of its last write

        def writes(mode: str, nice: int) -> tf.train.CheckpointManager:
            record = lambda prefix, seconds, cpu: written.__setitem__(mode, (seconds, cpu))  # noqa: E731
            return tf.train.CheckpointManager(BackgroundWrites(controller.checkpoint, on_written=record, nice=nice),
                                              str(directory / mode), max_to_keep=1)

        managers = {"sync": tf.train.CheckpointManager(controller.checkpoint, str(directory / "sync"), max_to_keep=1),
                    **{mode: writes(mode, nice) for mode, nice in ASYNC_MODES.items()}}
        controller.run_steps(iterator, 1)  # traces and compiles
        controller.run_steps(iterator, 1)
        step = 2

        def loop() -> tuple[float, float]:
            nonlocal step
            seconds = timed(lambda: controller.run_steps(iterator, args.every))
            step += args.every
            return seconds

        def timed(call) -> tuple[float, float]:
            """(wall seconds, CPU seconds of this process) of ``call()``: the machine is shared, and
            CPU time does not count the time other processes held the cores."""
            began, cpu = time.perf_counter(), process_cpu()
            call()
            return time.perf_counter() - began, process_cpu() - cpu

        rows = []
        for round_ in range(args.rounds):
            baseline = loop()
            row = {"round": round_, "every": args.every, "baseline_loop_s": round(baseline[0], 3),
                   "baseline_loop_cpu_s": round(baseline[1], 3)}
            held = []  # no write: what holding the old values costs the loop (copy on write)
            save = timed(lambda: held.append(snapshot(controller.checkpoint)))
            after = loop()
            held.clear()
            row["snapshot_held"] = costs(save, after, (0.0, 0.0), baseline)
            save = timed(lambda: managers["sync"].save(checkpoint_number=step))
            row["sync"] = costs(save, loop(), (0.0, 0.0), baseline)
            for mode in ASYNC_MODES:
                save = timed(lambda: managers[mode].save(checkpoint_number=step))
                after = loop()
                wait = timed(managers[mode].sync)
                row[mode] = {**costs(save, after, wait, baseline), "write_s": round(written[mode][0], 3),
                             "writer_thread_cpu_s": round(written[mode][1], 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        model = controller.task.model_config
        shape = {"preset": args.preset, "n_layer": model.n_layer, "d_model": model.d_model,
                 "vocab_size": model.vocab_size, "seq_len": args.seq_len, "batch": args.batch,
                 "checkpoint_bytes": checkpoint_files_bytes(managers["sync"].latest_checkpoint)}
        baseline_step = statistics.median(row["baseline_loop_s"] for row in rows) / args.every
        summary = []
        for mode in ("snapshot_held", "sync", *ASYNC_MODES):
            cost = statistics.median(row[mode]["cost_s"] for row in rows)
            cpu = statistics.median(row[mode]["cost_cpu_s"] for row in rows)
            summary.append({"mode": mode, **shape, "every": args.every, "rounds": args.rounds,
                            "baseline_step_s": round(baseline_step, 3), "checkpoint_cost_s": round(cost, 3),
                            "checkpoint_cost_cpu_s": round(cpu, 3),
                            "step_s_with_checkpoints": round(baseline_step + cost / args.every, 3),
                            "save_call_s": round(statistics.median(row[mode]["save_call_s"] for row in rows), 3)})
            print(json.dumps(summary[-1]), flush=True)
        verdict = {}
        for key, unit in (("checkpoint_cost_s", "cost"), ("checkpoint_cost_cpu_s", "cpu")):
            cost = {line["mode"]: line[key] for line in summary}
            verdict.update({f"{mode}_over_sync_{unit}": round(cost[mode] / cost["sync"], 3) if cost["sync"] > 0
                            else None for mode in ASYNC_MODES})
        print(json.dumps({**verdict, "goal": 0.1}), flush=True)
        return rows + summary + [{**verdict, "goal": 0.1}]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="large", help="model preset (with the bundled data's vocabulary, 8000)")
    parser.add_argument("--seq-len", type=int, default=64, help="seq_len (and mem_len) of the records trained on")
    parser.add_argument("--batch", type=int, default=2, help="train_batch_size")
    parser.add_argument("--every", type=int, default=3, help="steps between two checkpoints")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (one checkpoint of each mode per round)")
    add_set_option(parser, "more --set items of the controller (e.g. n_layer=1 for a smoke run)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-checkpoint-benchmark"),
                        help="where the data (kept for later runs) and the checkpoints (removed) go")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
