"""Measured peak memory of one training step against `xlnet plan`'s prediction, per remat mode.

Every line is one configuration run in a process of its own through the real commands' code
(`xlnet train`'s and `xlnet finetune`'s controllers on real data: the bundled corpus preprocessed
at the case's seq_len, Rotten Tomatoes, the bundled SQuAD set), one step to compile, then the
allocator's peak (``tf.config.experimental.get_memory_info("CPU:0")["peak"]`` after
``reset_memory_stats``) over one more step, timed. Printed as JSON lines:
measured_peak_bytes, measured_step_bytes (the peak less what was allocated before the step:
what the step itself adds), predicted_peak_bytes, predicted_activation_bytes, their ratio, step_s.

Cases: the tiny preset (pretraining, seq 128); Base-shaped (12 x 768) and Large-shaped
(24 x 1024) pretraining at seq_len 512, mem_len 384, num_predict 85, bi_data (the vocabulary is
the bundled data's 8000, so the 32000-row embedding's share is smaller than the release's);
classification and SQuAD fine-tuning of the Large shape at 512, and Large classification with
remat full at batch 8 (the goal's batch on a 16 GB device). A line the planner predicts above
60% of this machine's memory is skipped and said so. Then the planner's table: the largest micro-batch per
remat mode on a 16 GiB device for Base and Large at 64 / 128 / 256 / 512 (fine-tuning,
float32), beside the original release's.

    .venv/bin/python benchmarks/memory.py                         # everything (about 40 min on 2 cores)
    .venv/bin/python benchmarks/memory.py --cases tiny base --modes none full
    .venv/bin/python benchmarks/memory.py --cases base --batches 2 --timed-steps 3 --rounds 3 --no-table  # remat's step cost
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from set_items import add_set_option, set_flags  # noqa: E402  (benchmarks/set_items.py: the --set option)

ROTTEN = REPO / "data" / "finetune" / "rotten_tomatoes"
WIKI_QA = REPO / "data" / "squad" / "wiki_qa_v2.json"
# name -> (kind, preset, --set items, batch sizes, remat modes)
MODES = ("none", "attention", "full")
CASES = {
    "tiny": ("pretraining", "tiny", [], (8, 16), MODES),
    "large-classification": ("classification", "large", [], (1, 2), MODES),
    "base": ("pretraining", "base", [], (2, 4), MODES),
    "large": ("pretraining", "large", [], (2, 4), MODES),
    "large-squad": ("squad", "large", [], (1, 2), MODES),
    # the goal's batch (8 per 16 GB) with remat full, measured
    "large-classification-goal": ("classification", "large", [], (8,), ("full",)),
}
# A line the planner predicts above this share of the machine's memory is skipped (said so), not run:
# the machine is shared.
MACHINE_SHARE = 0.6
# The original release's README ("Memory Issue during Finetuning"): the largest batch on one 16 GB GPU.
ORIGINAL_16GB = {"base": {64: 120, 128: 56, 256: 24, 512: 8}, "large": {64: 16, 128: 8, 256: 2, 512: 1}}


def data_dir(workdir: str, seq_len: int) -> str:
    import bundled_data

    if seq_len == 128:
        return bundled_data.prepare(workdir)
    return bundled_data.prepare(workdir, seq_len=seq_len, reuse_len=seq_len // 2, num_predict=seq_len // 6 + 0)


def build(case: str, mode: str, batch: int, workdir: str, extra: tuple[str, ...] = ()):
    """The controller `xlnet train` / `xlnet finetune` would run for this case (trainer/launch/), with
    the ``extra`` --set items (--set) after the case's own."""
    from trainer.launch.finetuning_run import FinetuneSettings, FinetuningRun, build_finetuning
    from trainer.launch.pretraining_run import PretrainingRun, build_pretraining

    kind, preset, sets, _, _ = CASES[case]
    sets = (*sets, *extra, f"remat={mode}", f"train_batch_size={batch}", "steps_per_loop=1", "train_steps=100",
            "eval_every=0", "checkpoint_every=100")
    out = tempfile.mkdtemp(dir=workdir)
    if kind == "pretraining":
        data = data_dir(workdir, 128 if preset == "tiny" else 512)
        return build_pretraining(PretrainingRun(data=(data,), model_dir=out, preset=preset,
                                                overrides=(*sets, f"eval_batch_size={batch}")))
    vocab = str(Path(data_dir(workdir, 128)).parent / "spiece.model")
    train, evaluate = ((str(ROTTEN / "train.tsv"), str(ROTTEN / "dev.tsv")) if kind == "classification"
                       else (str(WIKI_QA), str(WIKI_QA)))
    settings = FinetuneSettings(task=kind, preset=preset, overrides=sets, max_seq_length=512)
    return build_finetuning(FinetuningRun(settings, train=train, eval=evaluate, model_dir=out, vocab=vocab))


