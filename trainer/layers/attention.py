"""Two-stream relative multi-head attention (XLNet), with relative segment encoding.

Both streams share the q/k/v/r/o projections and the LayerNorm: keys and values always come
from the content stream (plus memory), queries come from the content stream ``h`` or from the
query stream ``g``. The query stream is evaluated only on its P target rows.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import keras
from keras import ops

from trainer.layers.backend import on_tensorflow
from trainer.layers.dropout import HashDropout
from trainer.layers.relative_position import gather_relative, rel_shift
from trainer.layers.remat import recompute

LAYER_NORM_EPSILON = 1e-12

Tensor = Any  # a tensor of the Keras backend (tf.Tensor, jax.Array, ...)


def mask_fill_value(dtype: Any) -> float:
    """The large negative written into blocked attention scores, representable in ``dtype``.

    -1e30 (the reference's constant) overflows float16 to -inf, which turns a fully blocked
    row into NaN; -65500 still gives such entries exactly zero weight after softmax.
    """
    return -65500.0 if keras.backend.standardize_dtype(dtype) == "float16" else -1e30


def relative_segment_difference(query_segments: Tensor, key_segments: Tensor) -> Tensor:
    """[B, Q] and [B, K] segment ids -> [B, Q, K] bool, True where the segments differ.

    Relative segment encoding only asks "same segment or not"; memory positions count as
    segment 0 (the caller prepends zeros for them).
    """
    return ops.not_equal(query_segments[:, :, None], key_segments[:, None, :])


def _matmul_transposed(a: Tensor, b: Tensor) -> Tensor:
    """a [..., Q, H] x b [..., K, H] -> [..., Q, K]: on TensorFlow one matmul with a transposed operand
    (trainer/layers/tensorflow_attention.py), elsewhere keras.ops (XLA folds the transpose into the dot)."""
    if on_tensorflow():
        from trainer.layers import tensorflow_attention

        return tensorflow_attention.matmul_transposed(a, b)
    return ops.matmul(a, ops.swapaxes(b, -1, -2))


def _read_parts(probs: Tensor, widths: Sequence[int], values: Sequence[Tensor]) -> Tensor:
    """Probabilities [B, N, Q, sum(widths)] x value parts [B, N, K_i, H] -> [B, N, Q, H], each part
    read where it lies (never concatenated)."""
    if on_tensorflow():
        from trainer.layers import tensorflow_attention

        return tensorflow_attention.read_parts(probs, widths, values)
    starts = [sum(widths[:i]) for i in range(len(widths))]
    products = [ops.matmul(probs[..., start:start + width], part)
                for start, width, part in zip(starts, widths, values)]
    total = products[0]
    for product in products[1:]:
        total = total + product
    return total


def _relative_positions_scores(q_r: Tensor, k_r: Tensor) -> Tensor:
    """[B, N, Q, H] queries x [G, N, R, H] position keys -> [B, N, Q, R].

    With bi_data (G = 2) the first half of the batch uses group 0 and the second half group 1,
    so the position projection is computed for G rows instead of B.
    """
    groups = k_r.shape[0]
    batch, heads, rows, width = ops.shape(q_r)
    grouped = ops.reshape(q_r, (groups, -1, heads, rows, width))
    scores = _matmul_transposed(grouped, k_r[:, None])
    return ops.reshape(scores, (batch, heads, rows, k_r.shape[2]))


def _heads(x: Tensor, kernel: Tensor) -> Tensor:
    """[B, T, d_model] x [d_model, N, H] kernel -> [B, N, T, H] (one matmul, then head-major)."""
    d_model, n_head, d_head = kernel.shape
    batch, length = ops.shape(x)[:2]
    projected = ops.matmul(ops.reshape(x, (-1, d_model)), ops.reshape(kernel, (d_model, n_head * d_head)))
    projected = ops.reshape(projected, (batch, length, n_head, d_head))
    return ops.transpose(projected, (0, 2, 1, 3))


def _softmax(scores):
    """Softmax over the keys. One key is a legitimate row (a one-token prompt, the first step of a
    cache): Keras warns about a softmax over an axis of size 1, here not a mistake, so not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="You are using a softmax over axis", category=UserWarning)
        return ops.softmax(scores, axis=-1)


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
      seeds: the dropout seeds of this call from ``draw_seeds``, or None to draw them.
      content_output: False (with g) skips the content stream's own attention: the content
        stream still gives the keys and values, but h_out is None (the last layer of a network
        whose caller reads only the query stream; seeds are drawn as for a full call).
    Returns (h_out [B, L, d_model] or None, g_out [B, P, d_model] or None), each LayerNorm(x + attn(x)).

    ``recompute_attention``: the backward pass recomputes each stream's attention core
    (``_attend``: scores, probabilities, their dropout) instead of keeping its [B, N, Q, K]
    tensors (the ``attention`` remat mode, trainer/layers/remat.py).
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, dropout: float = 0.0, dropatt: float = 0.0,
                 initializer_range: float = 0.02, recompute_attention: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.n_head, self.d_head = d_model, n_head, d_head
        self.dropout_rate, self.dropatt_rate = dropout, dropatt
        self.initializer_range = initializer_range
        self.recompute_attention = recompute_attention
        self.scale = 1.0 / math.sqrt(d_head)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="layer_norm",
                                                          dtype=self.dtype_policy)
        self.output_dropout = HashDropout(dropout, dtype=self.dtype_policy)
        self.attention_dropout = HashDropout(dropatt, dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None) -> None:
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        shape = (self.d_model, self.n_head, self.d_head)
        for name in ("q", "k", "v", "r", "o"):
            setattr(self, f"{name}_kernel", self.add_weight(name=f"{name}_kernel", shape=shape, initializer=init))
        self.layer_norm.build((None, None, self.d_model))

    def _kernel(self, name: str) -> Tensor:
        return ops.cast(getattr(self, f"{name}_kernel"), self.compute_dtype)

    def draw_seeds(self, two_streams: bool, training: bool) -> dict[str, tuple]:
        """The dropout seeds a call draws, drawn now in the same order: for the content stream (then
        the query stream) those of the attention probabilities and of the output."""
        streams = ("content", "query") if two_streams else ("content",)
        return {stream: (self.attention_dropout.draw_seed(training), self.output_dropout.draw_seed(training))
                for stream in streams}

    def _attention_vectors(self, queries, keys, values, k_r, positions, qlen, segment_diff, mask, biases, seed,
                           training):
        """``_attend``, recomputed in the backward pass with ``recompute_attention``."""
        if not self.recompute_attention:
            return self._attend(queries, keys, values, k_r, positions, qlen, segment_diff, mask, biases, seed, training)

        def attend(floats, fixed):
            return self._attend(qlen=qlen, training=training, **floats, **fixed)

        return recompute(attend, dict(queries=queries, keys=keys, values=values, k_r=k_r, biases=biases),
                         dict(positions=positions, segment_diff=segment_diff, mask=mask, seed=seed))

    def _attend(self, queries, keys, values, k_r, positions, qlen, segment_diff, mask, biases, seed, training):
        """Head-major queries [B, N, Q, H] against keys/values [B, N, K, H] -> attention vectors [B, N, Q, H].

        keys and values may also be tuples of parts [B, N, K_i, H] along the key axis (a decoder's
        cache kept in pieces): each part is scored and read where it lies, never concatenated."""
        r_w_bias, r_r_bias, r_s_bias, seg_embed = biases
        key_parts = tuple(keys) if isinstance(keys, (tuple, list)) else (keys,)
        widths = [part.shape[2] for part in key_parts]
        klen = sum(widths)
        # Biases are [N, H]; as [N, 1, H] they broadcast over the query rows.
        content_queries = (queries + r_w_bias[:, None]) * self.scale
        content = ops.concatenate([_matmul_transposed(content_queries, part) for part in key_parts], axis=-1) \
            if len(key_parts) > 1 else _matmul_transposed(content_queries, keys)
        position = _relative_positions_scores((queries + r_r_bias[:, None]) * self.scale, k_r)
        if positions is None:
            position = rel_shift(position, klen)
        else:
            position = gather_relative(position, positions, qlen, klen)
        scores = content + position
        if segment_diff is not None:
            segment = ops.einsum("bnqh,snh->bnqs", (queries + r_s_bias[:, None]) * self.scale, seg_embed)
            # Subtracted negated, exactly the sum: see the mask below.
            scores -= ops.where(segment_diff[:, None], -segment[..., 1:], -segment[..., :1])
        # float16 scores are normalised in float32 (softmax sums overflow half precision).
        softmax_dtype = "float32" if keras.backend.standardize_dtype(scores.dtype) == "float16" else scores.dtype
        scores = ops.cast(scores, softmax_dtype)
        if mask is not None:
            # An additive bias [B, 1, Q, K] (N times smaller than the scores) instead of a select on the
            # scores; nothing needs its gradient. Subtracted negated, not added: Grappler rewrites a
            # chain of adds of broadcast shapes into one AddN over a zero tensor of the scores' shape,
            # which it folds into a constant the step keeps for good (measured). Negation is exact,
            # so the sum is the same.
            fill = ops.convert_to_tensor(-mask_fill_value(softmax_dtype), softmax_dtype)
            scores -= ops.where(mask, fill, ops.zeros((), softmax_dtype))[:, None]
        probs = ops.cast(_softmax(scores), queries.dtype)
        probs = self.attention_dropout(probs, training=training, seed=seed)
        if len(key_parts) == 1:
            return ops.matmul(probs, values)
        return _read_parts(probs, widths, values)

    def _post_attention(self, residual, attn_vec, seed, training):
        """[B, N, Q, H] attention vectors -> LayerNorm(residual + dropout(o-projection)) [B, Q, d_model]."""
        batch, _, rows, _ = ops.shape(attn_vec)
        merged = ops.reshape(ops.transpose(attn_vec, (0, 2, 1, 3)), (-1, self.n_head * self.d_head))
        out = _matmul_transposed(merged, ops.reshape(self._kernel("o"), (self.d_model, -1)))
        out = ops.reshape(out, (batch, rows, self.d_model))
        out = self.output_dropout(out, training=training, seed=seed)
        return self.layer_norm(out + residual)

    def call(self, h, g, pos_emb, mem=None, content_mask=None, query_mask=None, query_positions=None,
             query_valid=None, content_segment_diff=None, query_segment_diff=None,
             r_w_bias=None, r_r_bias=None, r_s_bias=None, seg_embed=None, seeds=None, training=False,
             content_output=True):
        seeds = seeds or self.draw_seeds(g is not None, training)
        dtype = self.compute_dtype
        biases = tuple(None if b is None else ops.cast(b, dtype) for b in (r_w_bias, r_r_bias, r_s_bias, seg_embed))
        qlen = h.shape[1]
        k_kernel, v_kernel = self._kernel("k"), self._kernel("v")
        keys, values = _heads(h, k_kernel), _heads(h, v_kernel)
        if mem is not None:
            # Memory is projected on its own: it carries no gradient, so nothing is spent on one.
            mem = ops.cast(mem, dtype)
            keys = ops.concatenate([_heads(mem, k_kernel), keys], axis=2)
            values = ops.concatenate([_heads(mem, v_kernel), values], axis=2)
        k_r = _heads(pos_emb, self._kernel("r"))
        q_kernel = self._kernel("q")
        h_out = None
        if content_output or g is None:
            content_seeds = seeds["content"]
            attn_h = self._attention_vectors(_heads(h, q_kernel), keys, values, k_r, None, qlen,
                                             content_segment_diff, content_mask, biases, content_seeds[0], training)
            h_out = self._post_attention(h, attn_h, content_seeds[1], training)
        if g is None:
            return h_out, None
        query_seeds = seeds["query"]
        attn_g = self._attention_vectors(_heads(g, q_kernel), keys, values, k_r, query_positions, qlen,
                                         query_segment_diff, query_mask, biases, query_seeds[0], training)
        if query_valid is not None:
            attn_g *= ops.cast(query_valid, dtype)[:, None, :, None]
        return h_out, self._post_attention(g, attn_g, query_seeds[1], training)

    # ------------------------------------------------------------- cached decoding (inference only)
    def project_keys_values(self, states: Tensor) -> tuple[Tensor, Tensor]:
        """Content states (a layer's input) [B, T, d_model] -> (keys, values) [B, N, T, H] in the
        compute dtype: what a decoder's cache holds, so that a state is projected once."""
        states = ops.cast(states, self.compute_dtype)
        return _heads(states, self._kernel("k")), _heads(states, self._kernel("v"))

    def project_positions(self, pos_emb: Tensor) -> Tensor:
        """Relative position encodings [G, R, d_model] -> position keys [G, N, R, H] (the r projection)."""
        return _heads(ops.cast(pos_emb, self.compute_dtype), self._kernel("r"))

    def attend_cached(self, rows: Tensor, keys: Tensor, values: Tensor, position_keys: Tensor,
                      row_positions: Tensor, blocked: Tensor | None = None,
                      segment_diff: Tensor | None = None, r_w_bias=None, r_r_bias=None, r_s_bias=None,
                      seg_embed=None) -> Tensor:
        """A few query rows against keys and values projected before (a decoder's cache); inference only.

        rows: [B, Q, d_model] the rows' inputs (content or query stream: both share the projections).
        keys, values: [B, N, K, H] from :meth:`project_keys_values`, or tuples of such parts along
          the key axis (attended in place, not concatenated); key column j of all the parts
          together sits at position j.
        position_keys: [G, N, R, H] from :meth:`project_positions` of the encodings of the distances
          R-1, R-2, ..., 0 (RelativePositionEncoding(klen=R-1, qlen=1) with bi_data off gives them).
        row_positions: [B, Q] int32, each row's position on the keys' axis: row q scores key j with
          distance row_positions[q] - j, which must lie in 0..R-1 for every key it may see.
        blocked: [B, Q, K] bool, True = may not attend; segment_diff: [B, Q, K] bool or None (no
          segment term). Returns LayerNorm(rows + attention) [B, Q, d_model], exactly what
          ``call`` computes for those rows when it sees the same keys, without dropout.
        """
        dtype = self.compute_dtype
        biases = tuple(None if b is None else ops.cast(b, dtype) for b in (r_w_bias, r_r_bias, r_s_bias, seg_embed))
        rows = ops.cast(rows, dtype)
        # gather_relative picks index qlen - position + j of a table of distances R-1 .. 0: with
        # qlen = R - 1 that is the distance row_positions[q] - j.
        attn = self._attend(_heads(rows, self._kernel("q")), keys, values, position_keys, row_positions,
                            position_keys.shape[2] - 1, segment_diff, blocked, biases, None, False)
        return self._post_attention(rows, attn, None, False)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, dropout=self.dropout_rate,
                      dropatt=self.dropatt_rate, initializer_range=self.initializer_range,
                      recompute_attention=self.recompute_attention)
        return config
