"""Permutation language modelling objective around the XLNet network.

``XLNetPretrainer.compute`` takes the compact per-replica features of the reader (input_ids,
segment_ids, is_masked, perm_seed) and builds perm_mask / targets on device, runs the
two-stream network and returns the loss: mean cross-entropy of the query-stream logits over
the real targets. Original-style dense features (perm_mask, target_mapping, target_mask,
optional target) are accepted as well, so results can be compared with other implementations.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import keras
from keras import ops

from tfrecords.schema import MODEL_FEATURES
from trainer.models import backend_ops
from trainer.models.backend_ops import Tensor
from trainer.models.config import ModelConfig
from trainer.models.network import XLNetNetwork, build_network
from trainer.models.permutation import (
    check_permutation_shapes,
    permutation_mask,
    sample_ranks,
    select_targets,
    target_flags,
)

DENSE_FEATURES = ("input_ids", "segment_ids", "perm_mask", "target_mapping")


def special_id(special_ids: Any, name: str) -> int:
    """Reads one id from a tfrecords.vocabulary.SpecialIds or a mapping such as the manifest's special_ids."""
    value = special_ids.get(name) if isinstance(special_ids, Mapping) else getattr(special_ids, name, None)
    if value is None:
        raise ValueError(f"special_ids lacks {name!r} (needed to keep <{name}> out of the targets)")
    return int(value)


class XLNetPretrainer(keras.Model):
    """The XLNet network plus the permutation-LM loss.

    Args:
      model_config: ModelConfig of the network (ignored when ``network`` is given).
      seq_len, num_predict, perm_size: data shapes (num_predict = P, the predicted rows).
      special_ids: SpecialIds or mapping with at least 'sep' and 'cls'.
      network: an existing XLNetNetwork to wrap (e.g. restored from a checkpoint).
      remat: what the backward pass of the network it builds recomputes (XLNetNetwork; ignored
        when ``network`` is given).
    """

    def __init__(self, model_config: ModelConfig, seq_len: int, num_predict: int, perm_size: int,
                 special_ids: Any, network: Optional[XLNetNetwork] = None, remat: str = "none", **kwargs):
        super().__init__(**kwargs)
        self.network = network if network is not None else build_network(model_config, remat=remat)
        self.model_config = self.network.config
        check_permutation_shapes(seq_len, self.model_config.reuse_len, perm_size)
        if not 0 < num_predict <= seq_len:
            raise ValueError(f"num_predict must be in (0, seq_len={seq_len}], got {num_predict}")
        self.seq_len, self.num_predict, self.perm_size = seq_len, num_predict, perm_size
        self.sep_id, self.cls_id = special_id(special_ids, "sep"), special_id(special_ids, "cls")
        self.built = True  # every weight exists (the network's): stateless_call needs no first call

    def _check_features(self, features: Mapping[str, Tensor], names: Sequence[str]) -> None:
        missing = [name for name in names if name not in features]
        if missing:
            raise ValueError(f"features lack {', '.join(missing)}; got {', '.join(sorted(features))}")
        length = features["input_ids"].shape[1]
        if length is not None and length != self.seq_len:
            raise ValueError(f"input_ids has seq_len {length}, the pretrainer was built for seq_len {self.seq_len}")

    def targets_from_compact(self, features: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """perm_mask [B, L, L] bool, target_positions [B, P], target_valid [B, P], target [B, P] built on device."""
        input_ids = ops.cast(features["input_ids"], "int32")
        ranks = sample_ranks(features["perm_seed"], self.seq_len, self.model_config.reuse_len, self.perm_size)
        is_target, is_functional = target_flags(input_ids, features["is_masked"], self.sep_id, self.cls_id)
        positions, valid = select_targets(is_target, self.num_predict)
        return {"perm_mask": permutation_mask(ranks, is_target, is_functional, self.model_config.reuse_len),
                "target_positions": positions, "target_valid": valid,
                "target": backend_ops.batch_gather(input_ids, positions)}

    def targets_from_dense(self, features: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The same from original-style perm_mask / target_mapping (/ target_mask / target) features."""
        target_mapping = ops.cast(features["target_mapping"], "float32")
        positions = backend_ops.argmax(target_mapping)
        valid = ops.cast(features["target_mask"], "float32") if "target_mask" in features else \
            ops.sum(target_mapping, axis=-1)
        target = ops.cast(features["target"], "int32") if "target" in features else \
            backend_ops.batch_gather(ops.cast(features["input_ids"], "int32"), positions)
        return {"perm_mask": features["perm_mask"], "target_positions": positions, "target_valid": valid,
                "target": target}

    def compute(self, features: Mapping[str, Tensor], mems: Optional[Sequence[Tensor]] = None,
                training: bool = False) -> dict[str, Any]:
        """Loss of one batch.

        Returns loss (mean CE over real targets, float32 scalar), accuracy, num_targets (float32),
        loss_sum and num_correct (for aggregating over replicas), logits [B, P, vocab], new_mems, and
        per target [B, P]: cross_entropy, correct, target_positions and target_valid.
        """
        dense = "perm_mask" in features
        self._check_features(features, DENSE_FEATURES if dense else MODEL_FEATURES)
        inputs = self.targets_from_dense(features) if dense else self.targets_from_compact(features)
        logits, new_mems = self.network(ops.cast(features["input_ids"], "int32"), features["segment_ids"],
                                        inputs["perm_mask"], None, mems, target_positions=inputs["target_positions"],
                                        target_valid=inputs["target_valid"], training=training)
        valid = inputs["target_valid"]
        cross_entropy = ops.sparse_categorical_crossentropy(inputs["target"], logits, from_logits=True)
        correct = ops.cast(is_largest(logits, inputs["target"]), "float32")
        num_targets = ops.sum(valid)
        denominator = ops.maximum(num_targets, 1.0)
        loss_sum = ops.sum(cross_entropy * valid)
        num_correct = ops.sum(correct * valid)
        return {"loss": loss_sum / denominator, "accuracy": num_correct / denominator, "num_targets": num_targets,
                "loss_sum": loss_sum, "num_correct": num_correct, "logits": logits, "new_mems": new_mems,
                "cross_entropy": cross_entropy, "correct": correct,
                "target_positions": inputs["target_positions"], "target_valid": valid}

    def call(self, features, mems=None, training=False):
        return self.compute(features, mems, training)

    def get_config(self) -> dict:
        return {"name": self.name, "model_config": self.model_config.to_dict(), "seq_len": self.seq_len,
                "num_predict": self.num_predict, "perm_size": self.perm_size,
                "special_ids": {"sep": self.sep_id, "cls": self.cls_id}}

    @classmethod
    def from_config(cls, config: dict) -> "XLNetPretrainer":
        config = dict(config)
        return cls(ModelConfig.from_dict(config.pop("model_config")), **config)


def is_largest(logits: Tensor, target: Tensor) -> Tensor:
    """logits [..., V], int target [...] -> bool [...]: the target's logit is the largest, a prediction
    counted correct (a tie with another id counts as correct; argmax would pick the lower id).

    A max and a gather, not an argmax: an argmax is a reduction of (value, index) pairs, which JAX's
    CPU backend (jaxlib 0.10) runs in 44.6 ms on [336, 32000] logits against 1.4 ms for the max
    (TensorFlow's XLA: 11.8 ms and 1.0 ms)."""
    target_logit = ops.take_along_axis(logits, ops.expand_dims(ops.cast(target, "int32"), -1), axis=-1)
    return ops.greater_equal(ops.squeeze(target_logit, -1), ops.max(logits, axis=-1))
