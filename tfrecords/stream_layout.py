"""The stream-ordered readers' layout without TensorFlow: which records each batch row reads, in what order.

tfrecords/reader.py (tf.data) and tfrecords/numpy_reader.py (NumPy, for JAX hosts without TensorFlow)
both read by these rules, so the two hand out the same batches (see reader.py's docstring for the
layout: forward rows own streams {i-th : i % rows == r}, backward partners read the reversed copies,
a slot is one row of one replica, elements are one replica's step-major features). Pure Python and
NumPy: no TensorFlow import, the rule of tfrecords/.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from tfrecords.errors import DataError, UsageError
from tfrecords.input_layout import BatchLayout, InputLayoutError, too_few_streams
from tfrecords.manifest import Manifest
from tfrecords.record_config import RecordConfig
from tfrecords.span_masking import SpanMasker
from tfrecords.vocabulary import is_tokenised_with


class ManifestMismatchError(UsageError):
    """The data directory was written for a different configuration than the one training uses."""


class StreamEndedEarlyError(DataError):
    """A stream's shard ended before the records its manifest lists (the NumPy reader's report; the
    tf.data reader's is an InvalidArgumentError with the same words, see reader.stream_ended_early)."""


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


class SegmentRead(NamedTuple):
    """One run of records a slot reads: ``count`` records of ``file`` from record ``first``, in the
    reader's ``epoch``, from mixture source ``source`` (0 with one directory)."""

    file: str
    first: int
    count: int
    epoch: int
    source: int
    stream_id: int
    compression: str


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


def walk_reads(walk: list[Segment], start: SlotStart, compression: str) -> Iterator[SegmentRead]:
    """The runs of records a slot reads from ``start`` on, epoch after epoch, forever: the walk the
    tf.data reader builds in its graph from the same SlotStart."""
    epoch, first_segment, skip = start.epoch, start.segment, start.record
    while True:
        for segment in walk[first_segment:]:
            yield SegmentRead(segment.file, segment.first + skip, segment.records - skip, epoch, 0,
                              segment.stream_id, compression)
            skip = 0
        epoch, first_segment = epoch + 1, 0


# A record that a stream lacks: its shard ended before the records the manifest lists for the stream
# (a manifest that promises more than the file holds, or a file cut at a record boundary). It stands
# in for the missing records so that no row silently moves on to its next stream; the batch holding
# one fails with the words after this first byte, which never starts a serialized tf.train.Example
# (a protobuf field tag is never 0).
MISSING_RECORD = b"\x00"
STREAM_ENDED_EARLY = "ends before the records its manifest lists"


def stream_ended_early_words(file: Any, stream_id: Any, count: Any, first: Any) -> list[Any]:
    """The report of a stream that ended early, as parts to join (strings, or the tf.data reader's
    string tensors): ``FILE: stream S ends before the records its manifest lists (COUNT from record FIRST)``."""
    return [file, ": stream ", stream_id, f" {STREAM_ENDED_EARLY} (", count, " from record ", first, ")"]


class InputContextLike(Protocol):
    """What local_replicas reads of a tf.distribute.InputContext."""

    num_replicas_in_sync: int
    num_input_pipelines: int
    input_pipeline_id: int


def local_replicas(input_context: InputContextLike | None) -> tuple[int, range]:
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


def per_replica_batch_size(global_batch_size: int, num_replicas: int, bi_data: bool) -> int:
    """Rows of one replica's batch; InputLayoutError (a ValueError) unless the global batch splits
    evenly (into even [forward, backward] halves with bi_data): tfrecords/input_layout.py's rule."""
    return BatchLayout(global_batch_size, num_replicas, bi_data=bi_data).per_replica()


def permutation_keys(seed: int, stream_id: np.ndarray, stream_pos: np.ndarray, epoch: np.ndarray,
                     *more_keys: np.ndarray) -> np.ndarray:
    """[B, k] int64 keys whose fingerprint is a record's permutation seed: (seed, stream id, position,
    epoch, *more_keys), each an int32 first as the tf.data reader stacks them."""
    columns = [np.full(np.shape(epoch), seed), stream_id, stream_pos, epoch, *more_keys]
    return np.stack([np.asarray(column).astype(np.int32) for column in columns], 1).astype(np.int64)


def step_major(values: np.ndarray, batch: int, steps: int) -> np.ndarray:
    """Records that arrive slot-major ([slot0 x steps, slot1 x steps, ...], first axis) as step-major
    [steps, batch, ...]: micro-step a of every row is row a of the first axis."""
    shaped = values.reshape((batch, steps) + values.shape[1:])
    return np.swapaxes(shaped, 0, 1)


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


# (input_ids, word_start, stream_id, stream_pos, epoch, source) -> fresh is_masked, all NumPy [B, ...]
MaskSampler = Callable[..., np.ndarray]


def source_resampler(resamplers: Sequence[SpanResampler], special: Sequence[tuple[int, int]]) -> MaskSampler:
    """The mask sampler of records from several sources: each record resampled by its source's
    SpanResampler with its source's (sep, cls) ids."""
    def per_source(input_ids, word_start, stream_id, stream_pos, epoch, source):
        out = np.zeros(input_ids.shape, np.int32)
        for index in np.unique(source):
            rows = source == index
            sep, cls = special[index]
            out[rows] = resamplers[index](input_ids[rows], word_start[rows], stream_id[rows], stream_pos[rows],
                                          epoch[rows], sep_id=sep, cls_id=cls)
        return out

    return per_source


def manifest_special(manifest: Manifest) -> tuple[int, int]:
    """The (sep, cls) ids resampled masks never cover."""
    return int(manifest.special_ids["sep"]), int(manifest.special_ids["cls"])


@dataclasses.dataclass(frozen=True)
class StreamLayout:
    """One split of one directory as batch rows read it (the fields of the readers built on it)."""

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

    def slot_starts(self, walks: list[list[Segment]]) -> list[SlotStart]:
        """Where each slot starts at ``start_step`` (exact resume, no record before it read)."""
        return [slot_start(walk, self.start_step * self.accumulation_steps) for walk in walks]

    def slot_reads(self, num_replicas: int, replica_ids: range) -> list[Iterator[SegmentRead]]:
        """Per slot of this pipeline, in batch order: the runs of records it reads from start_step on."""
        walks = self.slot_walks(num_replicas, replica_ids)
        compression = self.manifest.compression_type
        return [walk_reads(walk, start, compression) for walk, start in zip(walks, self.slot_starts(walks))]

    def mask_sampler(self) -> MaskSampler:
        """The per-epoch mask resampling of this split's records (used with resample_masks)."""
        resampler = SpanResampler(self.manifest.config, self.num_streams, self.seed)
        return source_resampler([resampler], [manifest_special(self.manifest)])
