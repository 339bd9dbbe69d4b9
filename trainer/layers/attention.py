"""Two-stream relative multi-head attention (XLNet), with relative segment encoding.

Both streams share the q/k/v/r/o projections and the LayerNorm: keys and values always come
from the content stream (plus memory), queries come from the content stream ``h`` or from the
query stream ``g``. The query stream is evaluated only on its P target rows.
"""
from __future__ import annotations

import math

import keras
import tensorflow as tf

from trainer.layers.relative_position import gather_relative, rel_shift

LAYER_NORM_EPSILON = 1e-12


def mask_fill_value(dtype: tf.DType) -> float:
    """The large negative written into blocked attention scores, representable in ``dtype``.

    -1e30 (the reference's constant) overflows float16 to -inf, which turns a fully blocked
    row into NaN; -65500 still gives such entries exactly zero weight after softmax.
    """
    return -65500.0 if tf.as_dtype(dtype) == tf.float16 else -1e30


def relative_segment_difference(query_segments: tf.Tensor, key_segments: tf.Tensor) -> tf.Tensor:
    """[B, Q] and [B, K] segment ids -> [B, Q, K] bool, True where the segments differ.

    Relative segment encoding only asks "same segment or not"; memory positions count as
    segment 0 (the caller prepends zeros for them).
    """
    return tf.not_equal(query_segments[:, :, None], key_segments[:, None, :])


def _relative_positions_scores(q_r: tf.Tensor, k_r: tf.Tensor) -> tf.Tensor:
    """[B, Q, N, H] queries x [G, R, N, H] position keys -> [B, N, Q, R].

    With bi_data (G = 2) the first half of the batch uses group 0 and the second half group 1,
    so the position projection is computed for G rows instead of B.
    """
    groups = k_r.shape[0]
    if groups == 1:
        return tf.einsum("bqnh,rnh->bnqr", q_r, k_r[0])
    batch, qlen, n_head, d_head = tf.unstack(tf.shape(q_r))
    grouped = tf.reshape(q_r, [groups, -1, qlen, n_head, d_head])
    scores = tf.einsum("gxqnh,grnh->gxnqr", grouped, k_r)
    return tf.reshape(scores, [batch, n_head, qlen, k_r.shape[1]])


class TwoStreamRelativeAttention(keras.layers.Layer):
    """Relative multi-head attention over [memory; content] for a content and a query stream.

    Variables: q, k, v, r, o kernels [d_model, n_head, d_head] (no biases) and a LayerNorm
    (epsilon 1e-12). The content/position/segment biases r_w/r_r/r_s [n_head, d_head] and the
    segment embedding [2, n_head, d_head] are passed in, because XLNet may tie them across layers.

    Call arguments:
      h: [B, L, d_model] content stream.  g: [B, P, d_model] query stream or None.
      pos_emb: [G, rlen, d_model] relative position encoding (RelativePositionEncoding).
      mem: [B, M, d_model] memory or None.
      content_mask: [B, L, M + L] bool (True = may not attend) or None.
      query_mask: [B, P, M + L] bool or None.  query_positions: [B, P] int32 target positions.
      query_valid: [B, P] float, 0 for padding rows (their attention output is zeroed, as in
        the reference where a zero target_mapping row maps to nothing).
      content_segment_diff: [B, L, M + L] bool or None; query_segment_diff: [B, P, M + L].
    Returns (h_out [B, L, d_model], g_out [B, P, d_model] or None), each LayerNorm(x + attn(x)).
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0, dropatt: float = 0.0,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.n_head, self.d_head = d_model, n_head, d_head
        self.dropout_rate, self.dropatt_rate = dropout, dropatt
        self.initializer_range = initializer_range
        self.scale = 1.0 / math.sqrt(d_head)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="layer_norm",
                                                          dtype=self.dtype_policy)
        self.output_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.attention_dropout = keras.layers.Dropout(dropatt, dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None) -> None:
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        shape = (self.d_model, self.n_head, self.d_head)
        for name in ("q", "k", "v", "r", "o"):
            setattr(self, f"{name}_kernel", self.add_weight(name=f"{name}_kernel", shape=shape, initializer=init))
        self.layer_norm.build((None, None, self.d_model))

    def _kernel(self, name: str) -> tf.Tensor:
        return tf.cast(getattr(self, f"{name}_kernel"), self.compute_dtype)

    def _attend(self, queries, keys, values, k_r, positions, qlen, segment_diff, mask, biases, training):
        """Scores of [B, Q, N, H] queries against [B, K, N, H] keys -> attention vectors [B, Q, N, H]."""
        r_w_bias, r_r_bias, r_s_bias, seg_embed = biases
        klen = keys.shape[1] if keys.shape[1] is not None else tf.shape(keys)[1]
        content = tf.einsum("bqnh,bknh->bnqk", (queries + r_w_bias) * self.scale, keys)
        position = _relative_positions_scores((queries + r_r_bias) * self.scale, k_r)
        if positions is None:
            position = rel_shift(position, klen)
        else:
            position = gather_relative(position, positions, qlen, klen)
        scores = content + position
        if segment_diff is not None:
            segment = tf.einsum("bqnh,snh->bnqs", (queries + r_s_bias) * self.scale, seg_embed)
            scores += tf.where(segment_diff[:, None], segment[..., 1:], segment[..., :1])
        if mask is not None:
            scores = tf.where(mask[:, None], tf.cast(mask_fill_value(scores.dtype), scores.dtype), scores)
        probs = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32), axis=-1), self.compute_dtype)
        probs = self.attention_dropout(probs, training=training)
        return tf.einsum("bnqk,bknh->bqnh", probs, values)

    def _post_attention(self, residual, attn_vec, training):
        out = tf.einsum("bqnh,dnh->bqd", attn_vec, self._kernel("o"))
        out = self.output_dropout(out, training=training)
        return self.layer_norm(out + residual)

    def call(self, h, g, pos_emb, mem=None, content_mask=None, query_mask=None, query_positions=None,
             query_valid=None, content_segment_diff=None, query_segment_diff=None,
             r_w_bias=None, r_r_bias=None, r_s_bias=None, seg_embed=None, training=False):
        dtype = self.compute_dtype
        biases = tuple(None if b is None else tf.cast(b, dtype) for b in (r_w_bias, r_r_bias, r_s_bias, seg_embed))
        qlen = h.shape[1]
        keys_in = h if mem is None else tf.concat([tf.cast(mem, dtype), h], axis=1)
        keys = tf.einsum("bkd,dnh->bknh", keys_in, self._kernel("k"))
        values = tf.einsum("bkd,dnh->bknh", keys_in, self._kernel("v"))
        k_r = tf.einsum("grd,dnh->grnh", pos_emb, self._kernel("r"))
        q = tf.einsum("bld,dnh->blnh", h, self._kernel("q"))
        attn_h = self._attend(q, keys, values, k_r, None, qlen, content_segment_diff, content_mask, biases, training)
        h_out = self._post_attention(h, attn_h, training)
        if g is None:
            return h_out, None
        q_g = tf.einsum("bpd,dnh->bpnh", g, self._kernel("q"))
        attn_g = self._attend(q_g, keys, values, k_r, query_positions, qlen, query_segment_diff, query_mask,
                              biases, training)
        if query_valid is not None:
            attn_g *= tf.cast(query_valid, dtype)[:, :, None, None]
        return h_out, self._post_attention(g, attn_g, training)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, dropout=self.dropout_rate,
                      dropatt=self.dropatt_rate, initializer_range=self.initializer_range)
        return config
