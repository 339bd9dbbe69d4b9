"""FLOPs of one training step (the model's matmuls), and what remat adds to them.

One rule for every caller: `xlnet plan` turns it into step time, benchmarks/train_step.py into
the measured model FLOPs utilisation (MFU).
"""
from __future__ import annotations


def layer_forward_flops(d_model: int, d_inner: int, rows: int, seq_len: int, mem_len: int, batch: int,
                        bi_data: bool, query_rows: int = 0) -> dict[str, float]:
    """Matmul FLOPs of one layer's forward pass, split into "attention" (the scores against keys
    and positions and the product with the values: what remat=attention recomputes) and "rest"
    (the projections and the feed-forward). ``rows``: content rows per sequence; ``query_rows``:
    the query stream's rows (0 without one)."""
    B, L, M, D, Di = batch, seq_len, mem_len, d_model, d_inner
    K, R = M + L, M + 2 * L
    attention = 2 * B * (rows + query_rows) * D * (2 * K + R)
    rest = 2 * B * L * D * D * 2 + 2 * B * K * D * D * 2 + 2 * (2 if bi_data else 1) * R * D * D \
        + 4 * B * L * D * Di
    if query_rows:
        rest += 2 * B * query_rows * D * D * 2 + 4 * B * query_rows * D * Di
    return {"attention": float(attention), "rest": float(rest)}


def model_flops_per_step(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, batch, vocab, bi_data=True,
                         head="lm", **_) -> float:
    """Matmul FLOPs of one training step (3x forward): content stream on every position, query stream
    on the num_predict target rows only (none when 0: fine-tuning), relative-position projection on
    the 2 bi_data directions (1 without bi_data); the LM head on the targets, or the SQuAD end-logit
    layer on every position ([h ; h_start] -> d_model)."""
    layer = layer_forward_flops(d_model, d_inner, seq_len, seq_len, mem_len, batch, bi_data, num_predict)
    head_flops = {"lm": 2 * batch * num_predict * d_model * vocab,
                  "squad": 2 * batch * seq_len * 2 * d_model * d_model}.get(head, 0)
    return 3.0 * (n_layer * (layer["attention"] + layer["rest"]) + head_flops)


def recomputed_flops_per_step(n_layer, d_model, d_inner, seq_len, mem_len, num_predict, batch, bi_data=True,
                              remat="none", **_) -> float:
    """FLOPs the backward pass spends recomputing under ``remat``: each layer's attention core
    (attention) or its forward pass but the feed-forward's second matmul, whose output no gradient
    reads (full: XLNetBlock's ``output_norm``)."""
    if remat == "none":
        return 0.0
    layer = layer_forward_flops(d_model, d_inner, seq_len, seq_len, mem_len, batch, bi_data, num_predict)
    if remat == "attention":
        return float(n_layer * layer["attention"])
    last_matmul = 2 * batch * (seq_len + num_predict) * d_inner * d_model
    return float(n_layer * (layer["attention"] + layer["rest"] - last_matmul))


def segment_memory_length(index: int, seq_len: int, mem_len: int) -> int:
    """Memory states segment ``index`` (from 0) of a long document reads: the first reads none,
    each later one the last ``mem_len`` states of the segments before it."""
    return min(mem_len, index * seq_len)


def earlier_segments_flops(segments: int, n_layer: int, d_model: int, d_inner: int, seq_len: int, mem_len: int,
                           batch: int, **_) -> float:
    """Matmul FLOPs of the forward-only passes of a long document's ``segments - 1`` segments
    before the last (fine-tuning with max_segments > 1): each layer's forward pass over its memory
    (``segment_memory_length``), no backward pass, no head. 0 with one segment."""
    return float(sum(n_layer * sum(layer_forward_flops(d_model, d_inner, seq_len, seq_len,
                                                       segment_memory_length(index, seq_len, mem_len), batch,
                                                       False).values())
                     for index in range(segments - 1)))
