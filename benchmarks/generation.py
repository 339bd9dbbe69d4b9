"""Generation and scoring speed: the cached two-stream generation against recomputing every token,
against Hugging Face transformers' ``XLNetLMHeadModel.generate`` on the same weights, and scoring a
long text by segments with memory against sliding-window recomputation.

Settings (issue 31): Base-shaped random weights (``--preset base``), a 256-token prompt and 128 new
tokens, greedy, batch 1 and 8; no stop token, so every row makes all its tokens.

* ``cached``: ``trainer.models.generation.generate`` (one ``tf.while_loop`` over the per-layer key /
  value cache) as one ``tf.function``: tokens/s over the whole call, prompt included. The time of
  single tokens comes from ``extend_generation`` called step by step (one compiled step per token):
  token k is the k-th step after the prompt's pass; each figure is the median of the steps k-2..k+2.
* ``uncached``: every token recomputes the full two-stream pass over prompt + tokens so far
  (``uncached_next_logits``, the reference the cache equals). Its length changes every token, so
  a compiled pass is traced per length: it is timed at 5 numbers of tokens so far (0, 31, 63, 95,
  127) and the 128-token total is the trapezoid sum over those points (the cost is linear in the
  length, so the interpolation error is small); the line says so.
* ``peer``: transformers' ``generate`` (greedy, ``min_new_tokens`` = ``max_new_tokens``) in its own
  venv (benchmarks/peers/setup_transformers.sh, /tmp/peer-transformers), loading our weights
  written in its format. Its factorisation is not ours (every earlier token sees every other, so
  its tokens may differ); the line reports how many greedy tokens agree. Skipped when the venv is
  missing (``--no-peer`` to skip it always).
* ``weight_floor``: one vector times every weight matrix a step uses, in one graph, the products
  independent (``ms``) or chained as a step chains its layers (``in_turn_ms``): what reading every
  weight once costs on this machine. A batch-1 step reads every weight once and is bound by memory,
  not arithmetic; ``token_32_over_weight_floor`` compares the cached step with ``in_turn_ms``.
* ``floor`` (per batch): a lower bound on the whole cached generation here, ``generation_floor``: the
  prompt's pass as measured, then per further token only the reads no step can avoid (every weight
  once for the step's 2 x batch rows, the cache once). ``bound_over_uncached`` and
  ``bound_over_peer`` are the ratios a generation at that bound would reach: when one is below a
  goal, no implementation of the step meets the goal on this machine.
* ``scoring``: one text of each length in ``--score-lengths`` (random ids), scored with
  ``score_tokens`` in ``--segment-len`` segments with ``--score-mem`` memory, against a sliding
  window that recomputes the previous ``--score-mem`` tokens for every segment (the same context
  for a segment's first token, without reusing states). Seconds and seconds per token per length.

    .venv/bin/python benchmarks/generation.py                        # Base, ~10-15 min on 2 cores
    .venv/bin/python benchmarks/generation.py --preset tiny --prompt-len 16 --new-tokens 8 \\
        --batches 1 --score-lengths 64 128 --segment-len 32 --score-mem 32   # a smoke run
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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PEER_SETUP = REPO / "benchmarks" / "peers" / "setup_transformers.sh"
PEER_VENV = Path(os.environ.get("XLNET_TRANSFORMERS_VENV", "/tmp/peer-transformers"))
# The release vocabulary's ids (the benchmark's ids are random; transformers' config needs these).
SPECIAL_IDS = {"pad": 5, "bos": 1, "eos": 2}
UNCACHED_POINTS = (0, 31, 63, 95, 127)

PEER_SCRIPT = """
import json, sys, time
import torch
from transformers import XLNetLMHeadModel
model_dir, prompt_path, new_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
prompts = json.load(open(prompt_path))
model = XLNetLMHeadModel.from_pretrained(model_dir).eval()
ids = torch.tensor(prompts, dtype=torch.long)
with torch.no_grad():
    model.generate(ids[:, :8], max_new_tokens=2, min_new_tokens=2, do_sample=False)  # warm-up
    began = time.perf_counter()
    out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    seconds = time.perf_counter() - began
