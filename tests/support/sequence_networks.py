"""The small randomly initialised network of the sequence-head tests (one and several segments)."""
from __future__ import annotations

import tensorflow as tf

from trainer.models.config import model_preset, sequence_model_config
from trainer.models.network import XLNetNetwork, build_network


def small_sequence_network(vocab_size: int, mem_len: int = 0) -> XLNetNetwork:
    """A 2-layer, d_model 32 network for fine-tuning heads (seed 3), reading with ``mem_len`` memory."""
    tf.keras.utils.set_random_seed(3)
    config = model_preset("tiny").replace(vocab_size=vocab_size, n_layer=2, d_model=32, n_head=2, d_head=16,
                                          d_inner=64)
    return build_network(sequence_model_config(config, mem_len=mem_len))
