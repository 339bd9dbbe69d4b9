"""The relative-attention bias vectors and segment embeddings of every layer, in the original layout."""
from __future__ import annotations

from typing import Any

import keras
from keras import ops


class RelativeAttentionBiases(keras.layers.Layer):
    """Holds r_w_bias / r_r_bias / r_s_bias and seg_embed for all layers.

    With ``untie_r`` the biases are [n_layer, n_head, d_head] (one set per layer); otherwise one
    [n_head, d_head] set is shared by every layer. seg_embed is always [n_layer, 2, n_head, d_head]
    (index 0 = same segment, 1 = different). The shapes match the released TF1 checkpoints.

    Call: ``layer_index`` (python int) -> dict with r_w_bias, r_r_bias, r_s_bias [n_head, d_head]
    and seg_embed [2, n_head, d_head], ready to pass to TwoStreamRelativeAttention.
    """

    def __init__(self, n_layer: int, n_head: int, d_head: int, untie_r: bool = True,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        self.n_layer, self.n_head, self.d_head, self.untie_r = n_layer, n_head, d_head, untie_r
        self.initializer_range = initializer_range
        self.build()

    def build(self, input_shape=None) -> None:
        init = keras.initializers.RandomNormal(stddev=self.initializer_range)
        bias_shape = (self.n_layer, self.n_head, self.d_head) if self.untie_r else (self.n_head, self.d_head)
        self.r_w_bias = self.add_weight(name="r_w_bias", shape=bias_shape, initializer=init)
        self.r_r_bias = self.add_weight(name="r_r_bias", shape=bias_shape, initializer=init)
        self.r_s_bias = self.add_weight(name="r_s_bias", shape=bias_shape, initializer=init)
        self.seg_embed = self.add_weight(name="seg_embed", shape=(self.n_layer, 2, self.n_head, self.d_head),
                                         initializer=init)

    def call(self, layer_index: int) -> dict[str, Any]:
        def read(variable):
            # A tensor in the compute dtype, read as tf.convert_to_tensor reads a variable under Keras's
            # autocast (the cast is then a no-op); ops.convert_to_tensor would hand TensorFlow's
            # variable itself through.
            return ops.cast(variable, self.compute_dtype)

        def pick(bias):
            value = read(bias)
            return value[layer_index] if self.untie_r else value

        return {"r_w_bias": pick(self.r_w_bias), "r_r_bias": pick(self.r_r_bias), "r_s_bias": pick(self.r_s_bias),
                "seg_embed": read(self.seg_embed)[layer_index]}

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(n_layer=self.n_layer, n_head=self.n_head, d_head=self.d_head, untie_r=self.untie_r,
                      initializer_range=self.initializer_range)
        return config
