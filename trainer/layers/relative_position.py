"""Relative positional encoding (sinusoid over relative distances) and rel_shift.

XLNet scores a query at position ``i`` against a key at position ``j`` with the encoding of
the distance ``(mlen + i) - j``. The encoding is computed once per step for all distances
``klen .. -qlen + 1`` (bidirectional) or ``klen .. 0`` (unidirectional) and each score row is
then shifted so that entry ``[i, j]`` picks distance ``(mlen + i) - j``.
"""
from __future__ import annotations

from typing import Any

import keras
from keras import ops

from trainer.layers.backend import on_tensorflow
from trainer.layers.dropout import HashDropout


def relative_distances(klen: int, qlen: int, attn_type: str, clamp_len: int) -> Any:
    """Forward distances, float32 [rlen]: klen, klen-1, ..., -qlen+1 ('bi') or ..., 0 ('uni').

    ``clamp_len > 0`` clips every distance into [-clamp_len, clamp_len].
    """
    end = -qlen if attn_type == "bi" else -1
    distances = ops.arange(klen, end, -1, dtype="float32")
    if clamp_len > 0:
        distances = ops.clip(distances, -float(clamp_len), float(clamp_len))
    return distances


def sinusoid(distances: Any, d_model: int) -> Any:
    """[rlen] distances -> [rlen, d_model] encoding: concat(sin(d * f), cos(d * f)), f = 1/10000^(2k/d)."""
    inv_freq = 1.0 / (10000.0 ** (ops.arange(0, d_model, 2, dtype="float32") / float(d_model)))
    angles = distances[:, None] * inv_freq[None, :]
    return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)


def rel_shift(scores: Any, klen: int) -> Any:
    """[B, N, qlen, rlen] scores over distance indices -> [B, N, qlen, klen] with [i, j] <- [i, qlen - i + j].

    With distances ``klen - p`` at index ``p`` this gives entry ``[i, j]`` the distance
    ``(klen - qlen) + i - j = (mlen + i) - j``. Implemented with the reshape trick (no gather):
    viewing the rows as one flat buffer, dropping the first ``qlen`` values shifts row ``i``
    left by ``qlen - i``. ops.slice rather than [] indexing: on TensorFlow it is tf.slice, whose
    gradient is a Pad, which is about 8x faster on CPU than StridedSliceGrad on these shapes.
    """
    batch, heads, qlen, rlen = ops.shape(scores)  # TensorFlow: a tensor for each size not known statically
    flat = ops.reshape(scores, (batch, heads, qlen * rlen))
    flat = ops.slice(flat, (0, 0, qlen), (batch, heads, qlen * (rlen - 1)))
    shifted = ops.reshape(flat, (batch, heads, qlen, rlen - 1))
    return ops.slice(shifted, (0, 0, 0, 0), (batch, heads, qlen, klen))


def gather_relative(scores: Any, query_positions: Any, qlen: int, klen: int) -> Any:
    """rel_shift for an arbitrary subset of query rows.

    scores: [B, N, P, rlen] scores of P query rows against every distance index.
    query_positions: [B, P] int32 position (0..qlen-1) of each query row in the segment.
    Returns [B, N, P, klen] with [.., p, j] <- [.., p, qlen - query_positions[p] + j], i.e.
    distance ``(mlen + t_p) - j``. Indices off the table (keys a mask hides: past it for 'uni'
    attention, or before it for a cached row that sees only its newest keys) are clipped.
    """
    rlen = scores.shape[-1]
    offsets = qlen - query_positions[:, :, None] + ops.arange(klen, dtype=query_positions.dtype)[None, None, :]
    offsets = ops.clip(offsets, 0, rlen - 1)[:, None]  # [B, 1, P, klen]
    if on_tensorflow():
        # ops.take_along_axis casts the indices to int64 on TensorFlow: twice the memory that
        # trainer/planning/memory.py counts for them.
        from trainer.layers import tensorflow_gather

        return tensorflow_gather.gather_last_axis(scores, offsets)
    # One flat index per value, not take_along_axis's four coordinates per value: on JAX's CPU
    # backend the gather and its scatter-add gradient take about a fifth of the time (measured on
    # [8, 8, 42, 704] scores: 3.8 ms against 20.2 ms forward and backward; docs/benchmarks.md).
    batch, heads, rows = ops.shape(scores)[:3]
    row_starts = ops.reshape(ops.arange(batch * heads * rows, dtype=offsets.dtype) * rlen, (batch, heads, rows, 1))
    picked = ops.take(ops.reshape(scores, (-1,)), ops.reshape(row_starts + offsets, (-1,)))
    return ops.reshape(picked, (batch, heads, rows, klen))


class RelativePositionEncoding(keras.layers.Layer):
    """Sinusoid encoding of relative distances, with bi_data and clamp_len.

    Call: ``(klen, qlen)`` python ints -> [G, rlen, d_model] in the compute dtype, where G = 2
    with bi_data (row 0 forward distances for the first half of the batch, row 1 negated
    distances for the backward half) and G = 1 otherwise; rlen = klen + qlen ('bi') or
    klen + 1 ('uni'). Dropout (training only) follows the reference.
    """

    def __init__(self, d_model: int, attn_type: str = "bi", bi_data: bool = False, clamp_len: int = -1,
                 dropout: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.attn_type = attn_type
        self.bi_data = bi_data
        self.clamp_len = clamp_len
        self.dropout_rate = dropout
        self.dropout = HashDropout(dropout, dtype=self.dtype_policy)

    def call(self, klen: int, qlen: int, training: bool = False) -> Any:
        forward = relative_distances(klen, qlen, self.attn_type, self.clamp_len)
        encodings = [sinusoid(forward, self.d_model)]
        if self.bi_data:
            # The backward half reads its stream reversed: every distance changes sign.
            encodings.append(sinusoid(-forward, self.d_model))
        pos_emb = ops.cast(ops.stack(encodings, axis=0), self.compute_dtype)
        return self.dropout(pos_emb, training=training)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, attn_type=self.attn_type, bi_data=self.bi_data,
                      clamp_len=self.clamp_len, dropout=self.dropout_rate)
        return config
