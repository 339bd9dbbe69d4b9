"""The factorisation order that scoring and generation use: a context first, then natural order.

One rule, written once here:

* the **context** (a prompt) comes first; its tokens all see each other and see no scored token,
  as non-target tokens do in pretraining;
* then the **scored** (or generated) tokens, in natural order: token t is predicted by the query
  stream at its position, seeing the context and the scored tokens before t; its content state
  sees the context and the scored tokens up to and including t.

This is one of the orders XLNet is pretrained on (the context plays the non-targets, the
scored tokens are targets ranked by position), so the mask is ``permutation.permutation_mask``
with ranks equal to positions: nothing is approximated. Rows may be padded (``input_mask`` 0)
on either side; padding is neither context nor target, and the network hides padding keys.
"""
from __future__ import annotations

from keras import ops

from trainer.models import backend_ops
from trainer.models.backend_ops import Tensor
from trainer.models.permutation import permutation_mask


def natural_order_targets(first_target: Tensor, end: Tensor, seq_len: int) -> Tensor:
    """[B] first scored position and [B] end (exclusive) -> is_target [B, seq_len] bool.

    Position j of row b is scored when first_target[b] <= j < end[b]; the positions before
    first_target[b] that are not padding are its context.
    """
    positions = ops.arange(seq_len, dtype="int32")[None, :]
    first_target = ops.cast(first_target, "int32")[:, None]
    end = ops.cast(end, "int32")[:, None]
    return ops.logical_and(positions >= first_target, positions < end)


def natural_order_mask(is_target: Tensor) -> Tensor:
    """is_target [B, L] bool (every row's targets after all of its context) -> perm_mask [B, L, L]
    bool, True where query i may NOT attend to key j (the network's ``perm_mask``).

    Targets ranked by position, everything else a non-target: i may not see j when j is a target
    and j >= i. The network lets the content stream see its own position, so target t's content
    state sees the targets up to t and its query stream those before t.
    """
    is_target = ops.convert_to_tensor(is_target, "bool")
    ranks = ops.broadcast_to(ops.arange(is_target.shape[1], dtype="int32")[None, :],
                             backend_ops.dynamic_shape(is_target))
    return permutation_mask(ranks, is_target, ops.zeros_like(is_target), reuse_len=0)


def natural_order_inputs(context_length: int, total_length: int) -> dict[str, Tensor]:
    """The dense inputs of one unpadded row of ``total_length`` tokens whose first ``context_length``
    are the context: ``perm_mask`` [L, L] float32 (1 = may not attend), ``target_mapping`` [P, L]
    float32 one-hot rows and ``target_positions`` [P] int32 for the P = L - context_length scored
    positions in natural order. Add a batch axis to pass them to the network."""
    if not 0 <= context_length <= total_length:
        raise ValueError(f"context_length must be in [0, total_length={total_length}], got {context_length}")
    is_target = natural_order_targets(ops.convert_to_tensor([context_length], "int32"),
                                      ops.convert_to_tensor([total_length], "int32"), total_length)
    positions = ops.arange(context_length, total_length, dtype="int32")
    return {"perm_mask": ops.cast(natural_order_mask(is_target)[0], "float32"),
            "target_mapping": ops.one_hot(positions, total_length, dtype="float32"),
            "target_positions": positions}
