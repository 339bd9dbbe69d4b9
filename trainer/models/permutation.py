"""On-device permutation-LM inputs: factorisation ranks from a seed, perm_mask, targets.

Everything here runs inside the training step on [B, L] tensors, so no [L, L] tensor ever
crosses from host to device. The rules follow the original XLNet:

* The sequence has two parts, the context (first ``reuse_len`` positions) and the A/B part.
  Each part is split into blocks of ``perm_size`` positions and one random order of the
  ``perm_size`` offsets is applied to every block of the part; earlier blocks come first.
* Non-target tokens (not masked, not <sep>/<cls>) get rank -1: every position sees them and
  they see no target. A target never sees itself in the query stream.
* ``perm_mask[i, j] = 1`` (i may NOT attend to j) when rank(i) <= rank(j) and j is a target or a
  functional token, where a non-target query uses rank(i) + 1 (so it sees itself).
* Context rows never see the A/B part; the A/B part sees all of the context.
* Targets are the masked, non-functional positions in ascending order, at most num_predict.
"""
from __future__ import annotations

import numpy as np
from keras import ops

from tfrecords.record_config import record_parts, undivided_parts
from trainer.layers.counter_hash import GOLDEN_32, as_uint32, mix32
from trainer.models import backend_ops
from trainer.models.backend_ops import Tensor

# uint32 keys xor this, read as int32, sort as the uint32 keys do: every backend sorts int32
# (TensorFlow sorts no uint32, and JAX has no int64 by default). Constants meet uint32 tensors as
# NumPy uint32 scalars: JAX refuses Python ints above 2**31 - 1 (trainer/layers/counter_hash.py).
_SIGN_BIT = np.uint32(0x80000000)


def check_permutation_shapes(seq_len: int, reuse_len: int, perm_size: int) -> None:
    """Raises ValueError unless both parts (context, A/B) split into whole perm_size blocks."""
    if perm_size <= 0:
        raise ValueError(f"perm_size must be positive, got {perm_size}")
    if not 0 <= reuse_len < seq_len:
        raise ValueError(f"reuse_len must be in [0, seq_len={seq_len}), got {reuse_len}")
    undivided = undivided_parts(seq_len, reuse_len, perm_size)
    if undivided:
        name, length = undivided[0]
        raise ValueError(f"perm_size={perm_size} must divide {name}={length} (each part is permuted in blocks)")


def _offset_orders(perm_seed: Tensor, num_parts: int, perm_size: int) -> Tensor:
    """[B, 2] seeds -> [B, num_parts, perm_size] int32, one random order of the block offsets per part.

    A counter-based hash of (seed, part, offset) sorted per part. tf.random.stateless_uniform
    would be the obvious choice, but its Philox stream differs between eager/graph and XLA, and
    the same seed must give the same permutation wherever the step runs (and on every backend).
    The keys of one example are distinct (mix32 is a bijection of distinct counters), so any
    sort gives the same order: ``ops.argsort`` has no stable flag and needs none.
    """
    seed = as_uint32(perm_seed)
    counter = as_uint32(ops.arange(num_parts * perm_size, dtype="int32"))[None, :]
    keys = mix32(counter + seed[:, :1] * np.uint32(GOLDEN_32))
    keys = mix32(ops.bitwise_xor(keys, mix32(seed[:, 1:])))
    keys = ops.view(ops.bitwise_xor(keys, _SIGN_BIT), "int32")
    return ops.argsort(ops.reshape(keys, [-1, num_parts, perm_size]), axis=-1)


