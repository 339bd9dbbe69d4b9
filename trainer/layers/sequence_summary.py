"""Sequence summary: one vector per sequence, from the state of its <cls> position.

As the original XLNet (``summary_type="last"``, ``use_summ_proj=True``) and Hugging Face's
``XLNetForSequenceClassification`` define it: inputs are left-padded with ``<cls>`` last, so the
summary is the last position's state, projected by a dense d_model layer with tanh, then dropout.
"""
from __future__ import annotations

from typing import Any

import keras

from trainer.layers.dropout import HashDropout


class SequenceSummary(keras.layers.Layer):
    """dropout(tanh(W h[:, -1] + b)).

    Call: hidden [batch, seq_len, d_model] -> [batch, d_model]. Dropout only when training.
    """

    def __init__(self, d_model: int, dropout: float = 0.0, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.dropout_rate, self.initializer_range = d_model, dropout, initializer_range
        self.summary = keras.layers.Dense(d_model, activation="tanh", name="summary", dtype=self.dtype_policy,
                                          kernel_initializer=keras.initializers.RandomNormal(stddev=initializer_range))
        self.dropout = HashDropout(dropout, dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None) -> None:
        self.summary.build((None, self.d_model))

    def call(self, hidden: Any, training: bool = False) -> Any:
        return self.dropout(self.summary(hidden[:, -1]), training=training)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, dropout=self.dropout_rate, initializer_range=self.initializer_range)
        return config
