"""Keras 3 layers of the XLNet network, written with keras.ops for every backend (the TensorFlow
backend's own ops, which keep its exact numbers and measured memory, live in the tensorflow_*.py modules,
loaded only on that backend)."""
from trainer.layers.attention import TwoStreamRelativeAttention, mask_fill_value, relative_segment_difference
from trainer.layers.attention_biases import RelativeAttentionBiases
from trainer.layers.dropout import HashDropout
from trainer.layers.feed_forward import PositionwiseFeedForward
from trainer.layers.relative_position import RelativePositionEncoding, rel_shift
from trainer.layers.sequence_summary import SequenceSummary
from trainer.layers.transformer_block import XLNetBlock

__all__ = ["HashDropout", "PositionwiseFeedForward", "RelativeAttentionBiases", "RelativePositionEncoding",
           "SequenceSummary", "TwoStreamRelativeAttention", "XLNetBlock", "mask_fill_value", "rel_shift",
           "relative_segment_difference"]
