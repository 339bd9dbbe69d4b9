"""Times Hugging Face transformers' XLNetLMHeadModel train step (PyTorch): the peer of benchmarks/accelerator_step.py.

Reads the batch file one of our settings wrote (accelerator_step.py ``write_peer_batch``): the
compact features, the perm_mask and targets our permutation code built from them, and the model's
dimensions. Builds the model from an ``XLNetConfig`` (random weights, nothing downloaded) and runs
``--warmup`` untimed and ``--steps`` timed steps of: forward with the Transformer-XL memory
(zeros at first, then each step's, as ours), perm_mask, target_mapping, token_type_ids and labels
(-100 on padding target rows), under bf16 autocast (``--precision mixed_bfloat16``); backward;
clip by global norm 1.0; AdamW (fused on CUDA: the fastest the peer offers). Prints one JSON line:
tokens_per_s, step_s, the peak memory (``torch.cuda.max_memory_allocated``, null on the CPU).

Out of memory on the GPU: the batch is halved (kept even under bi_data) and the step tried again,
said so in ``out_of_memory_at``. Without torch or transformers: a line saying the peer was skipped.
Needs only NumPy, torch and transformers (no Keras, no TensorFlow, no code of this project).
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time

# Our feed-forward activations -> transformers' names for the same function.
ACTIVATIONS = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu"}


def build_model(dims: dict, device):
    """XLNetLMHeadModel of ``dims`` (untied biases: transformers keeps one set per layer)."""
    from transformers import XLNetConfig, XLNetLMHeadModel

    config = XLNetConfig(vocab_size=dims["vocab_size"], d_model=dims["d_model"], n_layer=dims["n_layer"],
                         n_head=dims["n_head"], d_head=dims["d_head"], d_inner=dims["d_inner"],
                         ff_activation=ACTIVATIONS[dims["ff_activation"]], attn_type="bi", bi_data=dims["bi_data"],
                         mem_len=dims["mem_len"], reuse_len=dims["reuse_len"], dropout=dims["dropout"],
                         clamp_len=-1, use_mems_train=True)
    return XLNetLMHeadModel(config).to(device).train()


def torch_batch(data: dict, rows: int, device) -> dict:
    """The first ``rows`` rows of the batch file as the model's inputs."""
    import numpy as np
    import torch

    seq_len = data["input_ids"].shape[1]
    positions, valid = data["target_positions"][:rows], data["target_valid"][:rows]
    mapping = (np.arange(seq_len)[None, None, :] == positions[:, :, None]) & valid[:, :, None]
    labels = np.where(valid, data["target"][:rows], -100)
    as_tensor = lambda array, dtype: torch.as_tensor(np.ascontiguousarray(array), dtype=dtype, device=device)
    return {"input_ids": as_tensor(data["input_ids"][:rows], torch.long),
            "token_type_ids": as_tensor(data["segment_ids"][:rows], torch.long),
            "perm_mask": as_tensor(data["perm_mask"][:rows], torch.float32),
            "target_mapping": as_tensor(mapping, torch.float32),
            "labels": as_tensor(labels, torch.long)}


def time_steps(data: dict, dims: dict, rows: int, steps: int, warmup: int, bf16: bool) -> dict:
    """Builds the model and its optimizer and times ``steps`` steps of ``rows`` rows."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = build_model(dims, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6,
                                  fused=device.type == "cuda")
    batch = torch_batch(data, rows, device)
    mems = [torch.zeros(dims["mem_len"], rows, dims["d_model"], device=device) for _ in range(dims["n_layer"])]

    def step(mems):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(**batch, mems=mems, use_mems=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out.loss.detach(), out.mems

    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        loss, mems = step(mems)
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss, mems = step(mems)
    synchronize()
    step_s = (time.perf_counter() - start) / steps
    return {"step_s": round(step_s, 5), "loss": round(float(loss), 4),
            "params": sum(p.numel() for p in model.parameters()), "device": device.type,
            "device_name": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "adamw": "fused" if device.type == "cuda" else "default"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-file", required=True, help="the .npz accelerator_step.py wrote")
    parser.add_argument("--precision", default="mixed_bfloat16", choices=("mixed_bfloat16", "float32"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--preset", default="", help="named in the line")
    args = parser.parse_args()
    line = {"impl": "transformers", "preset": args.preset, "precision": args.precision}
    try:
        import numpy as np
        import torch
        import transformers
    except ImportError as error:
        print(json.dumps({**line, "status": "skipped", "reason": f"torch or transformers missing: {error}"}))
        return 0

    with np.load(args.batch_file) as stored:
        data = {name: stored[name] for name in stored.files}
    dims = json.loads(str(data.pop("model_json")))
    rows, seq_len = data["input_ids"].shape
    line.update(torch=torch.__version__, transformers=transformers.__version__, requested_batch=rows,
                seq_len=seq_len, mem_len=dims["mem_len"], num_predict=data["target_positions"].shape[1],
                n_layer=dims["n_layer"], d_model=dims["d_model"], out_of_memory_at=[])
    out_of_memory = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    step = 2 if dims["bi_data"] else 1
    while rows >= step:
        failed = False
        try:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            result = time_steps(data, dims, rows, args.steps, args.warmup, args.precision == "mixed_bfloat16")
        except out_of_memory:
            failed = True
        if not failed:
            peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
            line.update(result, status="ok", batch=rows, steps=args.steps, warmup=args.warmup,
                        tokens_per_s=round(rows * seq_len / result["step_s"], 1), measured_peak_bytes=peak)
            print(json.dumps(line), flush=True)
            return 0
        line["out_of_memory_at"].append(rows)
        gc.collect()  # outside the except block: the traceback no longer holds the step's tensors
        torch.cuda.empty_cache()
        rows = rows // 2 // step * step
    print(json.dumps({**line, "status": "out_of_memory", "reason": "out of memory at every batch tried"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
