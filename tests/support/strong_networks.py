"""Small networks with weights large enough that any visible change moves their outputs clearly
(the NumPy reference's random weights), for exact-value tests of what the network computes."""
from __future__ import annotations

from support import reference_numpy
from trainer.conversion.tf1_checkpoint import assign_original_weights
from trainer.models.config import ModelConfig
from trainer.models.inference_network import inference_config
from trainer.models.network import XLNetNetwork, build_network

SMALL = dict(vocab_size=40, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, mem_len=6, reuse_len=4)


def strong_network(model_config: ModelConfig, seed: int = 5) -> XLNetNetwork:
    """``model_config``'s network with the reference's random weights (seed ``seed``)."""
    reference_config = dict(n_layer=model_config.n_layer, n_head=model_config.n_head, d_head=model_config.d_head,
                            d_model=model_config.d_model, d_inner=model_config.d_inner, untie_r=model_config.untie_r,
                            vocab=model_config.vocab_size)
    network = build_network(model_config)
    assign_original_weights(network, reference_numpy.random_weights(reference_config, seed=seed))
    return network


def strong_inference_network(mem_len: int, **changes) -> XLNetNetwork:
    """A small network built for natural-order reading (inference_config) with ``mem_len`` memory."""
    return strong_network(inference_config(ModelConfig(**{**SMALL, **changes}), mem_len))
