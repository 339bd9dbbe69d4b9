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

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf

from tfrecords import schema
from tfrecords.errors import UsageError
from tfrecords.input_layout import BatchLayout, InputLayoutError, too_few_streams
from tfrecords.manifest import Manifest
from tfrecords.record_config import RecordConfig
from tfrecords.span_masking import SpanMasker
from tfrecords.vocabulary import is_tokenised_with, vocabulary_sha256


class ManifestMismatchError(UsageError):
    """The data directory was written for a different configuration than the one training uses."""


@dataclasses.dataclass(frozen=True)
class Segment:
    """A contiguous run of one stream's records inside one shard file."""

    file: str
    first: int
    records: int
    stream_id: int


@dataclasses.dataclass(frozen=True)
class SlotStart:
    """Where a slot starts reading: epoch, segment index in its walk, record inside that segment."""

    epoch: int
    segment: int
    record: int


def file_sha256(path: str) -> str:
    """The vocabulary checksum (tfrecords.vocabulary.vocabulary_sha256) of the SentencePiece model
    file at ``path``, read through tf.io.gfile."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        return vocabulary_sha256(handle.read())


def validate_manifest(manifest: Manifest, *, seq_len: int, reuse_len: int, bi_data: bool,
                      num_predict: int, vocab_size: int, vocab_sha256: str | None = None,
                      source: str = "manifest.json") -> None:
    """Raises ManifestMismatchError naming every field where the data and the training config disagree."""
    config, vocab = manifest.config, manifest.vocab
    problems = manifest.validate()
    checks = (("seq_len", config.get("seq_len"), seq_len, "train.seq_len"),
              ("reuse_len", config.get("reuse_len"), reuse_len, "model.reuse_len"),
              ("bi_data", config.get("bi_data"), bi_data, "model.bi_data"),
              ("vocab_size", vocab.get("vocab_size"), vocab_size, "model.vocab_size"))
    for name, data_value, train_value, flag in checks:
        if data_value != train_value:
            problems.append(f"{name}: data has {data_value}, training uses {train_value} ({flag})")
    if config.get("num_predict") is not None and config["num_predict"] > num_predict:
        problems.append(f"num_predict: data masks up to {config['num_predict']} targets per record, training "
                        f"predicts {num_predict} (train.num_predict)")
    if vocab_sha256 is not None and not is_tokenised_with(vocab, vocab_sha256):
        problems.append(f"vocabulary checksum: data was tokenised with sha256 {vocab.get('sha256')}, the "
                        f"SentencePiece model used for training has {vocab_sha256}")
    if problems:
        raise ManifestMismatchError(f"{source} does not match the training configuration:\n  - "
                                    + "\n  - ".join(problems))


def split_segments(manifest: Manifest, split: str) -> dict[int, Segment]:
    """Every non-empty stream of ``split`` as a Segment, keyed by stream id."""
    segments = {}
    for stream_id, (file, first, records) in manifest.split(split).stream_locations().items():
        if records > 0:
            segments[int(stream_id)] = Segment(manifest.shard_path(file), int(first), int(records), int(stream_id))
    return segments


def row_walks(segments: Mapping[int, Segment], num_streams: int, bi_data: bool,
              forward_rows: int) -> tuple[list[list[Segment]], list[list[Segment]]]:
    """(forward walks, backward walks): the streams each forward row reads in order, and its partner's.

    Forward row r owns the i-th forward stream of the split for every i with i % forward_rows == r.
    """
    forward_ids = sorted(s for s in segments if s < num_streams)
    if forward_rows > len(forward_ids):
        raise InputLayoutError(f"{too_few_streams(forward_rows, len(forward_ids))}: lower the batch size "
                               "(train.train_batch_size / train.eval_batch_size) or preprocess with more streams "
                               "(xlnet preprocess --num-streams)")
    forward = [[segments[s] for s in forward_ids[r::forward_rows]] for r in range(forward_rows)]
    backward: list[list[Segment]] = []
    if bi_data:
        missing = [s + num_streams for s in forward_ids if s + num_streams not in segments]
        if missing:
            raise ValueError(f"bi_data: reversed streams {missing[:5]} are missing from the manifest")
        backward = [[segments[s.stream_id + num_streams] for s in walk] for walk in forward]
    return forward, backward


def slot_start(walk: list[Segment], records_consumed: int) -> SlotStart:
    """Position after ``records_consumed`` records of a walk that repeats epoch after epoch."""
    total = sum(segment.records for segment in walk)
    epoch, offset = divmod(records_consumed, total)
    for index, segment in enumerate(walk):
        if offset < segment.records:
            return SlotStart(epoch, index, offset)
        offset -= segment.records
    raise AssertionError("unreachable: offset within the epoch")


READ_BUFFER_BYTES = 256 << 10

# A record that a stream lacks: its shard ended before the records the manifest lists for the stream
# (a manifest that promises more than the file holds, or a file cut at a record boundary). It stands
# in for the missing records so that no row silently moves on to its next stream; the batch holding
# one fails (check_no_missing_records) with the words after this first byte, which never starts a
# serialized tf.train.Example (a protobuf field tag is never 0).
MISSING_RECORD = b"\x00"
STREAM_ENDED_EARLY = "ends before the records its manifest lists"


def whole_segment(records: tf.data.Dataset, count: tf.Tensor, file: tf.Tensor, stream_id: tf.Tensor,
                  first: tf.Tensor) -> tf.data.Dataset:
    """``records`` (a stream's records from ``first`` in ``file``, taken up to ``count``) as exactly
    ``count`` elements: MISSING_RECORD markers naming the shard and the stream stand in for any that
    the file lacks."""
    marker = tf.strings.join([MISSING_RECORD, file, ": stream ", tf.strings.as_string(stream_id),
                              f" {STREAM_ENDED_EARLY} (", tf.strings.as_string(count), " from record ",
                              tf.strings.as_string(first), ")"])
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


def local_replicas(input_context: tf.distribute.InputContext | None) -> tuple[int, range]:
    """(replicas in sync, the replicas ``input_context``'s pipeline feeds); all replicas if None."""
    num_replicas = input_context.num_replicas_in_sync if input_context else 1
    pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    local = num_replicas // pipelines
    return num_replicas, range(pipeline_id * local, (pipeline_id + 1) * local)


def slot_rows(forward_per_replica: int, replica_ids: range, bi_data: bool) -> list[tuple[int, bool]]:
    """The slots of ``replica_ids`` in batch order, as (forward row, reversed): replica by replica,
    its forward rows, then (bi_data) their backward partners."""
    slots = []
    for replica in replica_ids:
        rows = range(replica * forward_per_replica, (replica + 1) * forward_per_replica)
        slots += [(row, False) for row in rows] + ([(row, True) for row in rows] if bi_data else [])
    return slots


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


def per_replica_batch_size(global_batch_size: int, num_replicas: int, bi_data: bool) -> int:
    """Rows of one replica's batch; InputLayoutError (a ValueError) unless the global batch splits
    evenly (into even [forward, backward] halves with bi_data): tfrecords/input_layout.py's rule."""
    return BatchLayout(global_batch_size, num_replicas, bi_data=bi_data).per_replica()


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


@dataclasses.dataclass(frozen=True)
class StreamReader:
    """Builds the per-replica datasets of one split (see the module docstring for the layout)."""

    manifest: Manifest
    split: str
    global_batch_size: int
    seq_len: int
    num_predict: int
    bi_data: bool
    seed: int = 0
    accumulation_steps: int = 1
    start_step: int = 0
    resample_masks: bool = False

    @property
    def num_streams(self) -> int:
        """Forward streams of the split (with bi_data, stream s + num_streams reverses stream s)."""
        return self.manifest.split(self.split).num_streams

    def per_replica_batch_size(self, num_replicas: int) -> int:
        return per_replica_batch_size(self.global_batch_size, num_replicas, self.bi_data)

    def slot_walks(self, num_replicas: int, replica_ids: range) -> list[list[Segment]]:
        """The walks of this pipeline's slots, in batch order: replica by replica, [forward, backward]."""
        batch = self.per_replica_batch_size(num_replicas)
        forward_per_replica = batch // 2 if self.bi_data else batch
        segments = split_segments(self.manifest, self.split)
        forward, backward = row_walks(segments, self.num_streams, self.bi_data, forward_per_replica * num_replicas)
        return [(backward if reverse else forward)[row]
                for row, reverse in slot_rows(forward_per_replica, replica_ids, self.bi_data)]

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
        starts = [slot_start(walk, self.start_step * self.accumulation_steps) for walk in walks]
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
        resample = self._resample_fn() if self.resample_masks else None

        def features(serialized, epoch):
            parsed = schema.parse_records(check_no_missing_records(serialized), seq_len)
            epoch = tf.cast(epoch, tf.int32)
            if resample is not None:
                parsed["is_masked"] = resample(parsed, epoch)
            return step_major(compact_features(parsed, seed, epoch), batch, steps)

        return features

    def _resample_fn(self):
        resampler = SpanResampler(self.manifest.config, self.num_streams, self.seed)
        sep, cls = int(self.manifest.special_ids["sep"]), int(self.manifest.special_ids["cls"])

        def resample(parsed, epoch):
            # epoch 0 keeps the stored masks; every later epoch draws new spans from the word starts
            fresh = tf.numpy_function(
                lambda *args: resampler(*args, sep_id=sep, cls_id=cls),
                [parsed["input_ids"], parsed["word_start"], parsed["stream_id"], parsed["stream_pos"], epoch],
                tf.int32, stateful=False)
            fresh = tf.reshape(fresh, tf.shape(parsed["is_masked"]))
            return tf.where(epoch[:, None] > 0, fresh, parsed["is_masked"])

        return resample


class SpanResampler:
    """New span masks for a batch of records with the preprocessing's own sampler
    (tfrecords/span_masking.py): same budget split between the context and A/B parts, reversed
    streams masked right to left; one NumPy generator per (seed, stream, position, epoch), so
    resampling is deterministic."""

    def __init__(self, preprocess_config: Mapping[str, Any], num_streams: int, seed: int):
        self.config = RecordConfig.from_mapping(preprocess_config)
        self.masker = SpanMasker(self.config)
        self.num_streams, self.seed = num_streams, seed

    def __call__(self, input_ids, word_start, stream_id, stream_pos, epoch, *, sep_id: int, cls_id: int):
        out = np.zeros(input_ids.shape, np.int32)
        maskable = (input_ids != sep_id) & (input_ids != cls_id)
        for row in range(input_ids.shape[0]):
            # One generator per record (not per batch) keeps the masks independent of the batch size.
            rng = np.random.default_rng([self.seed, int(stream_id[row]), int(stream_pos[row]), int(epoch[row])])
            reverse = int(stream_id[row]) >= self.num_streams
            out[row] = self.masker.mask_records(word_start[row:row + 1], maskable[row:row + 1], reverse, rng)[0]
        return out


def permutation_seeds(keys: tf.Tensor) -> tf.Tensor:
    """[B, 2] int32 stateless seeds, a fingerprint of each row of ``keys`` [B, k] (seed, stream id,
    position, epoch): a fresh permutation for every example at every step, the same on every run."""
    fingerprint = tf.fingerprint(tf.cast(keys, tf.int64))  # [B, 8] uint8
    return tf.bitcast(tf.reshape(fingerprint, [-1, 2, 4]), tf.int32)
