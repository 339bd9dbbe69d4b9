"""Times the XLNet pretraining step on JAX on an accelerator, beside transformers' PyTorch XLNet.

Runs where TensorFlow does not go (a GPU machine without network access that has Python, jax with
CUDA, torch and transformers, and no TensorFlow): ``KERAS_BACKEND=jax``, the jitted step of trainer/runtime/jax_step.py,
synthetic batches laid out as the reader's compact features (input_ids with <sep> <sep> <cls>,
segment ids 0 / 1 / 2, is_masked with exactly num_predict targets, per-row int32 permutation
seeds). No process of this benchmark imports ``tensorflow``; each one checks at its end.

One JSON line per setting (preset x remat), each measured in a process of its own (the
allocator's peak is a process's high-water mark, and a setting that runs out of memory ends only
its own process):
- ``tokens_per_s`` (micro-batch x seq_len per step), ``step_s``, ``compile_s`` (the first step's
  time); warm-up steps excluded, every timing ends on ``block_until_ready``;
- ``model_tflops_per_step`` (trainer/planning/flops.py, the one FLOPs rule; remat's recomputation
  is not model FLOPs) and the MFU (trainer/runtime/throughput.py ``utilisation``, never above 1):
  ``mfu`` divides by the device's datasheet peak where the device table knows the device (H100
  SXM bf16 dense: 989 TFLOP/s), else by the matmul peak timed in the same process;
  ``mfu_vs_measured_peak`` divides by the timed peak (an [N, N] x [N, N] product in the compute
  dtype, N 8192 on a GPU, 512 on a CPU, the best of several timings before and after the steps);
  ``peak_source`` says which and how;
- ``measured_peak_bytes``: the device allocator's ``peak_bytes_in_use`` (null where the device
  reports no memory statistics: the CPU); ``predicted_peak_bytes``: `xlnet plan`'s memory model
  (trainer/planning/memory.py) for the same shape (without the eval memory, which only the
  TensorFlow trainer holds), and ``predicted_over_measured``;
- the micro-batch: ``--batch``, or the largest the planner fits in the device's memory
  (``bytes_limit`` of the allocator; ``batch_source`` says which). A setting predicted above the
  memory prints a line saying so (``does_not_fit``: planned peak, device memory) and is not run;
  one that runs out of memory prints ``out_of_memory`` and is run once more at half the
  micro-batch; either way the run goes on to the next setting.

Then, per preset, the peer (benchmarks/peers/transformers_step.py, its own process): Hugging Face
``XLNetLMHeadModel``, bf16 autocast, AdamW, on the same synthetic batch, perm_mask and
target_mapping (built by our trainer/models/permutation.py ``dense_inputs``), the same shapes and
micro-batch (halved on out-of-memory, said so). Skipped with a line saying so when torch or
transformers is missing.

    python benchmarks/accelerator_step.py                          # Base and Large at 512, remat none and full
    python benchmarks/accelerator_step.py --presets base --remat none --output /tmp/lines.jsonl
    .venv/bin/python benchmarks/accelerator_step.py --presets tiny --set n_layer=2 --set vocab_size=1000 \\
        --seq-len 64 --mem-len 32 --num-predict 10 --batch 2 --steps 2 --warmup 1   # a CPU smoke run

On such a machine, benchmarks/accelerator_run.sh installs the wheels carried there with the checkout
(fetched beforehand on a machine with network access) and runs it.

Flags no setting can run with (an unknown preset or remat mode, a length, batch or memory below its
least, --num-predict above --seq-len, a --set the configs refuse, a --budget-s that is not a positive
number) are refused before any setting runs, in one line, exit 2; a setting that fails for a reason
other than memory makes the run exit 1 after the others have run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

os.environ["KERAS_BACKEND"] = "jax"  # before any Keras import: this benchmark is the JAX path
# JAX takes 75% of a GPU's memory by default; the planner sizes the micro-batch from this limit.
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.90")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PEER_SCRIPT = REPO / "benchmarks" / "peers" / "transformers_step.py"
SPECIAL_IDS = {"sep": 4, "cls": 3}
# How long one run may take in all by default: 7.5 minutes, which a machine lent for 10 minutes at a time allows.
DEFAULT_BUDGET_S = 450.0
OUT_OF_MEMORY_MARKERS = ("RESOURCE_EXHAUSTED", "out of memory", "Out of memory", "OOM")


# ----------------------------------------------------------------------------- settings
def setting_configs(preset: str, overrides: list[str], seq_len: int, mem_len: int, num_predict: int,
                    precision: str, remat: str):
    """(ModelConfig, TrainConfig) of one setting: the preset with ``overrides`` (``--set`` items as
    `xlnet train` reads them, e.g. ``n_layer=2``), memory ``mem_len``, the context half of the
    sequence reused (reuse_len = perm_size = seq_len / 2, as Base and Large at 512: 256 and 256)."""
    from trainer.configs.overrides import resolve_configs

    # eval_batch_size 2 (the least bi_data allows): the JAX step holds no eval memory (see predicted_peak).
    settings = dict(seq_len=seq_len, num_predict=num_predict, perm_size=seq_len // 2, precision=precision,
                    remat=remat, train_batch_size=2, eval_batch_size=2, accumulation_steps=1)
    fixed = [f"model.mem_len={mem_len}", f"model.reuse_len={seq_len // 2}",
             *(f"train.{name}={value}" for name, value in settings.items())]
    model, train, _ = resolve_configs(preset, None, [*overrides, *fixed])
    return model, train


def planned_batch(model, train, remat: str, memory_bytes: int) -> int:
    """The largest micro-batch `xlnet plan` fits in ``memory_bytes`` under ``remat`` (0: none fits)."""
    from trainer.planning.plan import USABLE_FRACTION, Workload, largest_micro_batch

    return largest_micro_batch(Workload(model, train), remat, int(memory_bytes * USABLE_FRACTION))


def predicted_peak(model, train, batch: int, remat: str) -> int:
    """`xlnet plan`'s predicted peak for one step of ``batch`` rows: the memory model of the
    TensorFlow trainer's step, less its eval memory (the JAX step keeps none)."""
    from trainer.planning.memory import memory_breakdown
    from trainer.planning.plan import Workload

    shape = Workload(model, train.replace(train_batch_size=batch)).shape(batch).replace(eval_batch=0)
    return memory_breakdown(model, shape, remat).total


