"""Position-wise feed-forward sub-layer of an XLNet block (post-LayerNorm)."""
from __future__ import annotations

from typing import Any

import keras

from trainer.layers.attention import LAYER_NORM_EPSILON
from trainer.layers.dropout import HashDropout
from trainer.layers.remat import recompute


def gelu_tanh(x: Any) -> Any:
    """GELU with the tanh approximation, as the original XLNet uses."""
    return keras.activations.gelu(x, approximate=True)


def gelu_erf(x: Any) -> Any:
    """GELU with the exact erf, what Hugging Face's XLNet calls "gelu" (its default)."""
    return keras.activations.gelu(x, approximate=False)


# The names are ModelConfig.ff_activation's; trainer/models/config.py accepts exactly these.
ACTIVATIONS = {"gelu": gelu_tanh, "gelu_exact": gelu_erf, "relu": keras.activations.relu}


class PositionwiseFeedForward(keras.layers.Layer):
    """LayerNorm(x + dropout(W2 dropout(act(W1 x + b1)) + b2)).

    Call: x [batch, seq_len, d_model] -> [batch, seq_len, d_model]. Dropout only when training;
    ``seeds``: the (inner, output) dropout seeds from ``draw_seeds``, or None to draw them.

    ``recompute_activation`` (remat "attention", trainer/layers/remat.py): the backward pass
    recomputes the activation from its input instead of keeping its intermediates (GELU's gradient
    reads four [batch, seq_len, d_inner] tensors; recomputed, only its input is kept). The same
    operations run, so values and gradients are those of a plain call.
    """

    def __init__(self, d_model: int, d_inner: int, activation: str = "gelu", dropout: float = 0.0,
                 initializer_range: float = 0.02, recompute_activation: bool = False, **kwargs):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.d_model, self.d_inner, self.activation, self.dropout_rate = d_model, d_inner, activation, dropout
        self.initializer_range = initializer_range
        self.recompute_activation = recompute_activation
        init = keras.initializers.RandomNormal(stddev=initializer_range)
        # The activation is applied in call (Dense applies it the same way: matmul, bias, activation),
        # so that it can be recomputed on its own.
        self.layer_1 = keras.layers.Dense(d_inner, kernel_initializer=init, name="layer_1", dtype=self.dtype_policy)
        self.layer_2 = keras.layers.Dense(d_model, kernel_initializer=init, name="layer_2",
                                          dtype=self.dtype_policy)
        self.inner_dropout = HashDropout(dropout, dtype=self.dtype_policy)
        self.output_dropout = HashDropout(dropout, dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="layer_norm",
                                                          dtype=self.dtype_policy)
        self.build()

    def build(self, input_shape=None) -> None:
        self.layer_1.build((None, None, self.d_model))
        self.layer_2.build((None, None, self.d_inner))
        self.layer_norm.build((None, None, self.d_model))

    def draw_seeds(self, training: bool) -> tuple:
        """The (inner, output) dropout seeds a call draws, drawn now."""
        return self.inner_dropout.draw_seed(training), self.output_dropout.draw_seed(training)

    def call(self, x: Any, training: bool = False, seeds: tuple | None = None,
             normalize: bool = True) -> Any:
        """x [B, Q, d_model] -> LayerNorm(x + FF(x)) [B, Q, d_model]; ``normalize=False``: x + FF(x),
        the sum before ``layer_norm``."""
        inner_seed, output_seed = seeds or self.draw_seeds(training)
        activation = ACTIVATIONS[self.activation]
        inner = self.layer_1(x)
        if self.recompute_activation:
            inner = recompute(lambda pre, _: activation(pre), inner)
        else:
            inner = activation(inner)
        out = self.inner_dropout(inner, training=training, seed=inner_seed)
        out = self.output_dropout(self.layer_2(out), training=training, seed=output_seed)
        return self.layer_norm(out + x) if normalize else out + x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(d_model=self.d_model, d_inner=self.d_inner, activation=self.activation,
                      dropout=self.dropout_rate, initializer_range=self.initializer_range,
                      recompute_activation=self.recompute_activation)
        return config
