"""One XLNet layer: two-stream relative attention followed by the shared feed-forward sub-layer."""
from __future__ import annotations

import keras

from trainer.layers.attention import TwoStreamRelativeAttention
from trainer.layers.feed_forward import PositionwiseFeedForward
from trainer.layers.remat import check_remat, recompute

# The attention inputs that get gradients when the whole layer is recomputed: the rest are masks,
# positions and seeds, the target rows' validity (data) and the memory (XLNet stops its gradient).
DIFFERENTIABLE_INPUTS = ("pos_emb", "r_w_bias", "r_r_bias", "r_s_bias", "seg_embed")


class XLNetBlock(keras.layers.Layer):
    """Post-LN transformer block applied to the content stream h and (optionally) the query stream g.

    Call: the arguments of TwoStreamRelativeAttention.call (h [B, L, d_model], g [B, P, d_model]
    or None, ..., content_output). Returns (h_out [B, L, d_model], g_out [B, P, d_model] or None);
    both streams go through the same attention projections, LayerNorms and feed-forward weights.
    ``content_output=False`` with g: h_out is None and the content stream's own attention and
    feed-forward do not run (its keys and values do), so that neither the forward pass nor a
    recomputation spends anything on an output nobody reads.

    ``input_norm`` (a LayerNormalization or None): the inputs go through it first; with
    ``output_norm=False`` the outputs are the feed-forward's residual sums before its LayerNorm.
    XLNetNetwork uses both under ``full`` remat, each block applying the previous block's last
    LayerNorm: a recomputed block then ends at its last matmul's output, which no gradient reads,
    so the recomputation skips that matmul (a fifth of a layer's forward work).

    ``remat`` (trainer/layers/remat.py): "none"; "attention", the backward pass recomputes each
    stream's attention core and feed-forward activation; "full", it keeps only the block's inputs
    and recomputes the block.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, d_inner: int, activation: str = "gelu",
                 dropout: float = 0.0, dropatt: float = 0.0, initializer_range: float = 0.02, remat: str = "none",
                 **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.n_head, self.d_head, self.d_inner = d_model, n_head, d_head, d_inner
        self.activation, self.dropout_rate, self.dropatt_rate = activation, dropout, dropatt
        self.initializer_range = initializer_range
        self.remat = check_remat(remat)
        self.attention = TwoStreamRelativeAttention(d_model, n_head, d_head, dropout, dropatt, initializer_range,
                                                    recompute_attention=remat == "attention", name="rel_attn",
                                                    dtype=self.dtype_policy)
        self.feed_forward = PositionwiseFeedForward(d_model, d_inner, activation, dropout, initializer_range,
                                                    recompute_activation=remat == "attention", name="ff",
                                                    dtype=self.dtype_policy)

    def draw_seeds(self, two_streams: bool, training: bool) -> dict:
        """Every dropout seed of one call, drawn now in the order the call draws them (per dropout
        layer: content stream, then query stream)."""
        streams = ("content", "query") if two_streams else ("content",)
        return {"attention": self.attention.draw_seeds(two_streams, training),
                "feed_forward": {stream: self.feed_forward.draw_seeds(training) for stream in streams}}

    def call(self, h, g=None, training=False, content_output=True, input_norm=None, output_norm=True,
             **attention_inputs):
        seeds = self.draw_seeds(g is not None, training)
        norms = (input_norm, output_norm)
        content_output = content_output or g is None
        if self.remat != "full":
            return self._layer(h, g, attention_inputs, seeds, training, content_output, norms)
        differentiable = {name: attention_inputs.pop(name, None) for name in DIFFERENTIABLE_INPUTS}

        def layer(floats, fixed):
            return self._layer(floats["h"], floats["g"], {**floats["attention"], **fixed["attention"]},
                               fixed["seeds"], training, content_output, norms)

        return recompute(layer, {"h": h, "g": g, "attention": differentiable},
                         {"attention": attention_inputs, "seeds": seeds})

    def _layer(self, h, g, attention_inputs, seeds, training, content_output, norms):
        input_norm, output_norm = norms
        if input_norm is not None:
            h, g = input_norm(h), None if g is None else input_norm(g)
        h, g = self.attention(h, g, training=training, seeds=seeds["attention"], content_output=content_output,
                              **attention_inputs)
        if h is not None:
            h = self.feed_forward(h, training=training, seeds=seeds["feed_forward"]["content"], normalize=output_norm)
        if g is not None:
            g = self.feed_forward(g, training=training, seeds=seeds["feed_forward"]["query"], normalize=output_norm)
        return h, g

    def cached_step(self, rows, keys, values, position_keys, row_positions, blocked=None, segment_diff=None,
                    **biases):
        """Inference over a decoder's cache: rows [B, Q, d_model] (content or query stream rows) attend
        keys/values [B, N, K, H] projected before (``attention.project_keys_values``), then the
        feed-forward: -> [B, Q, d_model]. Arguments as TwoStreamRelativeAttention.attend_cached;
        ``biases``: r_w_bias, r_r_bias, r_s_bias, seg_embed of this layer. No dropout."""
        attended = self.attention.attend_cached(rows, keys, values, position_keys, row_positions, blocked,
                                                segment_diff, **biases)
        return self.feed_forward(attended, training=False)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, d_inner=self.d_inner,
                      activation=self.activation, dropout=self.dropout_rate, dropatt=self.dropatt_rate,
                      initializer_range=self.initializer_range, remat=self.remat)
        return config