print(json.dumps({"seconds": seconds, "tokens": out[:, ids.shape[1]:].tolist(), "threads": torch.get_num_threads()}))
"""


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def build(preset: str, mem_len: int, n_layer: int | None = None):
    """A randomly initialised network of ``preset`` (with ``n_layer`` layers, default the preset's) read in
    natural order with ``mem_len`` memory."""
    import keras

    from trainer.models.config import model_preset
    from trainer.models.inference_network import inference_network
    from trainer.models.network import build_network

    keras.utils.set_random_seed(0)
    config = model_preset(preset)
    return inference_network(build_network(config.replace(n_layer=n_layer) if n_layer else config), mem_len)


def prompts(batch: int, length: int, vocab_size: int, seed: int = 0):
    import numpy as np

    return np.random.default_rng(seed).integers(10, vocab_size, size=(batch, length)).astype("int32")


def timed(fn, *args, repeats: int = 1) -> tuple[float, object]:
    """(the least wall seconds of ``repeats`` calls, the last result): the first call is not timed."""
    import tensorflow as tf

    result = fn(*args)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn(*args)
        _ = [value.numpy() for value in tf.nest.flatten(result)]
        best = min(best, time.perf_counter() - began)
    return best, result


def cached_generation(network, ids, new_tokens: int) -> dict:
    """Tokens/s of the whole cached loop, the time of the prompt's pass and of single tokens."""
    import numpy as np
    import tensorflow as tf

    from trainer.models.generation import extend_generation, generate, start_generation

    lengths = tf.fill([ids.shape[0]], ids.shape[1])
    whole = tf.function(lambda p, n: generate(network, p, n, new_tokens))
    seconds, result = timed(whole, tf.constant(ids), lengths)
    start = tf.function(lambda p, n: start_generation(network, p, n))
    extend = tf.function(lambda cache, tokens: extend_generation(network, cache, tokens))
    prompt_seconds, (cache, logits) = timed(start, tf.constant(ids), lengths, repeats=2)
    steps = []
    for _ in range(new_tokens):
        tokens = tf.argmax(logits, axis=-1, output_type=tf.int32)
        began = time.perf_counter()
        cache, logits = extend(cache, tokens)
        logits.numpy()
        steps.append(time.perf_counter() - began)

    def around(k: int) -> float:  # the median of steps k-2..k+2 (1-based), the first step not counted
        window = steps[max(1, k - 3):min(len(steps), k + 2)] or steps[-1:]
        return float(np.median(window))

    return {"seconds": seconds, "tokens_per_sec": ids.shape[0] * new_tokens / seconds,
            "prompt_seconds": prompt_seconds, "generated": result["generated_ids"].numpy(),
            "token_ms": {str(k): 1000 * around(k) for k in sorted({1, min(32, new_tokens), new_tokens})}}


def uncached_generation(network, ids, new_tokens: int) -> dict:
    """The full two-stream pass per token, timed at UNCACHED_POINTS; the total by the trapezoid rule."""
    import numpy as np
    import tensorflow as tf

    from trainer.models.generation import uncached_next_logits

    lengths = tf.fill([ids.shape[0]], ids.shape[1])
    points = sorted({min(point, new_tokens - 1) for point in UNCACHED_POINTS})
    measured = []
    for done in points:
        so_far = tf.constant(prompts(ids.shape[0], done, network.config.vocab_size, seed=1))
        step = tf.function(lambda p, n, s: uncached_next_logits(network, p, n, s))
        measured.append(timed(step, tf.constant(ids), lengths, so_far, repeats=2)[0])
    per_token = np.interp(np.arange(new_tokens), points, measured)
    seconds = float(per_token.sum())
    return {"seconds": seconds, "tokens_per_sec": ids.shape[0] * new_tokens / seconds,
            "token_ms": {str(done + 1): 1000 * value for done, value in zip(points, measured)},
            "total": f"trapezoid over {len(points)} measured points"}


def weight_floor(network, rows: int = 1, logit_rows: int | None = None) -> dict:
    """The memory floor of reading every weight a step uses once: milliseconds for ``rows`` rows
    times each weight matrix (``logit_rows`` rows, default ``rows``, times the tied embedding, as the
    logits take only the query rows), in one graph. ``ms``: the products independent of each other
    (the runtime overlaps them: the machine's bandwidth); ``in_turn_ms``: each waiting for the one
    before, as a step's layers do. A cached step multiplies 2 x batch rows by every matrix (a
    token's content row and the next position's query row), so at small batches it is bound by
    these, not by arithmetic."""
    import numpy as np
    import tensorflow as tf

    # The r kernels project position encodings once per generation, not per step.
    weights = [v for v in network.weights if len(v.shape) >= 2 and not v.path.endswith("r_kernel")]
    matrices = [tf.reshape(v, [v.shape[0], -1]) for v in weights]
    row_counts = [(logit_rows or rows) if v.path.endswith("embeddings") else rows for v in weights]
    width = max(max(matrix.shape) for matrix in matrices)

    @tf.function
    def read_all(x):
        total = tf.zeros([])
        for matrix, count in zip(matrices, row_counts):
            total += tf.reduce_sum(tf.matmul(x[:count, :matrix.shape[0]], matrix))
        return total

    @tf.function
    def read_in_turn(x):
        # Each product waits for the one before, as a step's layers do: TensorFlow runs them one by one.
        for matrix, count in zip(matrices, row_counts):
            y = tf.tanh(tf.matmul(x[:count, :matrix.shape[0]], matrix))
            x = tf.pad(y, [[0, rows - count], [0, max(0, width - matrix.shape[1])]])[:, :width]
        return x

    seconds, _ = timed(read_all, tf.ones([rows, width]), repeats=20)
    in_turn, _ = timed(read_in_turn, tf.ones([rows, width]), repeats=20)
    megabytes = sum(int(np.prod(matrix.shape)) * matrix.dtype.size for matrix in matrices) / 2 ** 20
    return {"rows": rows, "ms": 1000 * seconds, "in_turn_ms": 1000 * in_turn, "weight_mib": megabytes,
            "gib_per_sec": megabytes / 1024 / seconds}


def cache_floor(network, batch: int) -> dict:
    """Milliseconds to read once what a step's attention must read: every layer's cached keys and
    values of ``batch`` rows (mem_len columns) and its position keys, summed independently (the
    runtime overlaps the reads: the machine's bandwidth)."""
    import tensorflow as tf

    config = network.config
    tensors = [tf.ones([batch, config.n_head, config.mem_len, config.d_head]) for _ in range(2 * config.n_layer)]
    tensors += [tf.ones([1, config.n_head, config.mem_len + 2, config.d_head]) for _ in range(config.n_layer)]

    @tf.function
    def read_all():
        return tf.add_n([tf.reduce_sum(tensor) for tensor in tensors])

    seconds, _ = timed(read_all, repeats=20)
    megabytes = sum(int(tensor.shape.num_elements()) * tensor.dtype.size for tensor in tensors) / 2 ** 20
    return {"ms": 1000 * seconds, "cache_mib": megabytes}


def generation_floor(network, batch: int, prompt_seconds: float, new_tokens: int) -> dict:
    """A lower bound on a whole cached generation in TensorFlow on this machine: the prompt's pass as
    measured (``prompt_seconds``, the dense forward pass over the prompt that gives the first token;
    any implementation makes one), then for each further token only the reads a step cannot avoid:
    every weight once for its 2 x batch rows (the products independent: ``weight_floor``'s ``ms``)
    and the cache once (``cache_floor``). No attention arithmetic, no layer norms, no per-op cost is
    counted. ``weights_in_turn_ms``: the same weight reads chained, as a step's layers chain them."""
    weights = weight_floor(network, 2 * batch, batch)
    cache = cache_floor(network, batch)
    step_ms = weights["ms"] + cache["ms"]
    seconds = prompt_seconds + (new_tokens - 1) * step_ms / 1000
    return {"prompt_seconds": prompt_seconds, "weights_ms": weights["ms"], "weights_in_turn_ms": weights["in_turn_ms"],
            "cache_ms": cache["ms"], "step_ms": step_ms, "seconds": seconds,
            "tokens_per_sec": batch * new_tokens / seconds}


def peer_python() -> Path | None:
    if not (PEER_VENV / "bin" / "python").exists():
        return None
    return PEER_VENV / "bin" / "python"


def peer_generation(network, ids, new_tokens: int, workdir: str) -> dict:
    """transformers' generate on our weights, in the peer venv."""
    import safetensors.numpy

    from trainer.conversion.huggingface_format import export_tensors, huggingface_config

    model_dir = os.path.join(workdir, "hf")
    if not os.path.exists(model_dir):
        os.makedirs(model_dir)
        with open(os.path.join(model_dir, "config.json"), "w") as file:
            json.dump(huggingface_config(network.config, SPECIAL_IDS), file)
        safetensors.numpy.save_file(export_tensors(network), os.path.join(model_dir, "model.safetensors"))
    prompt_path = os.path.join(workdir, "prompts.json")
    with open(prompt_path, "w") as file:
        json.dump(ids.tolist(), file)
    out = subprocess.run([str(peer_python()), "-c", PEER_SCRIPT, model_dir, prompt_path, str(new_tokens)],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"the transformers peer failed: {out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"seconds": result["seconds"], "tokens_per_sec": ids.shape[0] * new_tokens / result["seconds"],
            "tokens": result["tokens"], "threads": result["threads"]}


def scoring(network, length: int, segment_len: int) -> dict:
    """Seconds to score one ``length``-token text by segments with memory, and by a sliding window."""
    import tensorflow as tf

    from trainer.models.scoring import score_segment, score_tokens

    ids = tf.constant(prompts(1, length, network.config.vocab_size, seed=2))
    segment = tf.function(lambda *args: score_segment(network, *args))
    with_memory = lambda: score_tokens(network, ids, [length], [1], segment_len, segment_fn=segment)  # noqa: E731
    memory_seconds, _ = timed(with_memory)
    window = network.config.mem_len

    def sliding():
        # Each segment recomputed with the `window` tokens before it as context, no memory.
        pieces = []
        for start in range(0, length, segment_len):
            first = max(0, start - window)
            chunk = ids[:, first:start + segment_len]
            width = chunk.shape[1]
            is_target = tf.range(width)[None, :] >= (start - first if start else 1)
            pieces.append(segment(chunk, tf.ones_like(chunk), is_target, None)[0])
        return tf.concat(pieces, axis=1)

    sliding_seconds, _ = timed(sliding)
    return {"tokens": length, "memory_seconds": memory_seconds, "sliding_seconds": sliding_seconds,
            "memory_ms_per_token": 1000 * memory_seconds / length,
            "sliding_ms_per_token": 1000 * sliding_seconds / length}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--preset", default="base", help="model shape (random weights)")
    parser.add_argument("--n-layer", type=int, default=None,
                        help="layers of that shape (default: the preset's; fewer for a smoke run)")
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 8],
                        help="batch sizes of the generation part (none: scoring only)")
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True,
                        help="time transformers' generate too (when its venv exists)")
    parser.add_argument("--score-lengths", type=int, nargs="*", default=[4096, 8192, 16384],
                        help="text lengths of the scoring part (none: generation only)")
    parser.add_argument("--segment-len", type=int, default=512)
    parser.add_argument("--score-mem", type=int, default=512)
    args = parser.parse_args(argv)

    import numpy as np

    network = build(args.preset, args.prompt_len + args.new_tokens, args.n_layer)  # the cache holds every position
    config = network.config
    emit(kind="settings", preset=args.preset, n_layer=config.n_layer, d_model=config.d_model,
         prompt_len=args.prompt_len, new_tokens=args.new_tokens, mem_len=config.mem_len)
    peer = peer_python() if args.peer else None
    if args.peer and peer is None:
        emit(kind="note", note=f"no transformers venv at {PEER_VENV}: run {PEER_SETUP.relative_to(REPO)}; "
                               "the peer is skipped")
    floor = weight_floor(network)
    emit(kind="weight_floor", **floor)
    with tempfile.TemporaryDirectory() as workdir:
        for batch in args.batches:
            ids = prompts(batch, args.prompt_len, config.vocab_size)
            cached = cached_generation(network, ids, args.new_tokens)
            uncached = uncached_generation(network, ids, args.new_tokens)
            token_32 = cached["token_ms"][str(min(32, args.new_tokens))]
            row = {"kind": "generation", "batch": batch,
                   "cached": {k: v for k, v in cached.items() if k != "generated"}, "uncached": uncached,
                   "cached_over_uncached": uncached["seconds"] / cached["seconds"],
                   "token_128_over_token_1": (cached["token_ms"][str(args.new_tokens)] / cached["token_ms"]["1"]),
                   "token_32_over_weight_floor": token_32 / floor["in_turn_ms"]}
            bound = generation_floor(network, batch, cached["prompt_seconds"], args.new_tokens)
            row.update(floor=bound, bound_over_uncached=uncached["seconds"] / bound["seconds"],
                       token_32_over_floor_step=token_32 / bound["step_ms"])
            if peer is not None:
                theirs = peer_generation(network, ids, args.new_tokens, workdir)
                agree = float(np.mean(np.asarray(theirs.pop("tokens")) == cached["generated"]))
                row["peer"] = {**theirs, "greedy_tokens_agreeing": agree}
                row["cached_over_peer"] = theirs["seconds"] / cached["seconds"]
                row["bound_over_peer"] = theirs["seconds"] / bound["seconds"]
            emit(**row)
    if not args.score_lengths:
        return 0
    scorer = build(args.preset, args.score_mem, args.n_layer)
    rows = [scoring(scorer, length, args.segment_len) for length in args.score_lengths]
    for row in rows:
        emit(kind="scoring", segment_len=args.segment_len, mem_len=args.score_mem, **row,
             memory_over_sliding_speed=row["sliding_seconds"] / row["memory_seconds"])
    first, last = rows[0], rows[-1]
    emit(kind="scoring_linearity", lengths=[first["tokens"], last["tokens"]],
         length_ratio=last["tokens"] / first["tokens"], time_ratio=last["memory_seconds"] / first["memory_seconds"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
