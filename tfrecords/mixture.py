"""Pretraining on several data directories at chosen rates (a mixture), read as whole streams.

Each directory was preprocessed on its own (its shards, streams and manifest). Every batch row
still reads whole text streams one after another, so the Transformer-XL memory continues within
a stream exactly as with one directory (tfrecords/reader.py); what a mixture adds is the choice
of where a row's NEXT stream comes from.

The rule (:class:`MixtureSchedule`): rows take streams in the order they finish them (all rows
read one record per micro-step, so "when" is a record count); a row that needs a stream gets
the next stream of the source whose share is furthest behind its weight once that stream is
counted: the source with the smallest ``(records handed out + records of its next stream) /
weight`` (weighted fair queueing; ties go to a seeded counter-based hash). The records handed
out to each source therefore stay within one stream of ``weight x total`` at any batch size,
also with fewer rows than sources or weights that do not divide the rows. Each source walks its
forward streams in a seeded order, epoch after epoch on its own: a source that runs out starts
its next epoch (masks resampled when ``resample_masks``) while the others go on. The schedule is
a function of the manifests, the weights, the number of rows and the seed, so the same seed and
global batch give the same batches, and a reader can start at any step (exact resume) by
replaying the schedule, which is cheap: it has one event per stream read.

The backward partner of a row (bi_data) reads the reversed copy of the row's stream, as with one
directory. Permutation seeds add the source index to the reader's keys, so that two sources'
records at the same (stream, position, epoch) get different factorisation orders.
"""
from __future__ import annotations

import tensorflow as tf

from tfrecords import schema
from tfrecords.mixture_schedule import (  # noqa: F401  (the mixture's names, imported from here by the trainer)
    Assignment,
    MixtureLayout,
    MixtureSchedule,
    MixtureSource,
    by_name,
    check_compatible,
    check_distinct,
    describe,
    parse_weights,
    records_read,
    same_directory_key,
    shares,
    source_labels,
)
from tfrecords.reader import (
    READ_BUFFER_BYTES,
    batched_features,
    check_no_missing_records,
    compact_features,
    distribute,
    interleave_slots,
    local_replicas,
    resample_fn,
    step_major,
    whole_segment,
)


class MixtureReader(MixtureLayout):
    """The training input of a mixture: the per-replica batches of tfrecords/reader.py's StreamReader
    (same layout, features and accumulation), each row's streams chosen by a :class:`MixtureSchedule`."""

    def dataset(self, input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        """Per-replica batches for the replicas of ``input_context``'s pipeline, as StreamReader.dataset."""
        num_replicas, replica_ids = local_replicas(input_context)
        batch = self.per_replica_batch_size(num_replicas)
        records = self._interleaved_records(self.slots(num_replicas, replica_ids), self.schedule())
        return batched_features(records, batch, self.accumulation_steps, self._features_fn(batch))

    def distribute(self, strategy: tf.distribute.Strategy) -> tf.distribute.DistributedDataset:
        return distribute(strategy, self.dataset)

    def _interleaved_records(self, slots: list[tuple[int, bool]], schedule: MixtureSchedule) -> tf.data.Dataset:
        def walk(slot):
            row, reverse = slots[int(slot)]
            for read in self.row_reads(row, reverse, schedule):
                yield read.file, read.first, read.count, read.epoch, read.source, read.stream_id

        signature = (tf.TensorSpec([], tf.string),) + (tf.TensorSpec([], tf.int64),) * 5
        compression = tf.constant([source.manifest.compression_type for source in self.sources])

        def segment_records(file, first, count, epoch, source, stream_id):
            reader = tf.data.TFRecordDataset(file, compression_type=compression[source],
                                             buffer_size=READ_BUFFER_BYTES)
            return whole_segment(reader.skip(first).take(count), count, file, stream_id, first) \
                .map(lambda record: (record, epoch, source))

        def slot_records(slot):
            walks = tf.data.Dataset.from_generator(walk, args=(slot,), output_signature=signature)
            return walks.flat_map(segment_records)

        return interleave_slots(len(slots), slot_records, self.accumulation_steps)

    def _features_fn(self, batch: int):
        seq_len, seed, steps = self.seq_len, self.seed, self.accumulation_steps
        resample = resample_fn(self.mask_sampler()) if self.resample_masks else None

        def features(serialized, epoch, source):
            parsed = schema.parse_records(check_no_missing_records(serialized), seq_len)
            epoch, source = tf.cast(epoch, tf.int32), tf.cast(source, tf.int32)
            if resample is not None:
                parsed["is_masked"] = resample(parsed, epoch, source)
            return step_major(compact_features(parsed, seed, epoch, source), batch, steps)

        return features
