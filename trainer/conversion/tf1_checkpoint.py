"""Loading an original XLNet release (TF1 checkpoint + xlnet_config.json) into an XLNetNetwork.

The released variables (``model/transformer/...``, ``model/lm_loss/bias``) map one-to-one onto
the network's variables; shapes are identical, so loading is a checked assignment.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from tfrecords.errors import UsageError
from trainer.models.config import ModelConfig
from trainer.models.network import XLNetNetwork, build_network
from trainer.runtime.storage import StorageError, read_json

# xlnet_config.json key -> ModelConfig field (the release names the vocabulary size n_token).
ORIGINAL_CONFIG_KEYS = {"n_layer": "n_layer", "d_model": "d_model", "n_head": "n_head", "d_head": "d_head",
                        "d_inner": "d_inner", "ff_activation": "ff_activation", "untie_r": "untie_r",
                        "n_token": "vocab_size"}


class CheckpointImportError(UsageError):
    """An original checkpoint or config does not match what the network needs."""


def read_original_config(path: str | os.PathLike, **overrides: Any) -> ModelConfig:
    """xlnet_config.json (local or gs://) -> ModelConfig. Keys absent from the release (mem_len,
    dropout, ...) come from ``overrides`` or the ModelConfig defaults."""
    path = os.fspath(path)
    try:
        values = read_json(path)
    except StorageError as error:
        raise CheckpointImportError(f"cannot read original config: {error}") from None
    missing = sorted(set(ORIGINAL_CONFIG_KEYS) - set(values))
    if missing:
        raise CheckpointImportError(f"{path} lacks {', '.join(missing)} (an xlnet_config.json has "
                                    f"{', '.join(ORIGINAL_CONFIG_KEYS)})")
    fields = {ours: values[theirs] for theirs, ours in ORIGINAL_CONFIG_KEYS.items()}
    fields.update(overrides)
    try:
        return ModelConfig(**fields)
    except ValueError as error:
        raise CheckpointImportError(f"{path}: {error}") from None


def original_variable_map(network: XLNetNetwork) -> dict[str, tf.Variable]:
    """Original TF1 variable name -> the network variable holding it."""
    variables = {
        "model/transformer/word_embedding/lookup_table": network.word_embedding.embeddings,
        "model/transformer/mask_emb/mask_emb": network.mask_emb,
        "model/transformer/r_w_bias": network.attention_biases.r_w_bias,
        "model/transformer/r_r_bias": network.attention_biases.r_r_bias,
        "model/transformer/r_s_bias": network.attention_biases.r_s_bias,
        "model/transformer/seg_embed": network.attention_biases.seg_embed,
        "model/lm_loss/bias": network.lm_bias,
    }
    for i, block in enumerate(network.blocks):
        prefix = f"model/transformer/layer_{i}"
        attention, feed_forward = block.attention, block.feed_forward
        for name in ("q", "k", "v", "r", "o"):
            variables[f"{prefix}/rel_attn/{name}/kernel"] = getattr(attention, f"{name}_kernel")
        variables[f"{prefix}/rel_attn/LayerNorm/gamma"] = attention.layer_norm.gamma
        variables[f"{prefix}/rel_attn/LayerNorm/beta"] = attention.layer_norm.beta
        for dense in ("layer_1", "layer_2"):
            variables[f"{prefix}/ff/{dense}/kernel"] = getattr(feed_forward, dense).kernel
            variables[f"{prefix}/ff/{dense}/bias"] = getattr(feed_forward, dense).bias
        variables[f"{prefix}/ff/LayerNorm/gamma"] = feed_forward.layer_norm.gamma
        variables[f"{prefix}/ff/LayerNorm/beta"] = feed_forward.layer_norm.beta
    return variables


def assign_checked_weights(targets: Mapping[str, tf.Variable], weights: Mapping[str, np.ndarray],
                           source: str = "weights") -> None:
    """Assigns ``weights[name]`` to every ``targets[name]`` once every name and shape is checked.

    Raises CheckpointImportError naming each missing or mis-shaped variable (nothing is assigned then).
    """
    problems = [f"missing variable {name}" for name in targets if name not in weights]
    for name, variable in targets.items():
        if name in weights and tuple(np.shape(weights[name])) != tuple(variable.shape):
            problems.append(f"variable {name} has shape {list(np.shape(weights[name]))}, "
                            f"the config needs {list(variable.shape)}")
    if problems:
        raise CheckpointImportError(f"{source} does not fit the model: " + "; ".join(problems))
    for name, variable in targets.items():
        variable.assign(np.asarray(weights[name], np.float32))


def assign_original_weights(network: XLNetNetwork, weights: Mapping[str, np.ndarray], source: str = "weights") -> None:
    """Assigns every original-named array to the network, checking names and shapes first
    (assign_checked_weights over original_variable_map)."""
    assign_checked_weights(original_variable_map(network), weights, source)


def read_original_checkpoint(prefix: str) -> dict[str, np.ndarray]:
    """All variables of a TF1 checkpoint as name -> array (optimizer slots and the like included)."""
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as error:
        raise CheckpointImportError(f"cannot read checkpoint {prefix!r}: {error}") from None
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def load_original_checkpoint(network: XLNetNetwork, prefix: str) -> None:
    """Restores an original TF1 XLNet checkpoint (e.g. ``.../xlnet_model.ckpt``) into ``network``."""
    assign_original_weights(network, read_original_checkpoint(prefix), source=f"checkpoint {prefix}")


def import_original(checkpoint_prefix: str, config_path: str | os.PathLike, **config_overrides: Any) -> XLNetNetwork:
    """One call: original release -> XLNetNetwork with its weights."""
    network = build_network(read_original_config(config_path, **config_overrides))
    load_original_checkpoint(network, checkpoint_prefix)
    return network
