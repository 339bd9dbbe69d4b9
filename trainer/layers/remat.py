"""Rematerialisation: a function whose backward pass recomputes it instead of keeping its intermediates.

The training setting ``remat`` (LoopConfig.remat) chooses what the network recomputes:

* ``none``: nothing; the backward pass keeps what TensorFlow's gradients need.
* ``attention``: each layer's attention core, for the content stream and the query stream
  (TwoStreamRelativeAttention._attend: the content, relative-position and segment scores, the
  mask, the softmax, the probabilities' dropout and their product with the values).
* ``full``: each whole layer (XLNetBlock: attention with its projections and LayerNorm, then the
  feed-forward sub-layer, on both streams).

What the backward pass keeps of one layer, per stream (B batch, N heads, H d_head, D d_model,
F d_inner, L the segment's length, M the memory's, K = M + L, P the query stream's rows,
R the relative distances, G = 2 with bi_data else 1). Shapes in the compute dtype unless said;
masks are bool, positions int32, seeds int64 [2].

``none``, content stream (query stream the same with Q = P; its relative scores are gathered
by position, which keeps int32 indices [B, N, P, K] as well):
  [B, N, Q, K]: the softmax probabilities, the dropout's keep mask (bool) and the dropped
  probabilities (without dropatt only the probabilities); [B, N, Q, H]: the queries plus each
  of the three biases, the attention vectors; [B, N, K, H]: keys and values (shared by both
  streams); [G, N, R, H]: the position keys; [B, Q, D]: the stream, the output projection,
  the attention's LayerNorm input and output; [B, Q, F]: the feed-forward's inner activation
  before and after GELU (and dropout's keep mask); [B, Q, D]: the feed-forward's output and
  LayerNorm input.
``attention``: as ``none`` without any [B, N, Q, K] tensor: the recomputed region keeps only
  its inputs, the queries [B, N, Q, H], keys and values [B, N, K, H], position keys [G, N, R, H],
  the biases and seg_embed, the masks and segment differences [B, Q, K] (bool, shared by every
  layer), the query positions [B, P] and the dropout seed; its output, the attention vectors
  [B, N, Q, H], is kept by the output projection. While one layer's attention is recomputed,
  that layer's [B, N, Q, K] tensors of one stream exist (the largest transient).
``full``: the layer's inputs only: the content stream h [B, L, D] and the query stream g [B, P, D]
  (the layer's output is the next layer's input, kept there), besides what every layer shares
  (position encoding [G, R, D], masks, segment differences, memory, target positions and
  validity) and the per-layer biases, seg_embed and eight dropout seeds. While one layer is
  recomputed, everything ``none`` keeps for that one layer exists (the largest transient).

Dropout: the recomputation must draw the masks of the forward pass. Every HashDropout inside a
recomputed region takes its seed as an input, drawn before the region by ``draw_seed`` /
``draw_seeds`` in the order a plain call draws them (one SeedGenerator per dropout, each advanced
once per forward call, as with ``none``), so every mode gives the same bits and the generators'
checkpointed state is the same.

The recomputation is fed through XLA's OptimizationBarrier together with the incoming
gradients: it cannot start before the backward pass reaches the region, and no compiler
(XLA's CSE, Grappler) can merge it with the forward pass, which would keep the intermediates
again. TensorFlow registers the op for CPU and GPU as well, so the same graph runs with and
without ``jit_compile``.
"""
from __future__ import annotations

from typing import Any, Callable

import tensorflow as tf
from tensorflow.compiler.tf2xla.ops import gen_xla_ops
from tensorflow.python.eager import record

REMAT_MODES = ("none", "attention", "full")


def check_remat(mode: str) -> str:
    """``mode`` if it is one of REMAT_MODES, else ValueError naming the three."""
    if mode not in REMAT_MODES:
        raise ValueError(f"remat must be one of {', '.join(REMAT_MODES)}, got {mode!r}")
    return mode


def recompute(fn: Callable[[Any, Any], Any], differentiable: Any, fixed: Any = None) -> Any:
    """``fn(differentiable, fixed)``, keeping only its inputs for the backward pass, which runs it again.

    Args:
      fn: a function of two nests of tensors, deterministic given them (draw any dropout seed
        outside and pass it in ``fixed``); it may read variables (their gradients are returned).
      differentiable: a nest of floating tensors (or None) that get gradients.
      fixed: a nest of tensors (or None) that get none: masks, positions, seeds, and floating
        tensors whose gradient is never wanted (the Transformer-XL memory).
    Returns:
      fn's output, a nest of tensors (or None).
    """
    diff_flat, fixed_flat = tf.nest.flatten(differentiable), tf.nest.flatten(fixed)
    diff_at = [i for i, t in enumerate(diff_flat) if t is not None]
    fixed_at = [i for i, t in enumerate(fixed_flat) if t is not None]
    structure = []

    def run(tensors):
        diffs, fixeds = list(diff_flat), list(fixed_flat)
        for i, tensor in zip(diff_at, tensors[:len(diff_at)]):
            diffs[i] = tensor
        for i, tensor in zip(fixed_at, tensors[len(diff_at):]):
            fixeds[i] = tensor
        return fn(tf.nest.pack_sequence_as(differentiable, diffs), tf.nest.pack_sequence_as(fixed, fixeds))

    @tf.custom_gradient
    def region(*tensors):
        # Every input is an argument (not a capture), so that custom_gradient hands the grad the
        # variables read inside fn and no variable an input was computed from.
        with record.stop_recording():
            outputs = run(tensors)
        flat = tf.nest.flatten(outputs)
        structure.append((outputs, [i for i, t in enumerate(flat) if t is not None]))
        present = [t for t in flat if t is not None]

        def grad(*output_grads, variables=None):
            variables = list(variables or ())
            output_grads = [tf.zeros_like(t) if dy is None else dy for t, dy in zip(present, output_grads)]
            again = gen_xla_ops.xla_optimization_barrier(list(tensors) + output_grads)[:len(tensors)]
            sources = list(again[:len(diff_at)]) + variables
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(sources)
                recomputed = [t for t in tf.nest.flatten(run(again)) if t is not None]
            grads = tape.gradient(recomputed, sources, output_gradients=output_grads,
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            inputs_grads = grads[:len(diff_at)] + [None] * len(fixed_at)
            # custom_gradient passes ``variables`` only when fn read some, and then wants their gradients too
            return (inputs_grads, grads[len(diff_at):]) if variables else inputs_grads

        return present, grad

    present = region(*[diff_flat[i] for i in diff_at], *[fixed_flat[i] for i in fixed_at])
    outputs, at = structure[-1]
    flat = [None] * len(tf.nest.flatten(outputs))
    for i, tensor in zip(at, present):
        flat[i] = tensor
    return tf.nest.pack_sequence_as(outputs, flat)
