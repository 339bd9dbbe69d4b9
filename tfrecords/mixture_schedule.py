"""A mixture's schedule without TensorFlow: the weights, the directories' checks, which stream each
batch row reads from which source, and the records read per source.

The rule is told in tfrecords/mixture.py's docstring (the tf.data mixture reader); it lives here,
pure Python and NumPy, so that tfrecords/numpy_reader.py hands out the same batches on hosts
without TensorFlow, by the same schedule.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
import os
import posixpath
import sys
import threading
from typing import Iterator, Mapping, Sequence

import numpy as np

from tfrecords.errors import UsageError
from tfrecords.manifest import Manifest
from tfrecords.stream_layout import (
    ManifestMismatchError,
    MaskSampler,
    SegmentRead,
    SpanResampler,
    manifest_special,
    per_replica_batch_size,
    slot_rows,
    source_resampler,
    split_segments,
)

MASK64 = (1 << 64) - 1


def _mix64(value: int) -> int:
    """splitmix64's finaliser: a counter-based hash of a 64-bit integer."""
    value = (value + 0x9E3779B97F4A7C15) & MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & MASK64
    return value ^ (value >> 31)


@dataclasses.dataclass(frozen=True)
class MixtureSource:
    """One data directory of a mixture: ``name`` as the command line gave it, its normalised weight."""

    name: str
    manifest: Manifest
    weight: float


@dataclasses.dataclass(frozen=True)
class Assignment:
    """One stream a forward row reads: from ``start`` (the row's records read before it) for ``records``."""

    source: int
    stream_id: int  # forward stream id inside its source
    epoch: int  # the source's epoch
    start: int
    records: int

    @property
    def end(self) -> int:
        return self.start + self.records


def parse_weights(text: str | None, count: int, flag: str = "--mixture-weights") -> tuple[float, ...]:
    """``W1,W2,...`` -> weights normalised to sum 1; ValueError naming ``flag`` unless there are
    ``count`` finite positive numbers. Without ``text`` one directory weighs 1."""
    if text is None:
        if count == 1:
            return (1.0,)
        raise UsageError(f"{count} --data directories need {flag} W1,...,W{count} (one positive weight per "
                         "directory, in the same order), e.g. --mixture-weights " + ",".join(["1"] * count))
    items = [item.strip() for item in text.split(",")]
    weights = []
    for item in items:
        try:
            weight = float(item)
        except ValueError:
            raise UsageError(f"{flag} {text}: {item!r} is not a number") from None
        if not math.isfinite(weight) or weight <= 0:
            raise UsageError(f"{flag} {text}: every weight must be a positive number, got {item}")
        if weight < sys.float_info.min:
            raise UsageError(f"{flag} {text}: the weight {item} is too small to compute with "
                             f"(below {sys.float_info.min:g}); scale the weights up")
        weights.append(weight)
    if len(weights) != count:
        raise UsageError(f"{flag} {text}: {len(weights)} weight(s) for {count} --data director"
                         f"{'y' if count == 1 else 'ies'}; give one weight per --data, in the same order")
    total = sum(weights)
    if not math.isfinite(total):
        raise UsageError(f"{flag} {text}: the weights add up to more than a float holds "
                         f"({sys.float_info.max:g}); scale the weights down")
    normalised = tuple(weight / total for weight in weights)
    for item, share in zip(items, normalised):
        if share < sys.float_info.min:
            raise UsageError(f"{flag} {text}: the weight {item} is too small a share of the total to compute with; "
                             "give weights within a factor of 1e300 of each other")
    return normalised


def same_directory_key(path: str) -> str:
    """What names one data directory however it is written (trailing '/', its manifest.json, and for a
    local path a symbolic link or a relative path to it: the resolved location, by os.path.realpath).
    A path with a scheme (gs://...) is compared as written."""
    path = path.rstrip("/")
    path = posixpath.dirname(path) if path.endswith("/manifest.json") or path == "manifest.json" else path
    if "://" in path:
        return path
    return os.path.realpath(path or ".")


def check_distinct(names: Sequence[str], flag: str = "--data") -> None:
    """ValueError when one directory is named twice (it would be read at twice its weight's rate, or
    evaluated twice)."""
    seen: dict[str, str] = {}
    for name in names:
        key = same_directory_key(name)
        if key in seen:
            raise UsageError(f"{flag} {name}: the same data directory is given twice ({seen[key]} and {name})")
        seen[key] = name


# Fields every directory of a mixture must share: the records' shape and the text they encode.
SHARED_FIELDS = (("seq_len", lambda m: m.config.get("seq_len")),
                 ("reuse_len", lambda m: m.config.get("reuse_len")),
                 ("bi_data", lambda m: m.config.get("bi_data")),
                 ("vocabulary sha256", lambda m: m.vocab.get("sha256")),
                 ("vocab_size", lambda m: m.vocab.get("vocab_size")),
                 ("uncased", lambda m: bool(m.config.get("uncased", False))),
                 ("format_version", lambda m: m.format_version))


