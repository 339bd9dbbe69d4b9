"""The few operations of the models whose best form depends on the Keras backend: one dispatch.

On TensorFlow each is trainer/models/tensorflow_ops.py (imported on first use, so no other
backend loads TensorFlow); elsewhere the ``keras.ops`` form, with the same values.
"""
from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, ContextManager, Optional

from keras import ops

from trainer.layers.backend import on_tensorflow

Tensor = Any  # a tensor of the running backend (tf.Tensor, jax.Array, ...)


def tensorflow_ops() -> Optional[ModuleType]:
    """The TensorFlow implementations (trainer.models.tensorflow_ops) when Keras runs on TensorFlow, else None."""
    if not on_tensorflow():
        return None
    from trainer.models import tensorflow_ops
    return tensorflow_ops


def dynamic_shape(x: Tensor) -> Any:
    """x's shape, indexable: ``tf.shape`` on TensorFlow (the graph keeps the shapes it always
    had), the static shape elsewhere."""
    tf_ops = tensorflow_ops()
    return tf_ops.dynamic_shape(x) if tf_ops else ops.shape(x)


def batch_gather(x: Tensor, indices: Tensor) -> Tensor:
    """x [B, L, ...] and int indices [B, P] -> [B, P, ...]: row ``indices[b, p]`` of example b."""
    tf_ops = tensorflow_ops()
    if tf_ops:
        return tf_ops.batch_gather(x, indices)
    indices = ops.reshape(indices, (*ops.shape(indices), *[1] * (len(x.shape) - 2)))
    return ops.take_along_axis(x, indices, axis=1)


def argmax(x: Tensor) -> Tensor:
    """int32 index of the largest value on the last axis."""
    tf_ops = tensorflow_ops()
    return tf_ops.argmax(x) if tf_ops else ops.cast(ops.argmax(x, axis=-1), "int32")


def tied_logits(rows: Tensor, table: Tensor, bias: Tensor) -> Tensor:
    """rows [N, d] times the transposed table [V, d], plus bias [V] -> [N, V]."""
    tf_ops = tensorflow_ops()
    if tf_ops:
        return tf_ops.tied_logits(rows, table, bias)
    # The bias as a rank-1 product, so that its gradient is a [1, N] x [N, V] product and not a sum
    # over the N rows: JAX's CPU backend (jaxlib 0.10) sums a [336, 32000] gradient over its rows in
    # 46.6 ms, the product takes 0.8 ms (TensorFlow's XLA sums in 1.2 ms). The same logits.
    ones = ops.ones((ops.shape(rows)[0], 1), dtype=rows.dtype)
    return ops.matmul(rows, ops.transpose(table)) + ops.matmul(ones, ops.expand_dims(bias, 0))


def after(x: Tensor, dependency: Tensor) -> Tensor:
    """``x``, once ``dependency`` is computed (TensorFlow's executor would otherwise run whatever is
    ready at once); XLA orders the work of other backends itself."""
    tf_ops = tensorflow_ops()
    return tf_ops.after(x, dependency) if tf_ops else x


def forward_only(enabled: bool) -> ContextManager[None]:
    """A block whose work keeps nothing for a backward pass when ``enabled``: TensorFlow stops
    recording on its tapes; other backends differentiate functionally, and the block's outputs
    have their gradient stopped by the caller."""
    tf_ops = tensorflow_ops()
    return tf_ops.forward_only(enabled) if tf_ops else contextlib.nullcontext()