def synthetic_batch(batch: int, seq_len: int, num_predict: int, reuse_len: int, vocab: int,
                    seed: int = 0) -> dict[str, Any]:
    """Compact features as the reader gives them (docs/data-format.md), as NumPy arrays:
    context (reuse_len) + A + <sep> + B + <sep> + <cls>; segment ids 0 (context, A, first <sep>),
    1 (B, second <sep>), 2 (<cls>); is_masked on exactly ``num_predict`` ordinary positions,
    ceil(num_predict / 2) in the context and the rest in A/B, as the span masks split them;
    perm_seed two int32 per row (the reader's are a fingerprint's bits: any int32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    first_sep = reuse_len + (seq_len - reuse_len) // 2
    ids = rng.integers(10, vocab, [batch, seq_len]).astype(np.int32)
    ids[:, first_sep] = ids[:, seq_len - 2] = SPECIAL_IDS["sep"]
    ids[:, seq_len - 1] = SPECIAL_IDS["cls"]
    segments = np.zeros([batch, seq_len], np.int32)
    segments[:, first_sep + 1:] = 1
    segments[:, seq_len - 1] = 2
    in_context = (num_predict + 1) // 2
    ordinary_ab = np.setdiff1d(np.arange(reuse_len, seq_len), [first_sep, seq_len - 2, seq_len - 1])
    is_masked = np.zeros([batch, seq_len], np.int32)
    for row in range(batch):
        is_masked[row, rng.choice(reuse_len, in_context, replace=False)] = 1
        is_masked[row, rng.choice(ordinary_ab, num_predict - in_context, replace=False)] = 1
    seeds = rng.integers(-2 ** 31, 2 ** 31, [batch, 2]).astype(np.int32)
    return {"input_ids": ids, "segment_ids": segments, "is_masked": is_masked, "perm_seed": seeds}


def write_peer_batch(path: str, features: dict, model, train) -> None:
    """The batch the peer trains on: the compact features and what our permutation code builds
    from them (perm_mask [B, L, L] bool, target positions and validity, target ids)."""
    import numpy as np

    from trainer.models.permutation import dense_inputs

    dense = dense_inputs(features["input_ids"], features["is_masked"], features["perm_seed"], model.reuse_len,
                         train.perm_size, train.num_predict, SPECIAL_IDS["sep"], SPECIAL_IDS["cls"])
    mapping = np.asarray(dense["target_mapping"])
    dims = {name: getattr(model, name) for name in ("vocab_size", "d_model", "n_layer", "n_head", "d_head", "d_inner",
                                                     "ff_activation", "untie_r", "bi_data", "mem_len", "reuse_len",
                                                     "dropout", "dropatt")}
    np.savez(path, **features, perm_mask=np.asarray(dense["perm_mask"]) > 0.5,
             target_positions=mapping.argmax(-1).astype(np.int32), target_valid=np.asarray(dense["target_mask"]) > 0.5,
             target=np.asarray(dense["target"]).astype(np.int32), model_json=np.array(json.dumps(dims)))


# ----------------------------------------------------------------------------- the device
def device_facts() -> dict[str, Any]:
    """The first device: platform, kind, the allocator's limit (None where it reports nothing)."""
    import jax

    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    return {"platform": device.platform, "device_kind": device.device_kind, "device_count": len(jax.devices()),
            "device_memory_bytes": stats.get("bytes_limit"), "jax": jax.__version__}


