"""Stream-ordered tf.data reader: batches in which every row continues its own text stream.

Layout of a global batch of G rows over N replicas (B = G / N rows per replica):
with bi_data each per-replica batch is [forward half, backward half], so there are
R = N * B / 2 forward rows (R = G without bi_data). Forward row r (r = replica * B/2 + j)
owns the forward streams {i-th stream of the split : i % R == r} and walks through them one
after another, epoch after epoch; its backward partner row reads the reversed copies
(stream s + num_streams) in the same order. Each slot (one row of one replica) is one
TFRecordDataset chain; a deterministic interleave with one cycle element per slot assembles
the per-replica batches, so successive batches of a slot continue its stream and no record
is ever shuffled, cached or dropped.

Each element is one replica's input for one optimizer step: int32 features shaped
[accumulation_steps, B, ...] (tfrecords.schema.COMPACT_FEATURES: input_ids, segment_ids,
is_masked [.., seq_len], perm_seed [.., 2], stream_id, stream_pos [..]), so gradient
accumulation reads consecutive records of every row. The reader can start at any step (exact resume) without reading the
records before it.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import tensorflow as tf

from tfrecords import schema
from tfrecords.permutation_seeds import permutation_seeds_in_graph as permutation_seeds
from tfrecords.stream_layout import (  # noqa: F401  (the layout's names, imported from here by the trainer)
    MISSING_RECORD,
    STREAM_ENDED_EARLY,
    ManifestMismatchError,
    MaskSampler,
    Segment,
    SlotStart,
    SpanResampler,
    StreamLayout,
    local_replicas,
    per_replica_batch_size,
    row_walks,
    slot_rows,
    slot_start,
    split_segments,
    stream_ended_early_words,
    validate_manifest,
)
from tfrecords.vocabulary import file_sha256, vocabulary_sha256  # noqa: F401 (file_sha256 imported from here)


READ_BUFFER_BYTES = 256 << 10


def whole_segment(records: tf.data.Dataset, count: tf.Tensor, file: tf.Tensor, stream_id: tf.Tensor,
                  first: tf.Tensor) -> tf.data.Dataset:
    """``records`` (a stream's records from ``first`` in ``file``, taken up to ``count``) as exactly
    ``count`` elements: MISSING_RECORD markers naming the shard and the stream stand in for any that
    the file lacks."""
    words = stream_ended_early_words(file, tf.strings.as_string(stream_id), tf.strings.as_string(count),
                                     tf.strings.as_string(first))
    marker = tf.strings.join([MISSING_RECORD, *words])
    return records.concatenate(tf.data.Dataset.from_tensors(marker).repeat()).take(count)


def check_no_missing_records(serialized: tf.Tensor) -> tf.Tensor:
    """``serialized`` (a batch of records), once checked to hold no MISSING_RECORD marker; otherwise an
    InvalidArgumentError naming the first missing record's shard and stream (see stream_ended_early)."""
    missing = tf.equal(tf.strings.substr(serialized, 0, 1), MISSING_RECORD)
    words = tf.strings.substr(tf.boolean_mask(serialized, missing)[:1], 1, -1)
    check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(missing)), [words])
    with tf.control_dependencies([check]):
        return tf.identity(serialized)


def stream_ended_early(error: BaseException) -> bool:
    """Whether ``error`` is a reader's report of a stream that ended before its manifest's count (a
    data error, like a corrupted record)."""
    return isinstance(error, tf.errors.InvalidArgumentError) and STREAM_ENDED_EARLY in (error.message or "")


def interleave_slots(count: int, slot_records: Callable[[tf.Tensor], tf.data.Dataset],
                     accumulation_steps: int) -> tf.data.Dataset:
    """The records of ``count`` slots, ``accumulation_steps`` consecutive records of each slot in
    turn (slot-major), deterministically."""
    return tf.data.Dataset.range(count).interleave(
        slot_records, cycle_length=count, block_length=accumulation_steps, num_parallel_calls=min(count, 16),
        deterministic=True)


def batched_features(records: tf.data.Dataset, batch: int, accumulation_steps: int,
                     features_fn: Callable[..., dict[str, tf.Tensor]]) -> tf.data.Dataset:
    """Slot-major records -> one replica's step-major features per element (``features_fn``), prefetched.

    The map runs batches in parallel (in order), but one after another under TensorFlow's op
    determinism (train.deterministic): tf.data's make_deterministic rewrite would make it
    sequential then anyway (the function holds a stateful op, check_no_missing_records's Assert)
    and, rewriting a ParallelMapDatasetV2 into a MapDataset, keeps its ``use_unbounded_threadpool``
    attribute, which TensorFlow reports as an error line ("NodeDef mentions attribute
    use_unbounded_threadpool which is not in the op definition") on every run."""
    batched = records.batch(batch * accumulation_steps, drop_remainder=True)
    parallel = None if op_determinism_enabled() else tf.data.AUTOTUNE
    return batched.map(features_fn, num_parallel_calls=parallel, deterministic=True if parallel else None) \
        .prefetch(tf.data.AUTOTUNE)


def op_determinism_enabled() -> bool:
    """Whether ``tf.config.experimental.enable_op_determinism`` was called in this process."""
    from tensorflow.python.framework import config  # the getter TensorFlow does not export

    return config.is_op_determinism_enabled()


def distribute(strategy: tf.distribute.Strategy, dataset_fn: Callable[..., tf.data.Dataset]
               ) -> tf.distribute.DistributedDataset:
    """``dataset_fn`` (of an InputContext) distributed over ``strategy``, fetched to the devices."""
    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return strategy.distribute_datasets_from_function(dataset_fn, options)


