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

The recomputation takes its inputs through a data dependency on the incoming gradients (an
exact zero added to them, which no simplifier can prove zero): it cannot start before the backward
pass reaches the region, and no compiler (XLA's CSE, Grappler's) can merge it with the forward
pass, which would keep the intermediates again. The forward pass of a region takes its inputs the
same way from its differentiable inputs (the layer's input among them): TensorFlow's executor runs
whatever is ready, and every layer's input-free work (the memory's key and value projections, the
position keys, the dropout masks drawn from seeds) was built at the start of the step and kept until
its layer ran, about twice what a layer keeps under ``full`` (measured). For the same reason a
recomputed dropout builds its mask (one compiled call) only once its input is there
(trainer/layers/dropout.py). XLA's OptimizationBarrier (TensorFlow 2.21 has it
as the XlaOptimizationBarrier op, outside tf.raw_ops) does not do it on XLA:CPU: the CPU pipeline
expands the barrier before its CSE pass, and the recomputation was merged back (measured).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.eager import record

REMAT_MODES = ("none", "attention", "full")
_STATE = threading.local()


def recomputing() -> bool:
    """Whether the code being traced is a backward pass's recomputation (see ``recompute``)."""
    return getattr(_STATE, "depth", 0) > 0


@contextlib.contextmanager
def _recomputation() -> Iterator[None]:
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


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
            # Also in the forward pass nothing of fn starts before its first input is there: the
            # executor would otherwise run every layer's input-free work (memory projections,
            # position keys, dropout masks) at the start of the step and keep it until its layer.
            outputs = run(_after(tensors, tensors[:len(diff_at)]) if diff_at else tensors)
        flat = tf.nest.flatten(outputs)
        structure.append((outputs, [i for i, t in enumerate(flat) if t is not None]))
        present = [t for t in flat if t is not None]

        def grad(*output_grads, variables=None):
            variables = list(variables or ())
            output_grads = [tf.zeros_like(t) if dy is None else dy for t, dy in zip(present, output_grads)]
            again = _after(tensors, output_grads[:1])
            sources = list(again[:len(diff_at)]) + variables
            with tf.GradientTape(watch_accessed_variables=False) as tape, _recomputation():
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


def _after(tensors, anchors):
    """``tensors`` unchanged, but computed from every one of ``anchors`` (see the module docstring):
    in the backward pass the first incoming gradient, in the forward pass the region's
    differentiable inputs (the layer's input among them).

    The zero is ``x * 0.0`` for one element of each anchor: XLA keeps a float multiply by zero (NaN
    and infinities make it no identity) and so does Grappler, unlike ``|x| < 0``, which XLA folds.
    It is NaN where such an element is not finite; the loss and gradients are not finite then anyway,
    and the integer inputs (positions, seeds) become zeros, still valid indices, rather than a NaN's
    cast, so that the run stops at the controller's finite-loss check, not in a gather.
    """
    zero = tf.add_n([tf.reduce_sum(tf.cast(tf.reshape(x, [-1])[:1], tf.float32)) for x in anchors]) * 0.0
    nonzero = tf.not_equal(zero, 0.0)
    return [_depending(t, zero, nonzero) for t in tensors]


def _depending(tensor: tf.Tensor, zero: tf.Tensor, nonzero: tf.Tensor) -> tf.Tensor:
    """``tensor``'s value, computed from ``zero`` (an exact zero, or NaN) and ``nonzero`` (zero != 0)."""
    if tensor.dtype == tf.bool:
        return tf.logical_or(tensor, nonzero)
    if tensor.dtype.is_floating:
        return tensor + tf.cast(zero, tensor.dtype)
    return tf.where(nonzero, tf.zeros_like(tensor), tensor)