def measured_peak_bytes() -> Optional[int]:
    """The allocator's high-water mark of this process on the first device (None on the CPU)."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def matmul_flops(size: int, dtype: str, repeats: int = 5, inner: int = 10) -> float:
    """Best FLOP/s of ``inner`` back-to-back [size, size] x [size, size] products in ``dtype``,
    over ``repeats`` timings (each ending on block_until_ready). The operands are freed after."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (size, size), jnp.float32).astype(dtype)
    b = jnp.asarray(a.T)
    product = jax.jit(lambda x, y: x @ y)
    product(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            out = product(a, b)
        out.block_until_ready()
        best = min(best, (time.perf_counter() - start) / inner)
    del a, b, out
    return 2.0 * size ** 3 / best


# ----------------------------------------------------------------------------- one setting
def time_steps(model, train, remat: str, features: dict, steps: int, warmup: int) -> dict[str, Any]:
    """Builds the pretrainer and the jitted step, runs ``warmup`` + ``steps`` steps on ``features``."""
    import jax
    import keras

    from trainer.models.pretrainer import XLNetPretrainer
    from trainer.runtime.jax_step import PretrainingStep, as_numpy

    keras.mixed_precision.set_global_policy(train.precision)
    # No keras.utils.set_random_seed: it imports tensorflow where installed. Unseeded weights time the same.
    pretrainer = XLNetPretrainer(model, train.seq_len, train.num_predict, train.perm_size, SPECIAL_IDS, remat=remat)
    step = PretrainingStep(pretrainer, train)
    batch = {name: jax.device_put(value) for name, value in features.items()}
    state = step.initial_state(train.train_batch_size)
    start = time.perf_counter()
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    for _ in range(warmup - 1):
        state, metrics = step(state, batch)
    jax.block_until_ready((state, metrics))
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    jax.block_until_ready((state, metrics))
    step_s = (time.perf_counter() - start) / steps
    values = as_numpy(metrics)
    params = sum(int(v.size) for v in state.trainable)
    del state, batch
    return {"step_s": round(step_s, 5), "compile_s": round(compile_s, 2), "loss": round(values["loss"], 4),
            "num_targets": values["num_targets"], "params": params}


def run_setting(args: argparse.Namespace, preset: str, remat: str) -> dict[str, Any]:
    """One setting's JSON line (in this process)."""
    facts = device_facts()
    model, train = setting_configs(preset, args.set, args.seq_len, args.mem_len, args.num_predict, args.precision,
                                   remat)
    line = {"impl": "ours (keras on jax)", "preset": preset, "overrides": args.set, "remat": remat,
            "precision": args.precision, "seq_len": args.seq_len, "mem_len": args.mem_len,
            "num_predict": args.num_predict, **facts, "memory_fraction": os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"]}
    line.update(planned_fields(args, model, train, remat, facts["device_memory_bytes"] or args.device_memory_bytes))
    if "status" in line:
        return line
    train = train.replace(train_batch_size=line["batch"])
    features = synthetic_batch(line["batch"], args.seq_len, args.num_predict, model.reuse_len, model.vocab_size)
    if args.peer_batch_file:  # the peer trains on this batch, whether ours fits or not
        write_peer_batch(args.peer_batch_file, features, model, train)
    budget, predicted = line["planner_budget_bytes"], line["predicted_peak_bytes"]
    if budget is not None and predicted > budget:
        return {**line, "status": "does_not_fit",
                "reason": f"predicted peak {predicted} bytes above the planner's budget of {budget}"}
    return {**line, **measured_fields(args, model, train, remat, features, facts, predicted)}


def planned_fields(args: argparse.Namespace, model, train, remat: str, memory: Optional[int]) -> dict[str, Any]:
    """The micro-batch (``--batch``, else the planner's largest in ``memory``), the memory planned for
    and the planner's predicted peak; with a ``status`` when there is nothing to run."""
    from trainer.planning.plan import USABLE_FRACTION

    budget = int(memory * USABLE_FRACTION) if memory else None
    fields = {"memory_bytes_planned_for": memory or None, "planner_budget_bytes": budget}
    if args.batch:
        fields.update(batch=args.batch, batch_source="--batch")
    elif memory:
        fields.update(batch=planned_batch(model, train, remat, memory),
                      batch_source=f"planner: the largest micro-batch in {USABLE_FRACTION:.0%} of the memory")
    else:
        return {**fields, "status": "no_batch",
                "reason": "the device reports no memory: give --batch or --device-memory-bytes"}
    if fields["batch"] == 0:
        smallest = 2 if model.bi_data else 1
        return {**fields, "status": "does_not_fit",
                "predicted_peak_bytes": predicted_peak(model, train, smallest, remat),
                "reason": f"the planner fits no micro-batch in {budget} bytes ({memory} x {USABLE_FRACTION}), "
                          f"not even {smallest} (predicted_peak_bytes)"}
    train.replace(train_batch_size=fields["batch"]).check_model(model)
    return {**fields, "predicted_peak_bytes": predicted_peak(model, train, fields["batch"], remat)}


def measured_fields(args: argparse.Namespace, model, train, remat: str, features: dict, facts: dict,
                    predicted: int) -> dict[str, Any]:
    """The timed steps between two timings of the matmul peak, the rates, the allocator's peak;
    ``status`` out_of_memory (and the allocator's peak so far) if the device ran out."""
    compute_dtype = "float32" if args.precision == "float32" else "bfloat16"
    size = args.matmul_size or (8192 if facts["platform"] == "gpu" else 512)
    peaks = [matmul_flops(size, compute_dtype)]
    try:
        fields = time_steps(model, train, remat, features, args.steps, args.warmup)
    except Exception as error:  # noqa: BLE001 (out of memory ends this setting, not the run)
        text = str(error)
        if not any(marker in text for marker in OUT_OF_MEMORY_MARKERS):
            raise
        return {"status": "out_of_memory", "error": text.strip().splitlines()[0][:500],
                "measured_peak_bytes": measured_peak_bytes()}
    measured = measured_peak_bytes()
    peaks.append(matmul_flops(size, compute_dtype))
    batch = train.train_batch_size
    dims = dict(n_layer=model.n_layer, d_model=model.n_head * model.d_head, d_inner=model.d_inner,
                seq_len=args.seq_len, mem_len=args.mem_len, num_predict=args.num_predict, batch=batch,
                vocab=model.vocab_size, bi_data=model.bi_data)
    how = f"jax matmul {size}^3 {compute_dtype}, best of 5 timings of 10 products, before and after the timed steps"
    return {**fields, "status": "ok", "steps": args.steps, "warmup": args.warmup,
            "tokens_per_s": round(batch * args.seq_len / fields["step_s"], 1),
            **utilisation_fields(dims, remat, fields["step_s"], peaks, how, facts, args.precision),
            "measured_peak_bytes": measured,
            "predicted_over_measured": round(predicted / measured, 3) if measured else None}


def utilisation_fields(dims: dict, remat: str, step_s: float, peaks: list[float], how: str, facts: dict,
                       precision: str) -> dict[str, Any]:
    """The FLOPs and MFU fields of a line: the model's FLOPs (trainer/planning/flops.py) over the
    step time, against the datasheet peak where the device table lists the device, else against
    the best of the timed ``peaks`` (``how``: how they were timed); never above 1 (``utilisation``)."""
    from trainer.planning.devices import gpu_table_row
    from trainer.planning.flops import model_flops_per_step, recomputed_flops_per_step
    from trainer.runtime.throughput import utilisation

    flops = model_flops_per_step(**dims)
    achieved, measured_peak = flops / step_s, max(peaks)
    sheet = gpu_table_row(facts["device_kind"])
    sheet_peak = sheet.peak_flops(precision) if sheet else None
    mfu_measured, measured_divisor = utilisation(achieved, measured_peak)
    mfu, divisor = utilisation(achieved, sheet_peak) if sheet_peak else (mfu_measured, measured_divisor)
    raised = "; raised to the step's own rate, which was above it" if divisor > (sheet_peak or measured_peak) else ""
    return {"model_tflops_per_step": round(flops / 1e12, 4),
            "recomputed_tflops_per_step": round(recomputed_flops_per_step(**dims, remat=remat) / 1e12, 4),
            "achieved_tflops": round(achieved / 1e12, 3), "matmul_peak_tflops": round(measured_peak / 1e12, 3),
            "peak_timings_tflops": [round(peak / 1e12, 3) for peak in peaks],
            "datasheet_peak_tflops": round(sheet_peak / 1e12, 1) if sheet_peak else None,
            "datasheet_source": f"{sheet.name}: {sheet.source} ({sheet.note})" if sheet else None,
            "mfu": round(mfu, 3), "mfu_peak_tflops": round(divisor / 1e12, 3),
            "mfu_vs_measured_peak": round(mfu_measured, 3),
            "peak_source": (f"datasheet ({sheet.name})" if sheet_peak else how) + raised, "matmul_peak_how": how}


# ----------------------------------------------------------------------------- the run
def emit(line: dict, output: Optional[Path]) -> None:
    text = json.dumps(line)
    print(text, flush=True)
    if output:
        with output.open("a") as handle:
            handle.write(text + "\n")


def run_child(command: list[str], timeout: float, what: dict) -> list[dict]:
    """The JSON lines of one child process, or one line saying why there are none."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=max(timeout, 1), check=False)
    except subprocess.TimeoutExpired:
        return [{**what, "status": "timed_out", "timeout_s": round(timeout, 1)}]
    lines = [json.loads(text) for text in result.stdout.splitlines() if text.startswith("{")]
    if result.returncode or not lines:
        return [{**what, "status": "failed", "returncode": result.returncode, "stderr_tail": result.stderr[-2000:]}]
    return lines


def child_arguments(args: argparse.Namespace, batch: int) -> list[str]:
    """The flags a setting's process gets (all but the lists of settings and the peer's)."""
    out = ["--seq-len", str(args.seq_len), "--mem-len", str(args.mem_len), "--num-predict", str(args.num_predict),
           "--precision", args.precision, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch", str(batch), "--matmul-size", str(args.matmul_size)]
    if args.device_memory_bytes:
        out += ["--device-memory-bytes", str(args.device_memory_bytes)]
    for item in args.set:
        out += ["--set", item]
    return out


def setting_lines(args: argparse.Namespace, preset: str, remat: str, batch_file: Optional[Path],
                  deadline: float) -> list[dict]:
    """One setting's lines, each from a process of its own: the setting, and once more at half the
    micro-batch if it ran out of memory (the planner's choice is a prediction; the half is said so)."""
    what = {"impl": "ours (keras on jax)", "preset": preset, "remat": remat}
    lines, batch = [], args.batch
    while True:
        command = [sys.executable, __file__, "--child", f"{preset}:{remat}", *child_arguments(args, batch)]
        if batch_file is not None:
            command += ["--peer-batch-file", str(batch_file)]
        line = run_child(command, deadline - time.monotonic(), what)[-1]
        if lines:
            line["batch_source"] = f"half of {lines[-1]['batch']}, which ran out of memory"
        lines.append(line)
        half = line.get("batch", 0) // 2 // 2 * 2  # even: bi_data
        if line.get("status") != "out_of_memory" or len(lines) > 1 or half < 2 or deadline - time.monotonic() < 20:
            return lines
        batch = half


def peer_line(args: argparse.Namespace, preset: str, batch_file: Optional[Path], ours: dict,
              timeout: float) -> list[dict]:
    """The peer's line for ``preset`` on the batch our first setting wrote."""
    what = {"impl": "transformers", "preset": preset}
    if not args.peer:
        return [{**what, "status": "skipped", "reason": "--no-peer"}]
    if not batch_file.exists() or batch_file.stat().st_size == 0:
        return [{**what, "status": "skipped", "reason": f"our setting wrote no batch ({ours.get('status')})"}]
    command = [args.peer_python or sys.executable, str(PEER_SCRIPT), "--batch-file", str(batch_file),
               "--precision", args.precision, "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--preset", preset]
    return run_child(command, timeout, what)


class OneLineParser(argparse.ArgumentParser):
    """Errors as one line, ``accelerator_step.py: error: MESSAGE``, exit 2 (--help shows the usage)."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, before any setting runs, flags no setting can run with (exit 2, one line): each
    preset x remat is resolved as its process will resolve it (the configs' own checks)."""
    import math

    from tfrecords.errors import UsageError
    from trainer.configs.training import REMAT_MODES
    from trainer.models.config import MODEL_PRESETS

    for flag, value, known in (("--presets", args.presets, MODEL_PRESETS), ("--remat", args.remat, REMAT_MODES)):
        unknown = [item for item in value.split(",") if item not in known]
        if unknown:
            parser.error(f"{flag}: {', '.join(map(repr, unknown))} is not one of {', '.join(known)}")
    for flag, value, least in (("--seq-len", args.seq_len, 1), ("--mem-len", args.mem_len, 0),
                               ("--num-predict", args.num_predict, 1), ("--batch", args.batch, 0),
                               ("--device-memory-bytes", args.device_memory_bytes, 0),
                               ("--matmul-size", args.matmul_size, 0), ("--warmup", args.warmup, 1),
                               ("--steps", args.steps, 1)):
        if value < least:
            parser.error(f"{flag} must be at least {least}, got {value}")
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        parser.error(f"--budget-s must be a positive number of seconds, got {args.budget_s:g}")
    if args.num_predict > args.seq_len:
        parser.error(f"--num-predict {args.num_predict} is longer than --seq-len {args.seq_len}")
    for preset in args.presets.split(","):
        for remat in args.remat.split(","):
            try:
                model, train = setting_configs(preset, args.set, args.seq_len, args.mem_len, args.num_predict,
                                               args.precision, remat)
                if args.batch:
                    train.replace(train_batch_size=args.batch).check_model(model)
            except (UsageError, ValueError) as error:
                parser.error(f"preset {preset}, remat {remat}: {error}")


def main() -> int:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="base,large", help="comma-separated model presets (tiny, base, large)")
    parser.add_argument("--remat", default="none,full", help="comma-separated remat modes (none, attention, full)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a model config field for every preset (repeatable), e.g. n_layer=2 for a smoke run")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--mem-len", type=int, default=384)
    parser.add_argument("--num-predict", type=int, default=85)
    parser.add_argument("--precision", default="mixed_bfloat16", choices=("mixed_bfloat16", "float32"))
    parser.add_argument("--batch", type=int, default=0,
                        help="micro-batch for every setting (0: the planner's largest for the device's memory)")
    parser.add_argument("--device-memory-bytes", type=int, default=0,
                        help="memory to plan for where the device reports none (the CPU)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per setting")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (the first compiles)")
    parser.add_argument("--matmul-size", type=int, default=0, help="N of the timed N^3 matmul (0: 8192 GPU, 512 CPU)")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                        help="also time transformers' XLNetLMHeadModel on the same batch")
    parser.add_argument("--peer-python", default="", help="the Python with torch and transformers (default: this one)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="stop starting settings after this many seconds; the rest print 'skipped'")
    parser.add_argument("--output", type=Path, default=None, help="also append the JSON lines to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--peer-batch-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:  # one setting in this process
        preset, remat = args.child.split(":")
        line = run_setting(args, preset, remat)
        line["tensorflow_imported"] = "tensorflow" in sys.modules
        print(json.dumps(line), flush=True)
        assert "tensorflow" not in sys.modules, "the JAX benchmark imported tensorflow"
        return 0

    check_arguments(parser, args)
    start = time.monotonic()
    failed = []  # settings that failed for a reason other than memory: the run exits 1
    deadline = start + args.budget_s
    with tempfile.TemporaryDirectory(prefix="accelerator-step-") as scratch:
        for preset in args.presets.split(","):
            for index, remat in enumerate(args.remat.split(",")):
                if deadline - time.monotonic() < 20:
                    emit({"impl": "ours (keras on jax)", "preset": preset, "remat": remat, "status": "skipped",
                          "reason": f"--budget-s {args.budget_s:g} spent"}, args.output)
                    continue
                batch_file = Path(scratch) / f"{preset}.npz" if index == 0 and args.peer else None
                lines = setting_lines(args, preset, remat, batch_file, deadline)
                for line in lines:
                    emit(line, args.output)
                failed += [line for line in lines if line.get("status") == "failed"]
                if index == 0:  # the peer right after our first setting, on its batch
                    left = deadline - time.monotonic()
                    peer = (peer_line(args, preset, batch_file, lines[-1], left) if left >= 20 else
                            [{"impl": "transformers", "preset": preset, "status": "skipped",
                              "reason": f"--budget-s {args.budget_s:g} spent"}])
                    for line in peer:
                        emit(line, args.output)
                    failed += [line for line in peer if line.get("status") == "failed"]
    emit({"measure": "run", "wall_s": round(time.monotonic() - start, 1), "failed_settings": len(failed),
          "tensorflow_imported": "tensorflow" in sys.modules}, args.output)
    assert "tensorflow" not in sys.modules, "the JAX benchmark imported tensorflow"
    if failed:
        print(f"{parser.prog}: error: {len(failed)} setting(s) failed for a reason other than memory (their "
              "lines say status failed, with the end of their stderr)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
