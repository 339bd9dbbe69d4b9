"""Seeded, resumable example order and batches: the tf.data side every fine-tuning task shares.

The training order is a pure function of the seed and the step (:func:`example_order`), so a
resumed run reads exactly what an uninterrupted one reads. Evaluation batches can be padded to
one static shape (:func:`batched_rows`), as a TPU wants one compiled program per eval set.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfrecords.errors import UsageError
from trainer.inputs.text_files import FinetuneDataError


def example_order(num_examples: int, seed: int, start: int = 0) -> tf.data.Dataset:
    """Endless int64 example indices, epoch after epoch, from position ``start`` of that sequence.

    Epoch e visits every example once, in the order of a stateless shuffle seeded by (seed, e):
    the n-th index is a pure function of (num_examples, seed, n), so a run resumed at step s
    reads exactly what an uninterrupted run reads after step s.
    """
    if num_examples <= 0:
        raise FinetuneDataError("no examples to train on")
    first_epoch, offset = divmod(int(start), num_examples)

    def epoch(index: tf.Tensor) -> tf.data.Dataset:
        order = tf.random.experimental.stateless_shuffle(
            tf.range(num_examples, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), index]))
        return tf.data.Dataset.from_tensor_slices(order)

    return tf.data.Dataset.range(first_epoch, 2**62).flat_map(traced_as_written(epoch)).skip(offset)


def training_dataset(columns: dict[str, np.ndarray], encode: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]],
                     global_batch_size: int, targets: Any, *, seed: int, start_step: int = 0,
                     accumulation_steps: int = 1,
                     input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Endless training batches for one input pipeline, as tf.distribute hands them to its replicas.

    Args:
      columns: per-example arrays (first axis = example), e.g. :func:`trainer.inputs.sequence_examples.example_columns`' raw
        strings or SQuAD features.
      encode: turns a batch of ``columns`` rows into model features (in the tf.data graph).
      targets: an array or a dict of arrays with one row per example.
    Step s takes the examples ``example_order`` lists at positions [s·G·A, (s+1)·G·A) (G the global
    batch, A ``accumulation_steps``); micro-step a of replica r gets the r-th slice of the a-th
    global batch. Each element is ``(features, targets)`` for ONE replica, with a leading
    micro-step axis: [A, G / replicas, ...]. Elements come replica by replica for the replicas
    of ``input_context``'s pipeline (all replicas when None).
    """
    num_replicas = input_context.num_replicas_in_sync if input_context else 1
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    batch, remainder = divmod(global_batch_size, num_replicas)
    if remainder or batch == 0:
        raise UsageError(f"train_batch_size {global_batch_size} cannot be split over {num_replicas} replicas")
    local = num_replicas // pipelines
    tables = {name: tf.constant(values) for name, values in columns.items()}
    target_tables = tf.nest.map_structure(tf.constant, targets)
    step_size = global_batch_size * accumulation_steps

    def replica_batches(indices: tf.Tensor) -> tf.data.Dataset:
        # [A * G] -> [replicas of this pipeline, A, batch]
        grid = tf.transpose(tf.reshape(indices, [accumulation_steps, num_replicas, batch]), [1, 0, 2])
        return tf.data.Dataset.from_tensor_slices(grid[pipeline_id * local:(pipeline_id + 1) * local])

    def micro_steps(value: tf.Tensor) -> tf.Tensor:
        return tf.reshape(value, tf.concat([[accumulation_steps, batch], tf.shape(value)[1:]], 0))

    def lookup(indices: tf.Tensor):
        flat = tf.reshape(indices, [-1])
        features = encode({name: tf.gather(table, flat) for name, table in tables.items()})
        gathered = tf.nest.map_structure(lambda table: tf.gather(table, flat), target_tables)
        return tf.nest.map_structure(micro_steps, features), tf.nest.map_structure(micro_steps, gathered)

    num_examples = len(next(iter(columns.values())))
    order = example_order(num_examples, seed, start_step * step_size).batch(step_size, drop_remainder=True)
    return order.flat_map(traced_as_written(replica_batches)).map(
        traced_as_written(lookup), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(tf.data.AUTOTUNE)


def traced_as_written(function: Callable) -> Callable:
    """``function`` for tf.data, traced as written: without AutoGraph's conversion, which would spend
    every process's start-up re-reading the source of the function and all it calls, to leave a
    function without Python control flow on tensors as it is."""
    return tf.autograph.experimental.do_not_convert(function)


def pad_rows(columns: Any, multiple: int) -> Any:
    """``columns`` (a structure of arrays with as many rows each) with the last row repeated until
    the row count is a multiple of ``multiple``: a padded evaluation set whose batches all have one
    static shape. The outputs of the added rows are to be dropped."""
    count = len(tf.nest.flatten(columns)[0])
    missing = -count % multiple
    if not count or not missing:
        return columns
    return tf.nest.map_structure(lambda rows: np.concatenate([rows, np.repeat(rows[-1:], missing, axis=0)]),
                                 columns)


def batched_rows(rows: Any, batch_size: int, pad_last_batch: bool) -> tf.data.Dataset:
    """``rows`` (a structure of arrays) in file order, in batches of ``batch_size``; with
    ``pad_last_batch`` the last one is filled by :func:`pad_rows`, so every batch has one shape."""
    if pad_last_batch:
        rows = pad_rows(rows, batch_size)
    return tf.data.Dataset.from_tensor_slices(rows).batch(batch_size, drop_remainder=pad_last_batch)