def measure(case: str, mode: str, batch: int, workdir: str, timed_steps: int = 1, extra: tuple[str, ...] = ()) -> dict:
    import tensorflow as tf

    from trainer.planning.plan import Workload, make_plan

    controller = build(case, mode, batch, workdir, extra)
    iterator = iter(controller.train_dataset())
    controller.run_steps(iterator, 1)  # traces and compiles
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    times = []
    for _ in range(timed_steps):
        start = time.perf_counter()
        controller.run_steps(iterator, 1)
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    workload = Workload(controller.task.model_config, controller.config)
    plan = make_plan(workload)
    return {"case": case, "kind": CASES[case][0], "n_layer": workload.model.n_layer,
            "d_model": workload.model.d_model, "seq_len": workload.seq_len, "mem_len": workload.shape().mem_len,
            "num_predict": workload.shape().num_predict, "batch": batch, "remat": mode,
            "measured_peak_bytes": int(peak), "measured_step_bytes": int(peak - before),
            "predicted_peak_bytes": plan.predicted_peak_bytes,
            "predicted_activation_bytes": plan.breakdown.activations,
            "prediction_ratio": round(plan.predicted_peak_bytes / peak, 3), "step_s": round(step_s, 3),
            "timed_steps": timed_steps}


def machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def predicted_peak(case: str, mode: str, batch: int) -> int:
    """The planner's peak for a case, from the presets as the commands resolve them (vocabulary 8000)."""
    from trainer.configs.finetuning import finetune_preset
    from trainer.configs.training import train_preset
    from trainer.models.config import model_preset, sequence_model_config
    from trainer.planning.plan import Workload

    kind, preset, _, _, _ = CASES[case]
    model = model_preset(preset).replace(vocab_size=8000)
    if kind == "pretraining":
        config = train_preset(preset).replace(train_batch_size=batch, eval_batch_size=batch, remat=mode)
    else:
        config = finetune_preset(preset).for_task(kind).replace(max_seq_length=512, train_batch_size=batch,
                                                                  remat=mode)
        model = sequence_model_config(model)
    return Workload(model, config).breakdown().total


def planner_table() -> list[dict]:
    """The planner's largest micro-batch per remat mode on a 16 GiB device, fine-tuning in float32."""
    from trainer.configs.finetuning import finetune_preset
    from trainer.models.config import model_preset, sequence_model_config
    from trainer.planning.devices import device_named
    from trainer.planning.plan import Workload, make_plan

    rows = []
    for name in ("base", "large"):
        for seq_len in (64, 128, 256, 512):
            config = finetune_preset(name).replace(max_seq_length=seq_len)
            plan = make_plan(Workload(sequence_model_config(model_preset(name)), config), device_named("v100-16gb"))
            rows.append({"table": "max_micro_batch_16GiB", "model": name, "seq_len": seq_len,
                         "original_release": ORIGINAL_16GB[name][seq_len], **plan.max_micro_batch})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--batches", nargs="+", type=int, help="batch sizes instead of each case's two")
    parser.add_argument("--timed-steps", type=int, default=1,
                        help="steps timed after the compiling one; step_s is their median")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat every line this many times, the modes of a case and batch one after the "
                             "other in each round; then print each mode's step time against none's of the same "
                             "round (the median over rounds)")
    parser.add_argument("--no-table", action="store_true", help="leave out the planner's 16 GiB table")
    add_set_option(parser, "more --set items for every case (e.g. n_layer=1 for a smoke run)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "xlnet-memory-benchmark"),
                        help="where the preprocessed data and the model directories go")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "MODE", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.child:
        case, mode, batch = args.child
        print(json.dumps(measure(case, mode, int(batch), args.workdir, args.timed_steps, tuple(args.sets))), flush=True)
        return 0
    step_times = {}  # (case, batch, mode) -> one step time per round
    for round_ in range(args.rounds):
        for case in args.cases:
            for batch in args.batches or CASES[case][3]:
                for mode in [mode for mode in args.modes if mode in CASES[case][4]]:
                    row = run_line(args, case, mode, batch)
                    if args.rounds > 1:
                        row["round"] = round_
                    print(json.dumps(row), flush=True)
                    if "step_s" in row:
                        step_times.setdefault((case, batch, mode), []).append(row["step_s"])
    for row in step_costs(step_times):
        print(json.dumps(row), flush=True)
    for row in [] if args.no_table else planner_table():
        print(json.dumps(row), flush=True)
    return 0


def run_line(args: argparse.Namespace, case: str, mode: str, batch: int) -> dict:
    """One case, mode and batch measured in a process of its own (or the reason it was not)."""
    predicted = predicted_peak(case, mode, batch)
    if predicted > MACHINE_SHARE * machine_memory():
        return {"case": case, "remat": mode, "batch": batch, "predicted_peak_bytes": predicted,
                "skipped": f"predicted above {MACHINE_SHARE:.0%} of this machine's memory"}
    sets = set_flags(args.sets)
    out = subprocess.run([sys.executable, __file__, "--workdir", args.workdir, "--timed-steps", str(args.timed_steps),
                          *sets, "--child", case, mode, str(batch)], capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return {"case": case, "remat": mode, "batch": batch,
                "error": out.stderr.strip().splitlines()[-1:] or out.returncode}
    return json.loads(lines[-1])


def step_costs(step_times: dict) -> list[dict]:
    """Each remat mode's step time over none's of the same case, batch and round: the median over rounds."""
    rows = []
    for (case, batch, mode), times in step_times.items():
        none = step_times.get((case, batch, "none"))
        if mode == "none" or not none or len(none) != len(times):
            continue
        ratios = [t / n for t, n in zip(times, none)]
        rows.append({"summary": "remat_step_cost", "case": case, "batch": batch, "remat": mode,
                     "rounds": len(ratios), "ratio_to_none_median": round(statistics.median(ratios), 3),
                     "ratios": [round(r, 3) for r in ratios]})
    return rows

if __name__ == "__main__":
    sys.exit(main())
