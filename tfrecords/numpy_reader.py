"""The stream-ordered readers without TensorFlow: the tf.data readers' batches, element for element, in NumPy.

For training engines that run where TensorFlow is not installed (JAX on GPU hosts). The layout is
the tf.data readers' own (tfrecords/stream_layout.py, tfrecords/mixture_schedule.py): the same slots,
walks, schedule, start step, mask resampling and permutation seeds, so :meth:`NumpyBatches.elements`
yields what ``StreamReader.dataset()`` / ``MixtureReader.dataset()`` yield for the same pipeline: one
replica's step-major features per element (int32 [accumulation_steps, B, ...], the replicas of the
pipeline in turn), and :meth:`NumpyBatches.host_batches` the pipeline's replicas concatenated on the
batch axis. Records come from tfrecords/record_files.py (both CRCs checked) and
tfrecords/example_decoding.py; a damaged shard is a DamagedRecordError, a stream that ends before its
manifest's count a StreamEndedEarlyError, in the tf.data reader's words, at the element the tf.data
reader fails at (both DataErrors: exit status 3).

Reading runs ahead in a background thread (:class:`ReadAhead`: a bounded queue of a few elements);
the consumer's time waiting on it is counted (``wait_seconds``: input time, not compute).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Generic, Iterator, NamedTuple, TypeVar

import numpy as np

from tfrecords.example_decoding import decode_batch
from tfrecords.mixture_schedule import MixtureLayout
from tfrecords.permutation_seeds import permutation_seeds
from tfrecords.record_files import RecordFile
from tfrecords.schema import COMPACT_FEATURES
from tfrecords.stream_layout import (
    MaskSampler,
    SegmentRead,
    StreamEndedEarlyError,
    StreamLayout,
    local_replicas,
    permutation_keys,
    step_major,
    stream_ended_early_words,
)

Features = dict[str, np.ndarray]
Item = TypeVar("Item")
DEFAULT_DEPTH = 4  # elements read ahead


class SlotRecord(NamedTuple):
    """One record a slot reads (``data`` None where its shard ended early), and where it comes from."""

    data: bytes | None
    epoch: int
    source: int
    where: str  # "FILE: record N", or the stream-ended-early words


def segment_records(read: SegmentRead) -> Iterator[SlotRecord]:
    """The ``read.count`` records of one run, from its shard: markers (data None) for any it lacks."""
    with RecordFile(read.file, read.compression) as records:
        available = records.skip(read.first) == read.first
        for index in range(read.first, read.first + read.count):
            data = records.read() if available else None
            if data is None:
                available = False
                words = stream_ended_early_words(read.file, read.stream_id, read.count, read.first)
                yield SlotRecord(None, read.epoch, read.source, "".join(str(word) for word in words))
            else:
                yield SlotRecord(data, read.epoch, read.source, f"{read.file}: record {index}")


def slot_records(reads: Iterator[SegmentRead]) -> Iterator[SlotRecord]:
    """Every record of a slot in reading order, run after run."""
    for read in reads:
        yield from segment_records(read)


class ReadAhead(Generic[Item]):
    """The items of ``produce()`` made in a background thread, at most ``depth`` ahead of the consumer.

    An error of the producer is raised in the consumer (after the items before it); ``close()`` (or
    leaving a ``with`` block) stops and joins the thread. ``wait_seconds``: the consumer's time
    waiting for items so far."""

    def __init__(self, produce: Callable[[], Iterator[Item]], depth: int = DEFAULT_DEPTH, name: str = "numpy-reader"):
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._finished = False
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(produce,), name=name, daemon=True)
        self._thread.start()

    def _run(self, produce: Callable[[], Iterator[Item]]) -> None:
        items = None
        try:
            items = produce()
            for item in items:
                if not self._put(("item", item)):
                    return
            self._put(("end", None))
        except BaseException as error:  # handed to the consumer, raised there
            self._put(("error", error))
        finally:
            if items is not None and hasattr(items, "close"):
                items.close()  # closes the shards a generator holds open

    def _put(self, entry: tuple[str, Any]) -> bool:
        """Queues ``entry`` unless the consumer closed the reader meanwhile (then False)."""
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> "ReadAhead[Item]":
        return self

    def __next__(self) -> Item:
        if self._finished:
            raise StopIteration
        tick = time.perf_counter()
        kind, value = self._queue.get()
        self.wait_seconds += time.perf_counter() - tick
        if kind == "item":
            return value
        self._finished = True
        self.close()
        if kind == "error":
            raise value
        raise StopIteration

    @property
    def running(self) -> bool:
        """Whether the background thread is still alive."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Stops the background thread and waits for it (its open shards closed)."""
        self._finished = True
        self._stop.set()
        self._thread.join()
        while not self._queue.empty():
            self._queue.get_nowait()

    def __del__(self) -> None:
        self._stop.set()  # a reader dropped without close(): its thread ends at its next item

    def __enter__(self) -> "ReadAhead[Item]":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class NumpyBatches:
    """The reading shared by NumpyStreamReader and NumpyMixtureReader, on their layouts' slot_reads,
    per_replica_batch_size and mask_sampler."""

    source_keyed = False  # a mixture adds the source index to the permutation keys
    seq_len: int
    seed: int
    accumulation_steps: int
    resample_masks: bool
    slot_reads: Callable[[int, range], list[Iterator[SegmentRead]]]
    per_replica_batch_size: Callable[[int], int]
    mask_sampler: Callable[[], MaskSampler]

    def elements(self, num_replicas: int = 1, replica_ids: range | None = None, *,
                 depth: int = DEFAULT_DEPTH) -> ReadAhead[Features]:
        """One replica's step-major features per element, the replicas ``replica_ids`` (all if None) in
        turn: what the tf.data reader's ``dataset(input_context)`` yields for the pipeline that feeds them
        (``tfrecords.stream_layout.local_replicas`` turns an InputContext into these two)."""
        replica_ids = range(num_replicas) if replica_ids is None else replica_ids
        batch = self.per_replica_batch_size(num_replicas)
        slots = self.slot_reads(num_replicas, replica_ids)  # layout errors raised here, not in the thread
        return ReadAhead(lambda: self._elements(slots, batch), depth)

    def elements_for(self, input_context: Any | None = None, *, depth: int = DEFAULT_DEPTH) -> ReadAhead[Features]:
        """:meth:`elements` of the pipeline an InputContext (or anything with its three fields) names."""
        num_replicas, replica_ids = local_replicas(input_context)
        return self.elements(num_replicas, replica_ids, depth=depth)

    def host_batches(self, num_replicas: int = 1, replica_ids: range | None = None, *,
                     depth: int = DEFAULT_DEPTH) -> ReadAhead[Features]:
        """The pipeline's batch per step for JAX: its replicas' elements concatenated on the batch
        axis ([accumulation_steps, B x local replicas, ...], replica by replica)."""
        replica_ids = range(num_replicas) if replica_ids is None else replica_ids
        batch = self.per_replica_batch_size(num_replicas)
        slots = self.slot_reads(num_replicas, replica_ids)
        local = len(replica_ids)

        def produce() -> Iterator[Features]:
            elements = self._elements(slots, batch)
            try:
                while True:
                    group = [next(elements) for _ in range(local)]
                    yield {name: np.concatenate([element[name] for element in group], 1) for name in group[0]}
            finally:
                elements.close()

        return ReadAhead(produce, depth)

    def _elements(self, slots: list[Iterator[SegmentRead]], batch: int) -> Iterator[Features]:
        records = [slot_records(reads) for reads in slots]
        steps = self.accumulation_steps
        sampler = self.mask_sampler() if self.resample_masks else None
        try:
            while True:
                for first in range(0, len(records), batch):
                    # slot-major, as the tf.data reader's interleave: steps records of each slot in turn
                    taken = [next(slot) for slot in records[first:first + batch] for _ in range(steps)]
                    yield self._features(taken, batch, sampler)
        finally:
            for slot in records:
                slot.close()

    def _features(self, records: list[SlotRecord], batch: int, sampler: MaskSampler | None) -> Features:
        missing = next((record for record in records if record.data is None), None)
        if missing is not None:
            raise StreamEndedEarlyError(missing.where)
        parsed = decode_batch([record.data for record in records], self.seq_len, [r.where for r in records])
        epoch = np.array([record.epoch for record in records], np.int32)
        source = np.array([record.source for record in records], np.int32)
        later = epoch > 0  # epoch 0 keeps the stored masks
        if sampler is not None and later.any():
            parsed["is_masked"][later] = sampler(*(parsed[name][later] for name in
                                                   ("input_ids", "word_start", "stream_id", "stream_pos")),
                                                 epoch[later], source[later])
        keys = permutation_keys(self.seed, parsed["stream_id"], parsed["stream_pos"], epoch,
                                *([source] if self.source_keyed else []))
        out = {name: parsed[name] for name in COMPACT_FEATURES if name != "perm_seed"}
        out["perm_seed"] = permutation_seeds(keys)
        return {name: np.ascontiguousarray(step_major(value, batch, self.accumulation_steps))
                for name, value in out.items()}


class NumpyStreamReader(StreamLayout, NumpyBatches):
    """tfrecords.reader.StreamReader's batches without TensorFlow (same fields)."""


class NumpyMixtureReader(MixtureLayout, NumpyBatches):
    """tfrecords.mixture.MixtureReader's batches without TensorFlow (same arguments)."""

    source_keyed = True