def sample_ranks(perm_seed: Tensor, seq_len: int, reuse_len: int, perm_size: int) -> Tensor:
    """[B, 2] int stateless seeds -> [B, seq_len] int32 factorisation rank of every position.

    Ranks are a permutation of 0..seq_len-1: all context ranks precede all A/B ranks, blocks of
    one part come in order, and inside every block of part k the offsets follow the same random
    order (drawn from the example's seed). The same seed always gives the same ranks.
    """
    check_permutation_shapes(seq_len, reuse_len, perm_size)
    parts = [length for _, length in record_parts(seq_len, reuse_len) if length > 0]

    orders = _offset_orders(perm_seed, len(parts), perm_size)
    ranks, start = [], 0
    for index, length in enumerate(parts):
        block_starts = start + perm_size * ops.arange(length // perm_size, dtype="int32")
        part_ranks = block_starts[None, :, None] + orders[:, index, None, :]
        ranks.append(ops.reshape(part_ranks, [-1, length]))
        start += length
    return ops.concatenate(ranks, axis=1)


def target_flags(input_ids: Tensor, is_masked: Tensor, sep_id: int, cls_id: int) -> tuple[Tensor, Tensor]:
    """-> (is_target, is_functional) [B, L] bool. <sep>/<cls> are never targets."""
    is_functional = ops.logical_or(ops.equal(input_ids, sep_id), ops.equal(input_ids, cls_id))
    is_target = ops.logical_and(ops.cast(is_masked, "bool"), ops.logical_not(is_functional))
    return is_target, is_functional


def permutation_mask(ranks: Tensor, is_target: Tensor, is_functional: Tensor, reuse_len: int) -> Tensor:
    """[B, L, L] bool, True where query i may NOT attend to key j (the original's perm_mask = 1)."""
    seq_len = ranks.shape[1]
    hidden = ops.logical_or(is_target, is_functional)  # what others may only see when earlier in the order
    rank = ops.where(hidden, ranks, -1)
    query_rank = ops.where(is_target, rank, rank + 1)
    blocked = ops.logical_and(query_rank[:, :, None] <= rank[:, None, :], hidden[:, None, :])
    in_ab_part = ops.arange(seq_len, dtype="int32") >= reuse_len
    same_part = ops.equal(in_ab_part[:, None], in_ab_part[None, :])
    context_row_ab_column = ops.logical_and(ops.logical_not(in_ab_part)[:, None], in_ab_part[None, :])
    return ops.logical_or(ops.logical_and(blocked, same_part[None]), context_row_ab_column[None])


def select_targets(is_target: Tensor, num_predict: int) -> tuple[Tensor, Tensor]:
    """[B, L] bool -> (positions [B, P] int32, valid [B, P] float32).

    The first ``num_predict`` target positions in ascending order; remaining rows are padding
    (valid 0, pointing at some non-target position). Targets beyond num_predict stay hidden by
    perm_mask but are not predicted.
    """
    seq_len = is_target.shape[1]
    position = ops.arange(seq_len, dtype="int32")
    # Targets score above every non-target; within each group earlier positions score higher.
    score = ops.where(is_target, 2 * seq_len - position, seq_len - position)
    _, positions = ops.top_k(score, k=num_predict, sorted=True)
    valid = ops.cast(backend_ops.batch_gather(is_target, positions), "float32")
    return positions, valid


def dense_inputs(input_ids: Tensor, is_masked: Tensor, perm_seed: Tensor, reuse_len: int, perm_size: int,
                 num_predict: int, sep_id: int, cls_id: int) -> dict[str, Tensor]:
    """The original-style dense inputs built from compact features (for comparison and export).

    Returns perm_mask [B, L, L] float32, target_mapping [B, P, L] float32, target_mask [B, P]
    float32, target [B, P] int32 and the ranks [B, L].
    """
    seq_len = input_ids.shape[1]
    ranks = sample_ranks(perm_seed, seq_len, reuse_len, perm_size)
    is_target, is_functional = target_flags(input_ids, is_masked, sep_id, cls_id)
    positions, valid = select_targets(is_target, num_predict)
    return {
        "perm_mask": ops.cast(permutation_mask(ranks, is_target, is_functional, reuse_len), "float32"),
        "target_mapping": ops.one_hot(positions, seq_len, dtype="float32") * valid[:, :, None],
        "target_mask": valid,
        "target": backend_ops.batch_gather(ops.cast(input_ids, "int32"), positions) * ops.cast(valid, "int32"),
        "ranks": ranks,
    }
