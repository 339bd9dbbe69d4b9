"""One XLNet layer: two-stream relative attention followed by the shared feed-forward sub-layer."""
from __future__ import annotations

import keras

from trainer.layers.attention import TwoStreamRelativeAttention
from trainer.layers.feed_forward import PositionwiseFeedForward


class XLNetBlock(keras.layers.Layer):
    """Post-LN transformer block applied to the content stream h and (optionally) the query stream g.

    Call: the arguments of TwoStreamRelativeAttention.call (h [B, L, d_model], g [B, P, d_model]
    or None, ...). Returns (h_out [B, L, d_model], g_out [B, P, d_model] or None); both streams
    go through the same attention projections, LayerNorms and feed-forward weights.
    """

    def __init__(self, d_model: int, n_head: int, d_head: int, d_inner: int, activation: str = "gelu",
                 dropout: float = 0.0, dropatt: float = 0.0, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.n_head, self.d_head, self.d_inner = d_model, n_head, d_head, d_inner
        self.activation, self.dropout_rate, self.dropatt_rate = activation, dropout, dropatt
        self.initializer_range = initializer_range
        self.attention = TwoStreamRelativeAttention(d_model, n_head, d_head, dropout, dropatt, initializer_range,
                                                    name="rel_attn", dtype=self.dtype_policy)
        self.feed_forward = PositionwiseFeedForward(d_model, d_inner, activation, dropout, initializer_range,
                                                    name="ff", dtype=self.dtype_policy)

    def call(self, h, g=None, training=False, **attention_inputs):
        h, g = self.attention(h, g, training=training, **attention_inputs)
        h = self.feed_forward(h, training=training)
        if g is not None:
            g = self.feed_forward(g, training=training)
        return h, g

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, n_head=self.n_head, d_head=self.d_head, d_inner=self.d_inner,
                      activation=self.activation, dropout=self.dropout_rate, dropatt=self.dropatt_rate,
                      initializer_range=self.initializer_range)
        return config