def check_compatible(named: Sequence[tuple[str, Manifest]]) -> None:
    """Raises ManifestMismatchError naming the directory, the field and both values wherever a
    directory disagrees with the first one."""
    (first_name, first), problems = named[0], []
    for name, manifest in named[1:]:
        for field, value_of in SHARED_FIELDS:
            if value_of(manifest) != value_of(first):
                problems.append(f"{name}: {field} is {value_of(manifest)!r}, but {first_name} has "
                                f"{value_of(first)!r}")
    if problems:
        raise ManifestMismatchError("the data directories cannot be mixed (each must be preprocessed with the "
                                    "same shapes, vocabulary and casing):\n  - " + "\n  - ".join(problems))


def source_labels(names: Sequence[str]) -> list[str]:
    """Short unique labels (TensorBoard tags, evaluation keys): each directory's last path component,
    with its position appended where two would be the same."""
    bases = [posixpath.basename(same_directory_key(name)) or name for name in names]
    return [base if bases.count(base) == 1 else f"{base}-{i}" for i, base in enumerate(bases)]


class MixtureSchedule:
    """Which stream each of ``rows`` forward rows reads, from which source, from when (module docstring).

    Args:
      streams: per source, its forward streams as (stream id, records), records > 0.
      weights: per source, positive, normalised.
      rows: forward rows of the global batch.
      seed: orders each source's streams per epoch and breaks ties.
    The schedule grows as it is asked; it is safe to share between threads.
    """

    def __init__(self, streams: Sequence[Sequence[tuple[int, int]]], weights: Sequence[float], rows: int,
                 seed: int):
        if not all(streams):
            raise UsageError("every source of a mixture needs at least one non-empty stream")
        self.streams, self.weights, self.rows, self.seed = [list(s) for s in streams], list(weights), rows, seed
        self._queues: list[list[tuple[int, int, int]]] = [[] for _ in streams]  # (stream, records, epoch), reversed
        self._epochs = [-1] * len(streams)
        self._handed_out = [0] * len(streams)
        self._by_row: list[list[Assignment]] = [[] for _ in range(rows)]
        self._all: list[Assignment] = []
        self._needs = [(0, row) for row in range(rows)]  # (when the row needs its next stream, row)
        self._choices = 0
        self._lock = threading.Lock()

    # ---------------------------------------------------------------------------- the rule
    def _next_of(self, source: int) -> tuple[int, int, int]:
        """The next stream the source hands out (a new epoch, in a seeded order, when it ran out)."""
        queue = self._queues[source]
        if not queue:
            self._epochs[source] += 1
            epoch = self._epochs[source]
            order = np.random.default_rng([self.seed, source, epoch]).permutation(len(self.streams[source]))
            queue.extend((*self.streams[source][i], epoch) for i in reversed(order))
        return queue[-1]

    def _choose(self) -> int:
        def priority(source: int) -> tuple[float, int]:
            finish = (self._handed_out[source] + self._next_of(source)[1]) / self.weights[source]
            return finish, _mix64(_mix64(self.seed * 1_000_003 + self._choices) ^ source)

        self._choices += 1
        return min(range(len(self.weights)), key=priority)

    def _step(self) -> None:
        when, row = heapq.heappop(self._needs)
        source = self._choose()
        stream_id, records, epoch = self._queues[source].pop()
        self._handed_out[source] += records
        assignment = Assignment(source, stream_id, epoch, when, records)
        self._by_row[row].append(assignment)
        self._all.append(assignment)
        heapq.heappush(self._needs, (when + records, row))

    # ------------------------------------------------------------------------------ queries
    def walk(self, row: int, start: int = 0) -> Iterator[tuple[Assignment, int]]:
        """The row's streams from its record ``start`` on, forever: (assignment, records to skip)."""
        index = 0
        while True:
            with self._lock:
                while len(self._by_row[row]) <= index:
                    self._step()
                assignment = self._by_row[row][index]
            index += 1
            if assignment.end > start:
                yield assignment, max(0, start - assignment.start)

    def read_by(self, records_per_row: int) -> tuple[list[int], list[int]]:
        """(records each source gave the forward rows, each source's epoch) once every row has read
        ``records_per_row`` records; a source not read yet is in epoch 0."""
        with self._lock:
            while self._needs[0][0] <= records_per_row:
                self._step()
            by_source = [0] * len(self.weights)
            epochs = [0] * len(self.weights)
            for assignment in self._all:
                if assignment.start < records_per_row:
                    by_source[assignment.source] += min(assignment.end, records_per_row) - assignment.start
                    epochs[assignment.source] = max(epochs[assignment.source], assignment.epoch)
        return by_source, epochs