def compact_features(parsed: Mapping[str, tf.Tensor], seed: int, epoch: tf.Tensor,
                     *more_keys: tf.Tensor) -> dict[str, tf.Tensor]:
    """The trainer's features (schema.COMPACT_FEATURES) of parsed records read in ``epoch`` [B], with
    each record's permutation seed a fingerprint of (seed, stream id, position, epoch, *more_keys)."""
    keys = tf.stack([tf.fill(tf.shape(epoch), seed), parsed["stream_id"], parsed["stream_pos"], epoch,
                     *more_keys], 1)
    out = {name: parsed[name] for name in schema.COMPACT_FEATURES if name != "perm_seed"}
    out["perm_seed"] = permutation_seeds(keys)
    return out


def step_major(features: Mapping[str, tf.Tensor], batch: int, steps: int) -> dict[str, tf.Tensor]:
    """Batched records that arrive slot-major ([slot0 x steps, slot1 x steps, ...]) as step-major
    features [steps, batch, ...]: micro-step a of every row is row a of the first axis."""
    return {name: tf.ensure_shape(tf.transpose(tf.reshape(value, [batch, steps, -1]), [1, 0, 2]),
                                  [steps, batch, None]) if value.shape.rank == 2 else
            tf.ensure_shape(tf.transpose(tf.reshape(value, [batch, steps])), [steps, batch])
            for name, value in features.items()}


class StreamReader(StreamLayout):
    """Builds the per-replica datasets of one split (see the module docstring for the layout)."""

    def dataset(self, input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        """Per-replica batches for the replicas of ``input_context``'s pipeline (all replicas if None),
        interleaved replica by replica as tf.distribute hands them to the local devices."""
        num_replicas, replica_ids = local_replicas(input_context)
        batch = self.per_replica_batch_size(num_replicas)
        records = self._interleaved_records(self.slot_walks(num_replicas, replica_ids))
        return batched_features(records, batch, self.accumulation_steps, self._features_fn(batch))

    def distribute(self, strategy: tf.distribute.Strategy) -> tf.distribute.DistributedDataset:
        """The dataset distributed over ``strategy``: each replica reads its own disjoint streams."""
        return distribute(strategy, self.dataset)

    def _interleaved_records(self, walks: list[list[Segment]]) -> tf.data.Dataset:
        files = sorted({segment.file for walk in walks for segment in walk})
        file_index = {name: i for i, name in enumerate(files)}
        width = max(len(walk) for walk in walks)

        def table(value: Callable[[Segment], int]) -> tf.Tensor:
            rows = [[value(s) for s in walk] + [0] * (width - len(walk)) for walk in walks]
            return tf.constant(np.asarray(rows, dtype=np.int64))

        seg_file, seg_first, seg_records, seg_stream = (
            table(lambda s: file_index[s.file]), table(lambda s: s.first), table(lambda s: s.records),
            table(lambda s: s.stream_id))
        starts = self.slot_starts(walks)
        start_epoch, start_segment, start_record = (
            tf.constant([getattr(s, field) for s in starts], tf.int64) for field in ("epoch", "segment", "record"))
        walk_length = tf.constant([len(walk) for walk in walks], tf.int64)
        file_names = tf.constant(files)
        compression = self.manifest.compression_type

        def one_epoch(slot, epoch, first_segment, first_record):
            def segment_records(k):
                skip = tf.where(k == first_segment, first_record, tf.constant(0, tf.int64))
                file, first = file_names[seg_file[slot, k]], seg_first[slot, k] + skip
                count = seg_records[slot, k] - skip
                reader = tf.data.TFRecordDataset(file, compression_type=compression, buffer_size=READ_BUFFER_BYTES)
                return whole_segment(reader.skip(first).take(count), count, file, seg_stream[slot, k], first)

            segments = tf.data.Dataset.range(first_segment, walk_length[slot])
            return segments.flat_map(segment_records).map(lambda record: (record, epoch))

        def slot_records(slot):
            first = one_epoch(slot, start_epoch[slot], start_segment[slot], start_record[slot])
            later = tf.data.Dataset.counter(start_epoch[slot] + 1).flat_map(
                lambda epoch: one_epoch(slot, epoch, tf.constant(0, tf.int64), tf.constant(0, tf.int64)))
            return first.concatenate(later)

        return interleave_slots(len(walks), slot_records, self.accumulation_steps)

    def _features_fn(self, batch: int):
        seq_len, seed, steps = self.seq_len, self.seed, self.accumulation_steps
        resample = resample_fn(self.mask_sampler()) if self.resample_masks else None

        def features(serialized, epoch):
            parsed = schema.parse_records(check_no_missing_records(serialized), seq_len)
            epoch = tf.cast(epoch, tf.int32)
            if resample is not None:
                parsed["is_masked"] = resample(parsed, epoch, tf.zeros_like(epoch))
            return step_major(compact_features(parsed, seed, epoch), batch, steps)

        return features


def resample_fn(sampler: MaskSampler) -> Callable[[Mapping[str, tf.Tensor], tf.Tensor, tf.Tensor], tf.Tensor]:
    """In the graph: records' is_masked, fresh from ``sampler`` (stream_layout.MaskSampler) for the
    records of every epoch after the first; epoch 0 keeps the stored masks."""
    def resample(parsed, epoch, source):
        fresh = tf.numpy_function(sampler, [parsed["input_ids"], parsed["word_start"], parsed["stream_id"],
                                            parsed["stream_pos"], epoch, source], tf.int32, stateful=False)
        fresh = tf.reshape(fresh, tf.shape(parsed["is_masked"]))
        return tf.where(epoch[:, None] > 0, fresh, parsed["is_masked"])

    return resample
