"""The three layers of XLNet's extractive-QA head, as the original (function_builder.get_qa_outputs)
and Hugging Face (XLNetForQuestionAnswering: PoolerStartLogits, PoolerEndLogits,
PoolerAnswerClass) define them. Layer and weight names follow theirs, so the checkpoint mapping is
one to one: ``start_logits/dense``, ``end_logits/{dense_0, LayerNorm, dense_1}``,
``answer_class/{dense_0, dense_1}`` (Hugging Face: ``start_logits.dense``, ...).

Positions where ``p_mask`` is 1 (question, <sep>, padding) get the logit -1e30 (float32 logits,
so the constant never overflows), exactly ``logit * (1 - p_mask) - 1e30 * p_mask``.
"""
from __future__ import annotations

from typing import Any

import keras
from keras import ops

from trainer.layers.dropout import HashDropout

MASKED_LOGIT = 1e30


def masked_logits(logits: Any, p_mask: Any) -> Any:
    """float32 ``logits * (1 - p_mask) - 1e30 * p_mask``; p_mask broadcasts against logits' last axes."""
    logits = ops.cast(logits, "float32")
    p_mask = ops.cast(p_mask, "float32")
    return logits * (1.0 - p_mask) - MASKED_LOGIT * p_mask


def _dense(units: int, name: str, initializer_range: float, dtype, **kwargs) -> keras.layers.Dense:
    return keras.layers.Dense(units, name=name, dtype=dtype,
                              kernel_initializer=keras.initializers.RandomNormal(stddev=initializer_range), **kwargs)


class StartLogits(keras.layers.Layer):
    """``dense`` (d_model -> 1) on every position, masked by p_mask.

    Call: hidden [batch, seq_len, d_model], p_mask [batch, seq_len] -> float32 logits [batch, seq_len].
    """

    def __init__(self, d_model: int, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.initializer_range = d_model, initializer_range
        self.dense = _dense(1, "dense", initializer_range, self.dtype_policy)
        self.build()

    def build(self, input_shape=None) -> None:
        self.dense.build((None, self.d_model))

    def call(self, hidden: Any, p_mask: Any) -> Any:
        return masked_logits(ops.squeeze(self.dense(hidden), -1), p_mask)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, initializer_range=self.initializer_range)
        return config


class EndLogits(keras.layers.Layer):
    """End logits conditioned on a start: ``dense_1(LayerNorm(tanh(dense_0([h_j ; h_start]))))``.

    Call: hidden [batch, seq_len, d_model], start_states [batch, starts, d_model] (one state per
    candidate start: the gold start when training, the top starts at inference), p_mask
    [batch, seq_len] -> float32 logits [batch, starts, seq_len].
    """

    def __init__(self, d_model: int, initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.initializer_range, self.layer_norm_epsilon = d_model, initializer_range, layer_norm_epsilon
        self.dense_0 = _dense(d_model, "dense_0", initializer_range, self.dtype_policy, activation="tanh")
        self.layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, name="LayerNorm",
                                                          dtype=self.dtype_policy)
        self.dense_1 = _dense(1, "dense_1", initializer_range, self.dtype_policy)
        self.build()

    def build(self, input_shape=None) -> None:
        self.dense_0.build((None, 2 * self.d_model))
        self.layer_norm.build((None, self.d_model))
        self.dense_1.build((None, self.d_model))

    def call(self, hidden: Any, start_states: Any, p_mask: Any) -> Any:
        starts, seq_len = ops.shape(start_states)[1], ops.shape(hidden)[1]
        # [batch, starts, seq_len, 2 d_model]: [h_j ; h_start] as the original concatenates
        pairs = ops.concatenate([ops.tile(hidden[:, None], (1, starts, 1, 1)),
                                 ops.tile(ops.cast(start_states, hidden.dtype)[:, :, None], (1, 1, seq_len, 1))],
                                axis=-1)
        logits = ops.squeeze(self.dense_1(self.layer_norm(self.dense_0(pairs))), -1)
        return masked_logits(logits, p_mask[:, None, :])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, initializer_range=self.initializer_range,
                      layer_norm_epsilon=self.layer_norm_epsilon)
        return config


class AnswerClass(keras.layers.Layer):
    """The answerability logit: ``dense_1(dropout(tanh(dense_0([start_state ; cls_state]))))``,
    ``dense_1`` without bias. Higher means "no answer" (its target is is_impossible).

    Call: start_states [batch, d_model], cls_states [batch, d_model] -> float32 logits [batch].
    """

    def __init__(self, d_model: int, dropout: float = 0.0, initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.dropout_rate, self.initializer_range = d_model, dropout, initializer_range
        self.dense_0 = _dense(d_model, "dense_0", initializer_range, self.dtype_policy, activation="tanh")
        self.dropout = HashDropout(dropout, dtype=self.dtype_policy)
        self.dense_1 = _dense(1, "dense_1", initializer_range, self.dtype_policy, use_bias=False)
        self.build()

    def build(self, input_shape=None) -> None:
        self.dense_0.build((None, 2 * self.d_model))
        self.dense_1.build((None, self.d_model))

    def call(self, start_states: Any, cls_states: Any, training: bool = False) -> Any:
        features = self.dense_0(ops.concatenate([start_states, ops.cast(cls_states, start_states.dtype)], axis=-1))
        return ops.cast(ops.squeeze(self.dense_1(self.dropout(features, training=training)), -1), "float32")

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, dropout=self.dropout_rate, initializer_range=self.initializer_range)
        return config