class MixtureLayout:
    """The sources of a mixture as batch rows read them (the fields of the readers built on it): each
    row's streams chosen by a :class:`MixtureSchedule`, the layout and features of StreamLayout's."""

    split = "train"

    def __init__(self, sources: Sequence[MixtureSource], global_batch_size: int, seq_len: int, bi_data: bool, *,
                 seed: int = 0, accumulation_steps: int = 1, start_step: int = 0, resample_masks: bool = False):
        self.sources = tuple(sources)
        self.global_batch_size, self.seq_len, self.bi_data = global_batch_size, seq_len, bi_data
        self.seed, self.accumulation_steps, self.start_step = seed, accumulation_steps, start_step
        self.resample_masks = resample_masks
        self.segments = [split_segments(source.manifest, self.split) for source in self.sources]
        self.num_streams = [source.manifest.split(self.split).num_streams for source in self.sources]
        self._check_reversed_copies()

    def _check_reversed_copies(self) -> None:
        for source, segments, num_streams in zip(self.sources, self.segments, self.num_streams):
            if not any(s < num_streams for s in segments):
                raise UsageError(f"--data {source.name}: its {self.split} split has no records")
            if not self.bi_data:
                continue
            for stream_id, segment in segments.items():
                partner = segments.get(stream_id + num_streams) if stream_id < num_streams else True
                if partner is None or (partner is not True and partner.records != segment.records):
                    raise UsageError(f"--data {source.name}: bi_data: the reversed copy of stream {stream_id} is "
                                     "missing or of another length in the manifest")

    def per_replica_batch_size(self, num_replicas: int) -> int:
        return per_replica_batch_size(self.global_batch_size, num_replicas, self.bi_data)

    def forward_rows(self, num_replicas: int = 1) -> int:
        """Forward rows of the global batch (half of the rows with bi_data)."""
        batch = self.per_replica_batch_size(num_replicas)
        return (batch // 2 if self.bi_data else batch) * num_replicas

    def schedule(self) -> MixtureSchedule:
        """A fresh schedule of this reader's sources (the same for any number of replicas)."""
        streams = [[(s, segment.records) for s, segment in sorted(segments.items()) if s < num_streams]
                   for segments, num_streams in zip(self.segments, self.num_streams)]
        return MixtureSchedule(streams, [source.weight for source in self.sources], self.forward_rows(), self.seed)

    def slots(self, num_replicas: int, replica_ids: range) -> list[tuple[int, bool]]:
        """This pipeline's slots in batch order, as (forward row, reversed)."""
        batch = self.per_replica_batch_size(num_replicas)
        return slot_rows(batch // 2 if self.bi_data else batch, replica_ids, self.bi_data)

    def row_reads(self, row: int, reverse: bool, schedule: MixtureSchedule) -> Iterator[SegmentRead]:
        """The runs of records one slot (forward ``row``, or its backward partner) reads from start_step on."""
        start = self.start_step * self.accumulation_steps
        for assignment, skip in schedule.walk(row, start):
            source = self.sources[assignment.source]
            shift = self.num_streams[assignment.source] if reverse else 0
            segment = self.segments[assignment.source][assignment.stream_id + shift]
            yield SegmentRead(segment.file, segment.first + skip, assignment.records - skip, assignment.epoch,
                              assignment.source, segment.stream_id, source.manifest.compression_type)

    def slot_reads(self, num_replicas: int, replica_ids: range) -> list[Iterator[SegmentRead]]:
        """Per slot of this pipeline, in batch order: the runs of records it reads, by one shared schedule."""
        schedule = self.schedule()
        return [self.row_reads(row, reverse, schedule) for row, reverse in self.slots(num_replicas, replica_ids)]

    def mask_sampler(self) -> MaskSampler:
        """The per-epoch mask resampling of the sources' records (used with resample_masks)."""
        resamplers = [SpanResampler(source.manifest.config, num_streams, self.seed)
                      for source, num_streams in zip(self.sources, self.num_streams)]
        return source_resampler(resamplers, [manifest_special(source.manifest) for source in self.sources])


def records_read(schedule: MixtureSchedule, step: int, accumulation_steps: int, bi_data: bool
                 ) -> tuple[list[int], list[int]]:
    """(records each source gave the whole global batch, each source's epoch) after ``step`` optimizer
    steps: a backward row reads as many records as its forward partner."""
    by_source, epochs = schedule.read_by(step * accumulation_steps)
    return [records * (2 if bi_data else 1) for records in by_source], epochs


def shares(records: Sequence[int]) -> list[float]:
    """Each source's share of the records read so far."""
    total = sum(records)
    return [count / total if total else 0.0 for count in records]


def describe(sources: Sequence[MixtureSource]) -> str:
    """``dir (weight), ...`` for messages."""
    return ", ".join(f"{source.name} ({source.weight:.4g})" for source in sources)


def by_name(sources: Sequence[MixtureSource], values: Sequence) -> Mapping[str, object]:
    """``values`` keyed by each source's name as given."""
    return {source.name: value for source, value in zip(sources, values)}

