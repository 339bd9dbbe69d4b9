"""The anchored recomputation of TensorFlow (tf.custom_gradient under stop_recording): the
implementation of trainer/layers/remat.py's ``recompute`` when keras.backend.backend() is
"tensorflow". The remat modes, and what each keeps, are described in trainer/layers/remat.py.

The recomputation takes its inputs through a data dependency on the incoming gradients (an
exact zero added to them, which no simplifier can prove zero): it cannot start before the backward
pass reaches the region, and no compiler (XLA's CSE, Grappler's) can merge it with the forward
pass, which would keep the intermediates again. The forward pass of a region takes its inputs the
same way from its differentiable inputs (the layer's input among them): TensorFlow's executor runs
whatever is ready, and every layer's input-free work (the memory's key and value projections, the
position keys, the dropout masks drawn from seeds) was built at the start of the step and kept until
its layer ran, about twice what a layer keeps under ``full`` (measured). For the same reason a
recomputed dropout builds its mask (one compiled call) only once its input is there
(trainer/layers/tensorflow_dropout.py). XLA's OptimizationBarrier (TensorFlow 2.21 has it
as the XlaOptimizationBarrier op, outside tf.raw_ops) does not do it on XLA:CPU: the CPU pipeline
expands the barrier before its CSE pass, and the recomputation was merged back (measured).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.eager import record

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


def recompute(fn: Callable[[Any, Any], Any], differentiable: Any, fixed: Any = None) -> Any:
    """TensorFlow's anchored form of ``trainer.layers.remat.recompute`` (its docstring says what each
    argument holds): the backward pass reruns ``fn`` from the inputs alone."""
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
