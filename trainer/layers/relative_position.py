"""Relative positional encoding (sinusoid over relative distances) and rel_shift.

XLNet scores a query at position ``i`` against a key at position ``j`` with the encoding of
the distance ``(mlen + i) - j``. The encoding is computed once per step for all distances
``klen .. -qlen + 1`` (bidirectional) or ``klen .. 0`` (unidirectional) and each score row is
then shifted so that entry ``[i, j]`` picks distance ``(mlen + i) - j``.
"""
from __future__ import annotations

import keras
import tensorflow as tf

from trainer.layers.dropout import HashDropout


def relative_distances(klen: int, qlen: int, attn_type: str, clamp_len: int) -> tf.Tensor:
    """Forward distances, float32 [rlen]: klen, klen-1, ..., -qlen+1 ('bi') or ..., 0 ('uni').

    ``clamp_len > 0`` clips every distance into [-clamp_len, clamp_len].
    """
    end = -qlen if attn_type == "bi" else -1
    distances = tf.range(klen, end, -1, dtype=tf.float32)
    if clamp_len > 0:
        distances = tf.clip_by_value(distances, -float(clamp_len), float(clamp_len))
    return distances


def sinusoid(distances: tf.Tensor, d_model: int) -> tf.Tensor:
    """[rlen] distances -> [rlen, d_model] encoding: concat(sin(d * f), cos(d * f)), f = 1/10000^(2k/d)."""
    inv_freq = 1.0 / (10000.0 ** (tf.range(0, d_model, 2, dtype=tf.float32) / float(d_model)))
    angles = distances[:, None] * inv_freq[None, :]
    return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


def rel_shift(scores: tf.Tensor, klen: int) -> tf.Tensor:
    """[B, N, qlen, rlen] scores over distance indices -> [B, N, qlen, klen] with [i, j] <- [i, qlen - i + j].

    With distances ``klen - p`` at index ``p`` this gives entry ``[i, j]`` the distance
    ``(klen - qlen) + i - j = (mlen + i) - j``. Implemented with the reshape trick (no gather):
    viewing the rows as one flat buffer, dropping the first ``qlen`` values shifts row ``i``
    left by ``qlen - i``. tf.slice rather than [] indexing: its gradient is a Pad, which is
    about 8x faster on CPU than StridedSliceGrad on these shapes.
    """
    batch, heads = tf.shape(scores)[0], tf.shape(scores)[1]
    qlen, rlen = scores.shape[-2], scores.shape[-1]
    flat = tf.reshape(scores, tf.stack([batch, heads, qlen * rlen]))
    flat = tf.slice(flat, [0, 0, qlen], [-1, -1, qlen * (rlen - 1)])
    shifted = tf.reshape(flat, tf.stack([batch, heads, qlen, rlen - 1]))
    return tf.slice(shifted, [0, 0, 0, 0], [-1, -1, -1, klen])


def gather_relative(scores: tf.Tensor, query_positions: tf.Tensor, qlen: int, klen: int) -> tf.Tensor:
    """rel_shift for an arbitrary subset of query rows.

    scores: [B, N, P, rlen] scores of P query rows against every distance index.
    query_positions: [B, P] int32 position (0..qlen-1) of each query row in the segment.
    Returns [B, N, P, klen] with [.., p, j] <- [.., p, qlen - query_positions[p] + j], i.e.
    distance ``(mlen + t_p) - j``. Indices off the table (keys a mask hides: past it for 'uni'
    attention, or before it for a cached row that sees only its newest keys) are clipped.
    """
    rlen = scores.shape[-1]
    offsets = qlen - query_positions[:, :, None] + tf.range(klen, dtype=query_positions.dtype)[None, None, :]
    offsets = tf.clip_by_value(offsets, 0, rlen - 1)
    offsets = tf.broadcast_to(offsets[:, None], tf.concat([tf.shape(scores)[:3], [klen]], 0))
    return tf.gather(scores, offsets, batch_dims=3)


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

    def call(self, klen: int, qlen: int, training: bool = False) -> tf.Tensor:
        forward = relative_distances(klen, qlen, self.attn_type, self.clamp_len)
        encodings = [sinusoid(forward, self.d_model)]
        if self.bi_data:
            # The backward half reads its stream reversed: every distance changes sign.
            encodings.append(sinusoid(-forward, self.d_model))
        pos_emb = tf.cast(tf.stack(encodings, axis=0), self.compute_dtype)
        return self.dropout(pos_emb, training=training)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, attn_type=self.attn_type, bi_data=self.bi_data,
                      clamp_len=self.clamp_len, dropout=self.dropout_rate)
        return config
