"""The network as scoring and generation run it: whole segments cached as memory, no bi_data.

Training caches only the first ``reuse_len`` positions of a segment and may lay a batch out as
[forward half, backward half] (bi_data). Reading a text in natural order caches every position
of a segment (``reuse_len`` 0) and reads forward only. The variables do not depend on these
fields, so the same checkpoint restores into either network.
"""
from __future__ import annotations

from trainer.models.config import ModelConfig, sequence_model_config
from trainer.models.network import XLNetNetwork


def inference_config(config: ModelConfig, mem_len: int) -> ModelConfig:
    """``config`` for natural-order reading: ``mem_len`` positions of memory (the generation cache's
    size, or the scoring memory), every position of a segment cached (reuse_len 0), no bi_data:
    the whole-sequence architecture with memory, ``sequence_model_config(config, mem_len)``."""
    return sequence_model_config(config, mem_len)


def is_inference_network(network: XLNetNetwork, mem_len: int | None = None) -> bool:
    """Whether ``network``'s config is ``inference_config`` of itself (with ``mem_len`` when given)."""
    config = network.config
    wanted = inference_config(config, config.mem_len if mem_len is None else mem_len)
    return config == wanted


def inference_network(network: XLNetNetwork, mem_len: int) -> XLNetNetwork:
    """``network`` itself when it already reads in natural order with ``mem_len`` memory, else a new
    network with ``inference_config`` and a copy of ``network``'s weights (same variables, same order)."""
    if is_inference_network(network, mem_len):
        return network
    copy = XLNetNetwork(inference_config(network.config, mem_len), name=network.name, dtype=network.dtype_policy)
    copy.set_weights(network.get_weights())
    return copy


def check_inference_network(network: XLNetNetwork) -> None:
    """ValueError unless ``network`` is built with an ``inference_config`` (see ``inference_network``)."""
    if not is_inference_network(network):
        config = network.config
        raise ValueError("natural-order reading needs a network built with inference_config(config, mem_len) "
                         f"(reuse_len 0, bi_data off); got reuse_len={config.reuse_len}, bi_data={config.bi_data}: "
                         "use inference_network(network, mem_len)")
