"""Rematerialisation: a function whose backward pass recomputes it instead of keeping its intermediates.

The training setting ``remat`` (LoopConfig.remat) chooses what the network recomputes:

* ``none``: nothing; the backward pass keeps what TensorFlow's gradients need.
* ``attention``: each layer's attention core, for the content stream and the query stream
  (TwoStreamRelativeAttention._attend: the content, relative-position and segment scores, the
  mask, the softmax, the probabilities' dropout and their product with the values), and the
  feed-forward's activation (PositionwiseFeedForward: GELU's intermediates, from its input).
* ``full``: each whole layer (XLNetBlock: attention with its projections and LayerNorm, then the
  feed-forward sub-layer, on both streams).

What the backward pass keeps of one layer (read from the gradient graph TensorFlow builds, before
Grappler or XLA; B batch, N heads, H d_head, D d_model, F d_inner, L the segment's length, M the
memory's, K = M + L keys, P the query stream's rows, R = K + L relative distances (K + 1 for
'uni'), G = 2 with bi_data else 1). "cd" is the compute dtype (bfloat16 under mixed_bfloat16);
"f32" stays float32 under mixed precision (Keras normalises in float32); masks are bool (1 byte);
a "dropout" item exists only when that rate is > 0 and counts its keep mask [same shape] bool and,
where listed, the dropped tensor.

``none``, per layer, for the content stream (rows Q = L) and the query stream (Q = P) each:
  attention, [B, N, Q, K]: the softmax probabilities (cd); dropatt: keep mask and dropped
    probabilities (cd); query stream only: the relative-score gather indices (int32);
  [B, N, Q, H] cd: the queries plus r_w_bias, plus r_r_bias and plus r_s_bias (scaled), 3 tensors;
  [B, 1, Q, K] bool: the segment-difference condition; [B, Q, N*H] cd: the attention vectors
    (the output projection's input); query stream: query_valid [B, 1, P, 1];
  [B, Q, D]: the stream itself (cd, the q projection's input); dropout: the output's keep mask;
    the LayerNorm's input (f32) and normalised input (f32), and [B, Q, 1] f32 x3 statistics;
  feed-forward, [B, Q, F] cd: the inner pre-activation and GELU's three intermediates (4 tensors)
    and layer_2's input (the GELU output, dropped if dropout: + its keep mask); [B, Q, D]: its
    input (the attention output, cd), dropout: the output's keep mask, the LayerNorm's input and
    normalised input (f32) and its [B, Q, 1] statistics.
  Once per layer: keys and values [B, N, K, H] cd (both streams use them), the position keys
  k_r [G, N, R, H] cd, the memory [B, M, D] cd (the k/v projections' input).
``attention``: as ``none`` without any [B, N, Q, K] tensor, without the biased queries and without
  GELU's three intermediates (the feed-forward keeps its pre-activation, the region's input): per
  stream the region keeps its inputs, the queries [B, N, Q, H] cd, and shares the keys, values,
  k_r, biases and seg_embed; the masks and segment differences [B, Q, K] bool are the network's
  (one set for every layer), the query positions [B, P] int32 and the dropout seed [2] int64.
  During the backward pass one stream's [B, N, Q, K] tensors of one layer exist again (the
  largest transient: its scores, probabilities and their gradients).
``full``: per layer only its inputs, the content stream h [B, L, D] cd and the query stream g
  [B, P, D] cd (each layer's output is the next one's input; the network passes them before the
  last LayerNorm, which the next layer applies, so that a recomputation skips the layer's last
  matmul: XLNetBlock), its biases and seg_embed, and its eight dropout seeds [2] int64; shared by
  all layers: the position encoding [G, R, D] cd, the masks and segment differences, the memory,
  the target positions and validity. During the backward pass one layer's ``none`` set exists
  again, with its gradients (the largest transient).

Under XLA the compiler's buffer assignment decides what is live: it fuses elementwise chains and
recomputes them inside fusions, so it keeps less than the lists above in every mode; the regions
still bound what it can keep.

Dropout: the recomputation must draw the masks of the forward pass. Every HashDropout inside a
recomputed region takes its seed as an input, drawn before the region by ``draw_seed`` /
``draw_seeds`` in the order a plain call draws them (one SeedGenerator per dropout, each advanced
once per forward call, as with ``none``), so every mode gives the same bits and the generators'
checkpointed state is the same.

How: on TensorFlow, the anchored recomputation of trainer/layers/tensorflow_remat.py (its memory is
what the lists above and the planner describe, measured); on the other backends ``keras.remat``
(jax.checkpoint on JAX), which gives the same values and gradients (the same operations run again on
the same inputs and seeds) and leaves what is kept to that backend's compiler.
"""
from __future__ import annotations

from typing import Any, Callable

import keras
from keras import ops

from trainer.layers.backend import on_tensorflow

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
    if on_tensorflow():
        from trainer.layers import tensorflow_remat

        return tensorflow_remat.recompute(fn, differentiable, fixed)
    # keras.remat has no fixed inputs: their gradients stop here, as the anchored recomputation's do.
    fixed = keras.tree.map_structure(lambda t: None if t is None else ops.stop_gradient(t), fixed)
    return keras.remat(fn)(differentiable, fixed)


def recomputing() -> bool:
    """Whether the code being traced is a backward pass's recomputation: TensorFlow's anchored one
    (trainer/layers/tensorflow_remat.py); always False on the other backends, whose remat reruns the
    function as it was traced, with no path of its own."""
    if on_tensorflow():
        from trainer.layers import tensorflow_remat

        return tensorflow_remat.recomputing()
    return False
