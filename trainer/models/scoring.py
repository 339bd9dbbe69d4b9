"""Scoring text in natural order, read in segments with Transformer-XL memory.

``score_tokens(network, token_ids, lengths, context_lengths, segment_len)`` gives every token's
log-probability under the factorisation of ``natural_order.py``: the first ``context_lengths[b]``
tokens of row b are the context (not scored), then each token is predicted from the context and
the tokens before it.

The text is read in segments of ``segment_len`` tokens. Each layer's memory is its input (the
content states) over the last ``mem_len`` positions read before, as pretraining's mems, with
every position of a segment cached (``inference_config``); memory is always visible. Within a
segment the natural-order mask applies. So when ``mem_len`` covers the text read before each
segment, the result equals one pass over the whole text (``segment_len`` >= its length); with a
shorter memory, a token sees its own segment and the last ``mem_len`` positions before it
(Transformer-XL evaluation). Cost: two streams over each segment, keys over ``mem_len + segment_len``.

Rows are RIGHT-padded (``lengths``): padding only ever follows a row's last token, so it enters no
memory a real token reads. A row's context must fit in its first segment. A scored token with
nothing to see (the first token of a text without context) gets an output computed from a fully
masked row, which means nothing: give at least one context token (``xlnet score`` prepends
``<eod>``, what precedes a document in the pretraining streams).

All functions take and return tensors and run eagerly or inside a ``tf.function`` (the loop over
segments is a Python loop: ``token_ids``' length must be static there).
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import tensorflow as tf

from trainer.models.inference_network import check_inference_network
from trainer.models.natural_order import natural_order_mask, natural_order_targets
from trainer.models.network import XLNetNetwork

# (token_ids [B, L], input_mask [B, L], is_target [B, L], mems) -> (token_log_probs [B, L], new_mems)
SegmentFn = Callable[[tf.Tensor, tf.Tensor, tf.Tensor, Optional[Sequence[tf.Tensor]]],
                     tuple[tf.Tensor, Optional[list[tf.Tensor]]]]


def token_log_probs(logits: tf.Tensor, token_ids: tf.Tensor) -> tf.Tensor:
    """logits [..., V] and token_ids [...] -> log p(token) [...] float32 (log-softmax, then the token's entry)."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    return tf.gather(log_probs, tf.cast(token_ids, tf.int32), batch_dims=len(token_ids.shape))


def score_segment(network: XLNetNetwork, token_ids: tf.Tensor, input_mask: tf.Tensor, is_target: tf.Tensor,
                  mems: Optional[Sequence[tf.Tensor]] = None) -> tuple[tf.Tensor, Optional[list[tf.Tensor]]]:
    """One segment of natural-order scoring.

    token_ids [B, L] int; input_mask [B, L] (1 real, 0 padding); is_target [B, L] bool (the scored
    positions, after the segment's context); mems: n_layer [B, M, d_model] or None.
    Returns (token_log_probs [B, L] float32, 0.0 where not a target; new_mems: the last mem_len
    positions of each layer's input over memory and segment, or None when mem_len is 0).
    """
    token_ids = tf.cast(token_ids, tf.int32)
    is_target = tf.cast(is_target, tf.bool)
    batch, seq_len = tf.shape(token_ids)[0], token_ids.shape[1]
    positions = tf.tile(tf.range(seq_len, dtype=tf.int32)[None, :], tf.stack([batch, 1]))
    logits, new_mems = network(token_ids, tf.zeros_like(token_ids), natural_order_mask(is_target), mems=mems,
                               input_mask=input_mask, target_positions=positions,
                               target_valid=tf.cast(is_target, tf.float32), training=False)
    return tf.where(is_target, token_log_probs(logits, token_ids), 0.0), new_mems


def score_tokens(network: XLNetNetwork, token_ids: tf.Tensor, lengths: tf.Tensor, context_lengths: tf.Tensor,
                 segment_len: int, segment_fn: Optional[SegmentFn] = None) -> dict[str, tf.Tensor]:
    """Natural-order log-probabilities of right-padded texts, read in segments with memory.

    Args:
      network: built with ``inference_config(config, mem_len)``; its ``mem_len`` is the memory.
      token_ids: [B, T] int, row b's tokens in its first ``lengths[b]`` columns (right-padded).
      lengths: [B] int, tokens per row (context included).
      context_lengths: [B] int, leading tokens of each row that are context (not scored);
        each at most ``segment_len`` (the context is read as a whole, in the first segment).
      segment_len: tokens per segment (the last one is padded to it).
      segment_fn: ``score_segment`` bound to ``network`` by default; pass a ``tf.function`` of it to
        compile each segment (traced once per memory length).
    Returns a dict of tensors:
      token_log_probs [B, T] float32: log p(token t | context, tokens before t); 0.0 where not scored.
      scored [B, T] bool: the scored positions.
      log_likelihood [B] float32: the sum over scored positions.  num_tokens [B] int32: how many.
    """
    check_inference_network(network)
    if segment_len <= 0:
        raise ValueError(f"segment_len must be positive, got {segment_len}")
    segment_fn = segment_fn or (lambda *args: score_segment(network, *args))
    token_ids = tf.cast(tf.convert_to_tensor(token_ids), tf.int32)
    total = token_ids.shape[1]
    if total is None:
        raise ValueError("token_ids needs a static length (the segments are a Python loop)")
    lengths = tf.cast(lengths, tf.int32)
    context_lengths = tf.cast(context_lengths, tf.int32)
    tf.debugging.assert_less_equal(context_lengths, tf.minimum(lengths, segment_len),
                                   message="a row's context must fit in its length and in the first segment")
    padded = max(1, math.ceil(total / segment_len)) * segment_len
    ids = tf.pad(token_ids, [[0, 0], [0, padded - total]])
    input_mask = tf.range(padded)[None, :] < lengths[:, None]
    scored = natural_order_targets(context_lengths, lengths, padded)

    pieces, mems = [], None
    for start in range(0, padded, segment_len):
        window = slice(start, start + segment_len)
        log_probs, mems = segment_fn(ids[:, window], tf.cast(input_mask[:, window], tf.int32), scored[:, window],
                                     mems)
        pieces.append(log_probs)
    log_probs = tf.concat(pieces, axis=1)[:, :total]
    scored = scored[:, :total]
    return {"token_log_probs": log_probs, "scored": scored,
            "log_likelihood": tf.reduce_sum(log_probs, axis=1),
            "num_tokens": tf.reduce_sum(tf.cast(scored, tf.int32), axis=1)}


def score_in_one_pass(network: XLNetNetwork, token_ids: tf.Tensor, lengths: tf.Tensor,
                      context_lengths: tf.Tensor) -> dict[str, tf.Tensor]:
    """``score_tokens`` with the whole text as one segment and no memory: the reference the
    segmented reading equals when its memory covers the text."""
    return score_tokens(network, token_ids, lengths, context_lengths, segment_len=max(1, token_ids.shape[1]))
