"""Times one full XLNet pretraining step (forward, backward, clip, AdamW) and the TF Model Garden peer.

Prints one JSON line per measurement: ours for each precision x XLA setting, the matmul peak
of this machine measured in the same run (per dtype), and the Model Garden XLNetBase step on the
same shapes (run in its own venv from the peer's directory, XLNET_PEER_DIR). Default shapes are the
peer's: 6 layers, d_model 512, 8 heads, d_inner 2048, seq_len 256, mem_len 192, num_predict 42,
batch 8, vocab 32000, bi_data, untied biases.

    .venv/bin/python benchmarks/train_step.py                  # everything, peer included
    .venv/bin/python benchmarks/train_step.py --modes fp32:xla --no-peer --steps 3
    .venv/bin/python benchmarks/train_step.py --modes fp32:xla,fp32:jax --no-peer --rounds 2   # the two engines, A B A B

Mode ``jax`` is the JAX engine's step (trainer/runtime/jax_step.py, jitted, run by `xlnet train
--backend jax`) on the same shapes and batch, in a process under KERAS_BACKEND=jax; the other modes
are the TensorFlow engine's step (a tf.function, with or without XLA).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# The peer lives beside the checkout (the workspace's shared/peers), overridable for other layouts.
PEER_DIR = Path(os.environ.get("XLNET_PEER_DIR", REPO.parent / "shared" / "peers"))
PEER_VENV = Path(os.environ.get("XLNET_PEER_VENV", "/tmp/peer-model-garden"))
from trainer.planning.devices import measured_matmul_peak  # noqa: E402
from trainer.planning.flops import model_flops_per_step  # noqa: E402  (one FLOPs rule, shared with xlnet plan)
from trainer.runtime.throughput import utilisation  # noqa: E402  (one MFU rule, shared with the step log)

SHAPES = dict(n_layer=6, d_model=512, n_head=8, d_inner=2048, seq_len=256, mem_len=192, num_predict=42, batch=8,
              vocab=32000)


def matmul_peak(dtype_name: str) -> float:
    """Best FLOP/s of a [2048, 2048] matmul in ``dtype_name`` on this machine now."""
    return measured_matmul_peak(dtype_name, size=2048, repeats=6)


def time_ours(precision: str, jit: bool, steps: int, query_rows: str = "targets", warmup: int = 2) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    from trainer.models.config import ModelConfig
    from trainer.models.pretrainer import XLNetPretrainer

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    keras.utils.set_random_seed(0)
    s = SHAPES
    config = ModelConfig(vocab_size=s["vocab"], n_layer=s["n_layer"], d_model=s["d_model"], n_head=s["n_head"],
                         d_head=s["d_model"] // s["n_head"], d_inner=s["d_inner"], untie_r=True, bi_data=True,
                         mem_len=s["mem_len"], reuse_len=s["seq_len"] // 2, dropout=0.1, dropatt=0.1)
    B, L = s["batch"], s["seq_len"]
    pretrainer = XLNetPretrainer(config, L, s["num_predict"], perm_size=L // 2, special_ids={"sep": 4, "cls": 3})
    variables = pretrainer.network.trainable_variables
    optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
    optimizer.build(variables)
    features = {name: tf.constant(value) for name, value in synthetic_features(np.random.default_rng(0)).items()}
    mems = pretrainer.network.initial_mems(B)

    def step(features, mems):
        with tf.GradientTape() as tape:
            out = pretrainer.compute(features, mems, training=True)
        grads = tape.gradient(out["loss"], variables)
        grads, _ = tf.clip_by_global_norm(grads, 1.0)
        optimizer.apply_gradients(zip(grads, variables))
        return out["loss"], out["new_mems"]

    compiled = tf.function(step, jit_compile=jit)
    for _ in range(warmup):
        loss, mems = compiled(features, mems)
    float(loss)
    start = time.perf_counter()
    for _ in range(steps):
        loss, mems = compiled(features, mems)
    float(loss)
    step_s = (time.perf_counter() - start) / steps
    return {"impl": "ours", "precision": precision, "jit": jit, "step_s": round(step_s, 4),
            "tokens_per_s": round(B * L / step_s, 1), "loss": round(float(loss), 4),
            "params": int(sum(np.prod(v.shape) for v in variables))}


def synthetic_features(rng) -> dict:
    """The benchmark's batch as NumPy arrays (one for both engines)."""
    import numpy as np

    s = SHAPES
    B, L = s["batch"], s["seq_len"]
    ids = rng.integers(10, s["vocab"], [B, L])
    ids[:, L - 3], ids[:, L - 1] = 4, 3
    return {"input_ids": ids.astype(np.int32),
            "segment_ids": np.repeat([[0] * (L // 2 + 40) + [1] * (L // 2 - 41) + [2]], B, 0).astype(np.int32),
            "is_masked": rng.random([B, L]) < s["num_predict"] / L * 0.95,
            "perm_seed": rng.integers(0, 2 ** 30, [B, 2]).astype(np.int32)}


def time_jax(precision: str, steps: int, warmup: int = 2) -> dict:
    """The JAX engine's step on the shapes: XLNetPretrainer under PretrainingStep (clip, AdamW, schedule)."""
    import jax
    import keras
    import numpy as np

    from trainer.configs.training import TrainConfig
    from trainer.models.config import ModelConfig
    from trainer.models.pretrainer import XLNetPretrainer
    from trainer.runtime.jax_step import PretrainingStep

    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    s = SHAPES
    config = ModelConfig(vocab_size=s["vocab"], n_layer=s["n_layer"], d_model=s["d_model"], n_head=s["n_head"],
                         d_head=s["d_model"] // s["n_head"], d_inner=s["d_inner"], untie_r=True, bi_data=True,
                         mem_len=s["mem_len"], reuse_len=s["seq_len"] // 2, dropout=0.1, dropatt=0.1)
    B, L = s["batch"], s["seq_len"]
    train = TrainConfig(seq_len=L, num_predict=s["num_predict"], perm_size=L // 2, train_batch_size=B,
                        learning_rate=1e-4, clip_norm=1.0,
                        precision="mixed_bfloat16" if precision == "bf16" else "float32")
    pretrainer = XLNetPretrainer(config, L, s["num_predict"], perm_size=L // 2, special_ids={"sep": 4, "cls": 3})
    step = PretrainingStep(pretrainer, train)
    batch = {name: jax.device_put(value) for name, value in synthetic_features(np.random.default_rng(0)).items()}
    state = step.initial_state(B)
    for _ in range(warmup):
        state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
        state, metrics = step(state, batch)
    loss = float(np.asarray(metrics["loss"]))
    step_s = (time.perf_counter() - start) / steps
    return {"impl": "ours (JAX engine)", "precision": precision, "jit": True, "step_s": round(step_s, 4),
            "tokens_per_s": round(B * L / step_s, 1), "loss": round(loss, 4),
            "params": int(sum(np.prod(v.shape) for v in pretrainer.network.trainable_variables))}


def time_query_rows(steps: int) -> list[dict]:
    """Query-stream attention of one layer (forward + backward) on the P target rows (ours) versus
    on all L positions with the targets picked afterwards (the original's layout)."""
    import numpy as np
    import tensorflow as tf

    from trainer.layers import RelativePositionEncoding, TwoStreamRelativeAttention

    s = SHAPES
    B, L, P, D, N = s["batch"], s["seq_len"], s["num_predict"], s["d_model"], s["n_head"]
    H, K = D // N, s["mem_len"] + s["seq_len"]
    layer = TwoStreamRelativeAttention(D, N, H)
    rng = np.random.default_rng(0)
    normal = lambda *shape: tf.constant(rng.normal(0, 1, shape), tf.float32)
    queries, keys, values = normal(B, N, L, H), normal(B, N, K, H), normal(B, N, K, H)
    pos_emb = RelativePositionEncoding(D, bi_data=True)(klen=K, qlen=L)
    k_r = tf.transpose(tf.reshape(tf.einsum("grd,dk->grk", pos_emb, tf.reshape(layer.r_kernel, [D, -1])),
                                  [2, -1, N, H]), [0, 2, 1, 3])
    positions = tf.constant(np.sort(np.stack([rng.choice(L, P, replace=False) for _ in range(B)]), 1), tf.int32)
    mask = tf.constant(rng.random([B, L, K]) < 0.5)
    segments = tf.constant(rng.random([B, L, K]) < 0.5)
    biases = tuple(normal(N, H) for _ in range(3)) + (normal(2, N, H),)

    def targets_only(q):
        rows = tf.gather(q, positions, axis=2, batch_dims=1)
        return layer._attend(rows, keys, values, k_r, positions, L, tf.gather(segments, positions, batch_dims=1),
                             tf.gather(mask, positions, batch_dims=1), biases, seed=None, training=False)

    def all_positions(q):
        out = layer._attend(q, keys, values, k_r, None, L, segments, mask, biases, seed=None, training=False)
        return tf.gather(out, positions, axis=2, batch_dims=1)

    results = []
    for name, fn in (("targets", targets_only), ("all_positions", all_positions)):
        def step(q, fn=fn):
            with tf.GradientTape() as tape:
                tape.watch(q)
                loss = tf.reduce_sum(tf.square(fn(q)))
            return tape.gradient(loss, q)

        compiled = tf.function(step)
        compiled(queries)
        best = float("inf")
        for _ in range(max(steps, 3)):
            start = time.perf_counter()
            float(tf.reduce_sum(compiled(queries)))
            best = min(best, time.perf_counter() - start)
        results.append({"measure": "query_stream_attention_fwd_bwd_one_layer", "rows": name,
                        "ms": round(best * 1000, 1)})
    return results


def run_isolated(args: list[str]) -> list[dict]:
    """Runs this script in a fresh process (one precision policy / XLA setting per process; a ``jax``
    mode under KERAS_BACKEND=jax)."""
    backend = "jax" if any(arg.endswith(":jax") for arg in args) else "tensorflow"
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False,
                         env=dict(os.environ, KERAS_BACKEND=backend))
    if out.returncode:
        raise RuntimeError(f"benchmark child failed: {out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def peer_python() -> Path:
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        print(json.dumps({"note": f"peer venv missing at {PEER_VENV}; running setup_model_garden.sh"}), flush=True)
        venv = subprocess.run([str(PEER_DIR / "setup_model_garden.sh")], capture_output=True, text=True, check=True)
        python = Path(venv.stdout.strip().splitlines()[-1]) / "bin" / "python"
    return python


def time_peer(jit: bool, steps: int) -> dict:
    s = SHAPES
    env = dict(os.environ, NL=str(s["n_layer"]), DM=str(s["d_model"]), DI=str(s["d_inner"]), SEQ=str(s["seq_len"]),
               MEM=str(s["mem_len"]), NP=str(s["num_predict"]), BSZ=str(s["batch"]), STEPS=str(steps),
               JIT="1" if jit else "0", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([str(peer_python()), str(PEER_DIR / "model_garden_step.py")], capture_output=True, text=True,
                         env=env, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"peer failed: {out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="fp32:eager,fp32:xla,bf16:eager,bf16:xla",
                        help="comma-separated precision:compile pairs (precision fp32|bf16, compile eager|xla|jax); "
                             "'eager' means tf.function without XLA, 'jax' the JAX engine's jitted step")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per measurement (after the warm-up steps)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps before them, the first compiling (at least 1; 1 for a smoke run)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat ours/peer interleaved this many times")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the TF Model Garden XLNetBase (fp32, without and with XLA)")
    parser.add_argument("--query-rows", action=argparse.BooleanOptionalAction, default=True,
                        help="also time query-stream attention on the target rows vs on all positions")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warmup < 1:
        parser.error(f"--warmup must be at least 1, got {args.warmup}")

    if args.child == "peak":  # the fp32 matmul peak right now (measured next to each peer run)
        print(json.dumps({"matmul_peak_gflops": round(matmul_peak("float32") / 1e9, 1)}), flush=True)
        return 0
    if args.child == "query-rows":
        for result in time_query_rows(args.steps):
            print(json.dumps(result), flush=True)
        return 0
    if args.child:  # one measurement in this process
        precision, compile_mode = args.child.split(":")
        peak_dtype = "bfloat16" if precision == "bf16" else "float32"
        # The peak is the best of timings before and after the steps (each the best of 6 matmuls): one
        # timing taken while the machine was busy came out below the step's own rate (MFU 1.036).
        timings = [matmul_peak(peak_dtype)]
        result = (time_jax(precision, args.steps, warmup=args.warmup) if compile_mode == "jax" else
                  time_ours(precision, compile_mode == "xla", args.steps, warmup=args.warmup))
        timings.append(matmul_peak(peak_dtype))
        peak = max(timings)
        fp32_peak = peak if precision == "fp32" else matmul_peak("float32")
        flops = model_flops_per_step(**SHAPES)
        achieved = flops / result["step_s"]
        mfu, divided_by = utilisation(achieved, peak)  # never above 1 (trainer/runtime/throughput.py)
        result.update(model_tflops_per_step=round(flops / 1e12, 4), matmul_peak_gflops=round(peak / 1e9, 1),
                      matmul_peak_fp32_gflops=round(fp32_peak / 1e9, 1),
                      achieved_gflops=round(achieved / 1e9, 1), mfu=round(mfu, 3),
                      peak_source=f"measured_matmul_peak ({peak_dtype}, 2048 x 2048, best of 6) before and after "
                                  "the timed steps, the higher"
                                  + ("; raised to the step's own rate, which was above it" if divided_by > peak else ""),
                      peak_timings_gflops=[round(timing / 1e9, 1) for timing in timings],
                      mfu_peak_gflops=round(divided_by / 1e9, 1))
        print(json.dumps(result), flush=True)
        return 0

    if args.query_rows:
        for result in run_isolated(["--child", "query-rows", "--steps", str(args.steps)]):
            print(json.dumps(result), flush=True)
    for _ in range(args.rounds):
        peers = {}
        if args.peer:
            for jit in (False, True):
                peak = run_isolated(["--child", "peak"])[0]["matmul_peak_gflops"]
                peers[jit] = dict(time_peer(jit, args.steps), matmul_peak_gflops_fp32_adjacent=peak)
                print(json.dumps(peers[jit]), flush=True)
        for mode in args.modes.split(","):
            for result in run_isolated(["--child", mode, "--steps", str(args.steps), "--warmup", str(args.warmup)]):
                if peers:
                    # The machine is shared: besides the raw ratio, compare throughput per unit of the
                    # fp32 matmul peak measured next to each run (robust to other users' load).
                    peer = max(peers.values(), key=lambda p: p["tokens_per_s"] / p["matmul_peak_gflops_fp32_adjacent"])
                    own_peak = result["matmul_peak_fp32_gflops"]
                    result["peer_tokens_per_s"] = max(p["tokens_per_s"] for p in peers.values())
                    result["speedup_vs_peer_raw"] = round(result["tokens_per_s"] / result["peer_tokens_per_s"], 2)
                    result["speedup_vs_peer_peak_normalised"] = round(
                        (result["tokens_per_s"] / own_peak) / (peer["tokens_per_s"] / peer["matmul_peak_gflops_fp32_adjacent"]), 2)
                print(json.dumps({**SHAPES, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
