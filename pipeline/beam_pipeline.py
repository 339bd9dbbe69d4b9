"""The Apache Beam pipeline of `xlnet preprocess`.

Stages (each DoFn loads what it needs once per worker in ``setup``: the SentencePiece model
is read from ``--vocab``, which workers must be able to read, and checked against the
SHA-256 the launcher saw, so a vocabulary replaced mid-run fails loudly)::

    one ReadTask per matched file, each with some of the EveryShard markers (one per shard)
    (Create deals them to the workers in turn: every worker reads files)
        -> ReadDocuments: documents, placed by the seeded hash of their key, as compact
           ((split, shard), RawDocuments) batches, then the file's read report on shard
           train-0's key (REPORT_CARRIER); a marker seeds its shard with None so that empty
           shards get their (empty) file too
        (--dedup: ReadDocuments also gives each document as a KeyedCandidate (its exact key, its
           MinHash signature); exact: GroupByText groups the copies of a text, ExactDuplicates names
           every copy but the kept one to its shard and passes the kept one on; near: SignatureBands
           (band keys and document keys, no signature) -> GroupByBand (a worker holds one band group's
           keys) -> BandPairs (each member with the group's least-ranked one) -> JoinSignatures (by
           document, with the candidates) -> GroupByPair (a candidate pair's two signatures) -> NearPairs
           (the estimated Jaccard checked) -> AllPairs (one group of the pairs found, on one worker: edges
           between duplicates only) -> NearClusters names every member of a connected component but the
           kept one to its shard)
        -> GroupByKey: the only shuffle of the text
        -> WriteShard: normalise + tokenise the shard's documents, per stream concatenate
           them in hash order, build records (forward, then reversed with bi_data), write the
           shard file; emits the shard's report (and passes the read reports on)
        -> every report -> combined -> WriteManifest (last, atomic): each shard's size
           read back from the finished files; no manifest at all when there is no training
           record, so a failed run never looks like data; then the run's report (RunReport)
           for the launcher

What the launcher learns (counters, write errors, a lost lock, which worker did what) thus
travels as elements and is gathered in the last stage: the same on every runner, whether it
has Beam metrics (FnApiRunner, Dataflow) or not (Dask).

Why one shuffle of raw text: a document's split, stream and hence shard depend only on
its key, so it can go straight to its shard. Everything that costs CPU (tokenising,
building and encoding records) then runs in the shard stage, spread over the workers, and
the runner (which, locally, decodes and re-encodes every shuffled element) only moves a
few large strings and byte arrays per (file, shard) instead of many small objects.

Shard files are written by WriteShard itself through ``apache_beam.io.filesystems``
(local, gs://, ...) with TFRecord framing, because their content must be in a fixed order:
streams by ascending id, records by stream_pos. A retried bundle rewrites the same bytes.

The reports' counters, also counted as Beam metrics (namespace ``xlnet``) for a runner's UI
but read by nothing: files, empty_files, unreadable_files, lines, invalid_lines, long_lines,
documents_read, dropped_bytes (stored bytes of unreadable files never read), documents,
empty_documents, tokens, records, masked_tokens, short_streams (streams with tokens but no
record), uncovered_tokens (stream tails too short for another record). Workers log progress
every ``PROGRESS_EVERY`` documents per file and for every shard tokenised and written.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import posixpath
import socket
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, Iterator, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.metrics import Metrics

from pipeline.cleaning import (clean_document, dedup_flow, dedup_input_counters, removal_counters,
                               stage_counters)
from pipeline.near_duplicates import (Clusters, MinHashSettings, band_keys, band_pairs, estimated_jaccard, exact_key,
                                      keep_rank, kept_and_removed, signature)
from pipeline.corpus import CorpusError, InputFile, read_documents, read_identified_documents
from pipeline.language_id import LanguageFilter
from pipeline.data_directory import (OutputWriteError, create_in_run, open_staging, remove_staged_shards, report_path,
                                     save_report, shard_sizes, stage_manifest, staging_directory)
from pipeline.output_lock import read_lock
from pipeline.preprocess_config import PreprocessConfig
from pipeline.records import RecordBuilder
from pipeline.streams import (TokenizedDocument, concatenate_stream, place_document, reverse_stream,
                              shard_of_stream, stream_rng, streams_of_shard)
from pipeline.vocab import Vocab, load_vocab
from tfrecords.example_codec import encode_batch
from tfrecords.lock_owner import describe
from tfrecords.manifest import MANIFEST_NAME, SPLITS, Manifest, ShardEntry, SplitEntry, StreamEntry
from tfrecords.text_normalization import normalize_text

NAMESPACE = "xlnet"
# String-set metrics for a runner's UI (the run's report carries the same to the launcher): each file
# the run could not write for good, and the owner of --output's lock when it was no longer this run's.
WRITE_ERRORS = "write_errors"
LOST_LOCK = "lost_lock"
PROGRESS_EVERY = 20000
# A reader sends its buffered documents on once they hold this many characters (bounds its memory).
READ_BUFFER_CHARS = 1 << 24
_LOG = logging.getLogger("xlnet.preprocess")


class Counters:
    """Beam counters of one DoFn, created once (not per element)."""

    def __init__(self, *names: str):
        self._counters = {name: Metrics.counter(NAMESPACE, name) for name in names}

    def add(self, name: str, value: int) -> None:
        if value:
            self._counters[name].inc(value)


class RawDocuments(NamedTuple):
    """Documents of one file bound for one shard, packed into a few flat values.

    The shuffle then moves one string and four byte arrays instead of a Python object per
    document and line. ``text`` holds every line joined by newlines (corpus lines never
    contain one); document ``i`` has ``line_counts[i]`` lines and key ``f"{file_key}:{indices[i]}"``.
    """

    file_key: str
    indices: bytes  # int64 per document: its index in the file
    streams: bytes  # int32 per document
    orders: bytes  # uint64 per document: its sort key inside the stream
    line_counts: bytes  # int32 per document
    text: str

    def documents(self) -> Iterator[tuple[str, int, int, list[str]]]:
        """(key, stream, order, lines) of every document."""
        lines = self.text.split("\n")
        ends = np.cumsum(np.frombuffer(self.line_counts, dtype=np.int32)).tolist()
        rows = zip(np.frombuffer(self.indices, dtype=np.int64).tolist(),
                   np.frombuffer(self.streams, dtype=np.int32).tolist(),
                   np.frombuffer(self.orders, dtype=np.uint64).tolist(), [0] + ends[:-1], ends)
        for index, stream, order, begin, end in rows:
            yield f"{self.file_key}:{index}", stream, order, lines[begin:end]


class _ShardBuffer:
    """The documents one reader holds for one shard until it sends them on."""

    def __init__(self):
        self.indices, self.streams, self.orders, self.line_counts, self.lines = [], [], [], [], []

    def add(self, index: int, stream: int, order: int, lines: list[str]) -> None:
        self.indices.append(index)
        self.streams.append(stream)
        self.orders.append(order)
        self.line_counts.append(len(lines))
        self.lines += lines

    def pack(self, file_key: str) -> RawDocuments:
        return RawDocuments(file_key, np.array(self.indices, dtype=np.int64).tobytes(),
                            np.array(self.streams, dtype=np.int32).tobytes(),
                            np.array(self.orders, dtype=np.uint64).tobytes(),
                            np.array(self.line_counts, dtype=np.int32).tobytes(), "\n".join(self.lines))


class EveryShard(NamedTuple):
    """A marker that travels with the matched files (in their ReadTasks), one per shard: ReadDocuments
    seeds that shard's key with None, so that an empty shard gets its (empty) file too.

    Markers rather than a second Create flattened into the shuffle because the local runner
    runs such a Flatten as a stage of its own that copies all the read text once more."""

    split: str
    shard: int


class ReadTask(NamedTuple):
    """One element of the matched files: a file to read (None only in a run without files) and the
    markers of the shards it seeds."""

    file: InputFile | None
    markers: tuple[EveryShard, ...] = ()


def read_tasks(files: list[InputFile], markers: list[EveryShard]) -> list[ReadTask]:
    """One task per file, the markers dealt among them in turn, so that every element is a file to read.

    Runners hand a Create's elements to their workers by position: FnApiRunner deals them in turn (the
    i-th to worker i mod n), Dask cuts them into consecutive partitions; either way each worker gets
    files. Files and markers as separate elements, alternating, put every file at an even position, and
    FnApiRunner's two workers then had one read every file while the other seeded shards."""
    if not files:
        return [ReadTask(None, tuple(markers))]
    return [ReadTask(file, tuple(markers[k::len(files)])) for k, file in enumerate(files)]


class DuplicateCandidate(NamedTuple):
    """A document as the dedup stages group it: its key, where it goes, its size; under --dedup near also its
    MinHash signature (uint64 bytes, shuffled once to the candidate pairs it is in, then dropped)."""

    key: str
    split: str
    shard: int
    bytes: int
    signature: bytes = b""
    id: str | int = ""  # under --removed: the id a user finds the document by


class KeyedCandidate(NamedTuple):
    """What ReadDocuments also yields under --dedup, beside the shards' documents, for each document the
    filters kept: its exact key (empty without exact dedup) and its DuplicateCandidate; ExactDuplicates yields
    the copy it keeps as one too, for the near-duplicate stage. In the same output (split off by the next two
    stages), not a tagged one: the Dask runner mixes a ParDo's tagged outputs with its main one."""

    key: bytes
    candidate: DuplicateCandidate


def is_candidate(element) -> bool:
    return isinstance(element, KeyedCandidate)


def is_shard_element(element) -> bool:
    return not isinstance(element, KeyedCandidate)


class DuplicateRemoved(NamedTuple):
    """A document of a shard that another copy replaces (``kept``, the copy kept), found by the dedup ``stage``
    ("exact" or "near"): WriteShard drops it."""

    key: str
    kept: str
    bytes: int
    stage: str = "exact"
    id: str | int = ""  # under --removed: the ids of the document and of the copy kept
    kept_id: str | int = ""


class RemovedDocument(NamedTuple):
    """A line of the --removed audit (one JSON object): the document's id, the stage and rule that removed it,
    and for a duplicate the kept copy's id. Filter removals travel to their shard as these."""

    id: str | int
    stage: str
    reason: str
    kept: str | int | None = None

    @classmethod
    def of_duplicate(cls, removed: DuplicateRemoved) -> "RemovedDocument":
        return cls(removed.id, removed.stage, removed.stage, removed.kept_id)

    def line(self) -> str:
        values = {"id": self.id, "stage": self.stage, "reason": self.reason}
        return json.dumps(values if self.kept is None else {**values, "kept": self.kept}, ensure_ascii=False)

    def order(self) -> tuple[str, str]:
        """The audit file's order: by id (as text), then line."""
        return str(self.id), self.line()


def every_shard(config: PreprocessConfig) -> list[EveryShard]:
    """The markers of every shard of both splits."""
    return [EveryShard(split, shard) for split in SPLITS for shard in range(config.num_shards_of(split))]


def worker_name() -> str:
    """Which worker process did a piece of work (host:pid): recorded in the run's reports."""
    return f"{socket.gethostname()}:{os.getpid()}"


# The shard whose key also carries every reader's report to the last stage (every run has it).
REPORT_CARRIER = ("train", 0)
# What a reader counts per file (its report's fields besides kind, file and worker).
READ_STATS = ("files", "lines", "invalid_lines", "long_lines", "empty_files", "unreadable_files", "documents_read",
              "dropped_bytes")


def read_counters(config: PreprocessConfig) -> tuple[str, ...]:
    """What a read report carries: READ_STATS, the language and filter stages' counters, the documents entering
    dedup."""
    return READ_STATS + stage_counters(config.read_stages) + dedup_input_counters(config.dedup)


# What the shard stage counts per shard, besides the manifest's records, tokens, masked tokens, documents.
SHARD_STATS = ("empty_documents", "short_streams", "uncovered_tokens")


class ReadDocuments(beam.DoFn):
    """ReadTask -> ((split, shard), None) for each of its markers' shards, then its file's documents as
    ((split, shard), RawDocuments): each document placed by its key, batched per shard, then
    (REPORT_CARRIER, the file's read report: a dict with kind "read"). Under --dedup, also a
    KeyedCandidate for every document the filters kept."""

    def __init__(self, config: PreprocessConfig):
        self._config = config
        self._minhash = config.minhash_settings()
        self._language = LanguageFilter(config.languages, config.language_threshold) if config.languages else None
        self._counters = Counters(*READ_STATS)

    def process(self, task: ReadTask) -> Iterator[tuple[tuple[str, int], RawDocuments | dict | None]
                                                  | KeyedCandidate]:
        for marker in task.markers:
            yield (marker.split, marker.shard), None
        if task.file is not None:
            yield from self._read(task.file)

    def _read(self, input_file: InputFile) -> Iterator[tuple[tuple[str, int], RawDocuments | dict | None]
                                                       | KeyedCandidate]:
        c = self._config
        stats: Counter = Counter()
        index = -1
        start = time.time()
        buffers: dict[tuple[str, int], _ShardBuffer] = defaultdict(_ShardBuffer)
        buffered_chars = 0
        try:
            read = (read_identified_documents if c.removed else read_documents)(
                input_file.path, c.input_format, c.text_field, c.max_line_bytes, stats)
            for index, document in enumerate(read):
                identity, lines = document if c.removed else ("", document)
                place = place_document(f"{input_file.key}:{index}", c.seed, c.valid_fraction, c.num_streams)
                shard = (place.split, shard_of_stream(place.stream, c.num_shards_of(place.split)))
                if c.read_stages:
                    removed, kept_lines = clean_document(lines, c.filters, stats, self._language)  # counted by stage
                    if removed is not None:  # its key's index stays used (the same keys as unfiltered)
                        if c.removed:  # its audit line goes to the shard it would have gone to
                            yield shard, RemovedDocument(identity, *removed)
                        continue
                    lines = kept_lines
                buffers[shard].add(index, place.stream, place.order, lines)
                if c.dedup:
                    candidate = self._candidate(f"{input_file.key}:{index}", shard, "\n".join(lines), identity)
                    stats[f"in_documents_{c.dedup[0]}"] += 1
                    stats[f"in_bytes_{c.dedup[0]}"] += candidate.candidate.bytes
                    yield candidate
                buffered_chars += sum(map(len, lines))
                if buffered_chars >= READ_BUFFER_CHARS:
                    yield from self._flush(input_file.key, buffers)
                    buffered_chars = 0
                if (index + 1) % PROGRESS_EVERY == 0:
                    _LOG.info("%s: read %d documents, %d lines", input_file.path, index + 1, stats["lines"])
        except CorpusError as error:
            _LOG.error("skipping the rest of %s: %s", input_file.path, error)
            stats["unreadable_files"] += 1
            stats["dropped_bytes"] += max(0, input_file.size_bytes - stats["bytes_read"])
        yield from self._flush(input_file.key, buffers)
        stats["files"] += 1
        stats["documents_read"] += index + 1
        report = {"kind": "read", "file": input_file.path, "worker": worker_name(),
                  **{name: stats[name] for name in read_counters(c)},
                  "seconds": round(time.time() - start, 3)}
        for name in READ_STATS:
            self._counters.add(name, report[name])
        _LOG.info(read_line(report))
        if stats["invalid_lines"] or stats["long_lines"]:
            _LOG.warning("%s: skipped %d invalid and %d over-long lines", input_file.path,
                         stats["invalid_lines"], stats["long_lines"])
        yield REPORT_CARRIER, report

    def _candidate(self, key: str, shard: tuple[str, int], text: str, identity: str | int) -> KeyedCandidate:
        """The document as the dedup stages see it (its signature computed here, where its text is)."""
        c = self._config
        values = signature(text, self._minhash).tobytes() if "near" in c.dedup else b""
        return KeyedCandidate(exact_key(text, c.seed) if "exact" in c.dedup else b"",
                              DuplicateCandidate(key, *shard, len(text.encode("utf-8")), values, identity))

    @staticmethod
    def _flush(file_key: str, buffers: dict) -> Iterator[tuple[tuple[str, int], RawDocuments]]:
        for shard in sorted(buffers):
            yield shard, buffers[shard].pack(file_key)
        buffers.clear()


def read_line(report: dict) -> str:
    """The progress line of one file read, from its read report (workers log it; under Dask, whose
    workers' logs stay on the workers, the launcher prints it from the run's report)."""
    return (f"read {report['file']}: {report['documents_read']} documents, {report['lines']} lines in "
            f"{report['seconds']:.1f} s")


def written_line(report: dict, output: str) -> str:
    """The progress line of one shard written, from its shard report (see read_line); it names the
    file where the launcher publishes it."""
    return (f"wrote {FileSystems.join(output, report['file'])}: {report['records']} records from "
            f"{report['documents']} documents ({report['tokens']} tokens) in {report['seconds']:.1f} s")


class ExactDuplicates(beam.DoFn):
    """(exact key, its documents) -> ((split, shard), DuplicateRemoved) for every copy but the one kept:
    the least ``keep_rank`` of its key, whatever order the copies arrived in; with ``near``, the kept copy as
    a KeyedCandidate for the near-duplicate stage (so a copy removed here is never a near candidate). A worker
    holds the copies of one text at a time: its memory grows with the duplicates it groups, not with the
    corpus."""

    def __init__(self, seed: int, near: bool = False):
        self._seed = seed
        self._near = near

    def process(self, element: tuple[bytes, Iterable[DuplicateCandidate]]) -> Iterator[
            tuple[tuple[str, int], DuplicateRemoved] | KeyedCandidate]:
        key, copies = element
        copies = list(copies)
        kept = min(copies, key=lambda copy: (keep_rank(copy.key, self._seed), copy.key))
        if self._near:
            yield KeyedCandidate(key, kept)
        for copy in copies:
            if copy is not kept:
                yield (copy.split, copy.shard), DuplicateRemoved(copy.key, kept.key, copy.bytes, "exact", copy.id,
                                                                  kept.id)


def band_members(candidate: DuplicateCandidate, settings: MinHashSettings) -> Iterator[tuple[bytes, str]]:
    """(band key, document key) for each of the candidate's LSH bands: the near-duplicate stage's largest
    shuffle (``bands`` elements per document), so it carries plain bytes and text that Beam's coder handles
    without pickling, and no signature: most band groups hold one document and need none."""
    for band in band_keys(np.frombuffer(candidate.signature, dtype=np.uint64), settings):
        yield band, candidate.key


class BandPairs(beam.DoFn):
    """(band key, the keys of the documents sharing it) -> (document key, pair) for both documents of each
    candidate pair the group gives (``band_pairs``: each member with the group's least-ranked one), so that
    the join by document brings the pair the two signatures. A group of one (most) gives nothing."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, element: tuple[bytes, Iterable[str]]) -> Iterator[tuple[str, tuple[str, str]]]:
        for pair in band_pairs(element[1], self._seed):
            yield pair[0], pair
            yield pair[1], pair


def signed_pair_ends(element: tuple[str, dict[str, Iterable]]) -> Iterator[tuple[tuple[str, str], DuplicateCandidate]]:
    """(document key, {"candidate": its candidate, "pairs": the candidate pairs it is in}) -> (pair, candidate)
    once per distinct pair (several bands may give the same pair): a signature travels only to the pairs
    found, never with every band."""
    _, joined = element
    pairs = set(joined["pairs"])
    if pairs:
        (candidate,) = joined["candidate"]
        for pair in sorted(pairs):
            yield pair, candidate


class NearPairs(beam.DoFn):
    """((a, b), the two candidates) -> (None, (a, b)) when their signatures' estimated Jaccard is at least
    ``min_jaccard`` (``pairs_in_band``'s check), the candidates without their signatures."""

    def __init__(self, settings: MinHashSettings):
        self._settings = settings

    def process(self, element: tuple[tuple[str, str], Iterable[DuplicateCandidate]]) -> Iterator[
            tuple[None, tuple[DuplicateCandidate, DuplicateCandidate]]]:
        (a_key, b_key), ends = element
        by_key = {end.key: end for end in ends}
        a, b = by_key[a_key], by_key[b_key]
        similarity = estimated_jaccard(np.frombuffer(a.signature, dtype=np.uint64),
                                       np.frombuffer(b.signature, dtype=np.uint64))
        if similarity >= self._settings.min_jaccard:
            yield None, (a._replace(signature=b""), b._replace(signature=b""))


class NearClusters(beam.DoFn):
    """(None, every duplicate pair) -> ((split, shard), DuplicateRemoved) for every member of every cluster (the
    pairs' connected components) but its kept copy (the least ``keep_rank``). The components are computed on
    one worker, which holds only the pairs found (edges between near duplicates) and their documents' ids,
    never the corpus's documents."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, element: tuple[None, Iterable[tuple[DuplicateCandidate, DuplicateCandidate]]]) -> Iterator[
            tuple[tuple[str, int], DuplicateRemoved]]:
        clusters, members = Clusters(), {}
        for a, b in element[1]:
            clusters.add_pair(a.key, b.key)
            members[a.key], members[b.key] = a, b
        for key, kept in sorted(kept_and_removed(clusters.groups().values(), self._seed).items()):
            member = members[key]
            yield (member.split, member.shard), DuplicateRemoved(key, kept, member.bytes, "near", member.id,
                                                                  members[kept].id)


class WriteShard(beam.DoFn):
    """((split, shard), documents) -> the shard file on disk, and its report (a dict with kind "shard":
    its statistics and worker, or the lasting error that kept it from being written).

    The values of REPORT_CARRIER's key also hold the readers' reports: passed on as they are."""

    def __init__(self, config: PreprocessConfig, vocab_sha256: str, staging: str):
        self._config = config
        self._vocab_sha256 = vocab_sha256
        self._staging = staging
        self._builder = None
        self._processor = None
        self._eod = -1
        self._counters = Counters("documents", "tokens", "records", "masked_tokens", *SHARD_STATS)
        self._write_errors = Metrics.string_set(NAMESPACE, WRITE_ERRORS)  # for a runner's UI only

    def setup(self) -> None:
        vocab = load_vocab(self._config.vocab, expected_sha256=self._vocab_sha256)
        special = vocab.special_ids
        self._processor = vocab.processor()
        self._eod = special.eod
        self._builder = RecordBuilder(self._config.record_config(), vocab.word_start_table(), special.sep, special.cls)

    def process(self, element: tuple[tuple[str, int], Iterable[RawDocuments | dict | None]]) -> Iterator[dict]:
        (split, shard), values = element
        c = self._config
        arrival = time.time()
        raw, read_reports, duplicates, audit = [], [], {}, []
        for value in values:  # None: the empty seed every shard gets
            if isinstance(value, RawDocuments):
                raw.append(value)
            elif isinstance(value, DuplicateRemoved):
                duplicates[value.key] = value
            elif isinstance(value, RemovedDocument):
                audit.append(value)
            elif value is not None:
                read_reports.append(value)
        stats: Counter = Counter()
        for removed in duplicates.values():
            stats[f"removed_documents_{removed.stage}"] += 1
            stats[f"removed_bytes_{removed.stage}"] += removed.bytes
        audit += [RemovedDocument.of_duplicate(removed) for removed in duplicates.values()] if c.removed else []
        by_stream: dict[int, list[TokenizedDocument]] = defaultdict(list)
        for document in self._tokenize(raw, stats, set(duplicates)):
            by_stream[document.stream].append(document)
        start = time.time()
        _LOG.info("tokenised %d documents for %s in %.1f s", sum(len(d) for d in by_stream.values()),
                  c.shard_name(split, shard), start - arrival)
        yield self._write(split, shard, by_stream, stats, start, sorted(audit, key=RemovedDocument.order))
        yield from read_reports

    def _write(self, split: str, shard: int, by_stream: dict[int, list[TokenizedDocument]], stats: Counter,
               start: float, audit: list[RemovedDocument]) -> dict:
        """Writes the shard file, and under --removed its audit file (the ``audit`` lines, sorted); returns the
        shard's report."""
        c = self._config
        path = FileSystems.join(self._staging, c.shard_name(split, shard))  # the launcher publishes it
        report = {"kind": "shard", "split": split, "shard": shard, "file": c.shard_name(split, shard),
                  "worker": worker_name()}
        compression = CompressionTypes.GZIP if c.compression == "gzip" else CompressionTypes.UNCOMPRESSED
        try:
            with create_in_run(path, self._staging, compression) as handle:
                streams, totals = self._write_streams(handle, split, shard, by_stream, stats)
            if c.removed:  # in the staging place too: the launcher publishes it into --removed with the shards
                path = FileSystems.join(self._staging, c.removed_name(split, shard))
                with create_in_run(path, self._staging) as handle:
                    handle.write("".join(document.line() + "\n" for document in audit).encode("utf-8"))
                report["removed_file"] = c.removed_name(split, shard)
        except OSError as error:  # a full disk, a read-only output: one sentence in the launcher
            failure = OutputWriteError.of(path, error)
            if not failure.lasting:
                raise failure from error
            self._write_errors.add(failure.text())
            return {**report, "write_error": failure.text()}
        documents = sum(len(docs) for docs in by_stream.values())
        tokens = sum(d.num_tokens for docs in by_stream.values() for d in docs)
        report.update(records=totals["records"], tokens=tokens, masked_tokens=totals["masked_tokens"],
                      documents=documents, streams=streams,
                      **{name: stats[name] for name in SHARD_STATS + removal_counters(c.dedup)})
        for name in ("records", "tokens", "masked_tokens", "documents", *SHARD_STATS):
            self._counters.add(name, report[name])
        report["seconds"] = round(time.time() - start, 3)
        _LOG.info(written_line(report, c.output))
        return report

    def _tokenize(self, batches: list[RawDocuments], stats: Counter,
                  removed: set[str] = frozenset()) -> Iterator[TokenizedDocument]:
        """Normalises and tokenises the documents (one SentencePiece call per batch) but the ``removed``
        keys (duplicates); drops empty ones."""
        c = self._config
        for batch in batches:
            documents = [document for document in batch.documents() if document[0] not in removed]
            texts = [[text for text in (normalize_text(line, c.uncased) for line in lines) if text]
                     for _, _, _, lines in documents]
            flat = list(itertools.chain.from_iterable(texts))
            encoded = iter(self._processor.encode(flat, out_type=int, num_threads=1) if flat else [])
            for (key, stream, order, _), document_texts in zip(documents, texts):
                sentences = [ids for ids in itertools.islice(encoded, len(document_texts)) if ids]
                if not sentences:
                    stats["empty_documents"] += 1
                    continue
                if c.use_eod:
                    sentences.append([self._eod])
                lengths = np.fromiter((len(s) for s in sentences), dtype=np.int32, count=len(sentences))
                ids = np.fromiter(itertools.chain.from_iterable(sentences), dtype=np.int32, count=int(lengths.sum()))
                yield TokenizedDocument(key, stream, order, ids.tobytes(), lengths.tobytes())

    def _write_streams(self, handle, split: str, shard: int, by_stream: dict[int, list[TokenizedDocument]],
                       stats: Counter) -> tuple[list[dict], Counter]:
        """Writes the shard's streams by ascending id (forward, then reversed); returns their bookkeeping."""
        c = self._config
        forward = streams_of_shard(shard, c.num_shards_of(split), c.num_streams)
        texts = {s: concatenate_stream(by_stream.get(s, [])) for s in forward}
        jobs = [(s, texts[s], False) for s in forward]
        if c.bi_data:
            jobs += [(s + c.num_streams, reverse_stream(*texts[s]), True) for s in forward]
        streams: list[dict] = []
        totals: Counter = Counter()
        for stream_id, (ids, starts), reverse in jobs:
            first = totals["records"]
            rng = stream_rng(c.seed, split, stream_id)
            for batch in self._builder.build(ids, starts, stream_id, reverse, rng):
                for serialized in encode_batch(batch.__dict__):
                    _TFRecordUtil.write_record(handle, serialized)
                totals["records"] += len(batch)
                totals["masked_tokens"] += int(batch.is_masked.sum())
            count = totals["records"] - first
            streams.append({"stream_id": stream_id, "records": count, "first_record_index_in_file": first})
            covered = 0 if count == 0 else (count - 1) * c.reuse_len + c.seq_len
            stats["short_streams"] += int(count == 0 and len(ids) > 0)
            stats["uncovered_tokens"] += max(0, len(ids) - covered)
        return streams, totals


class WriteManifest(beam.DoFn):
    """Every report (shards' and readers') -> DIR/manifest.json, written atomically once every shard is
    done, then the run's report (``RunReport``'s dict) for the launcher, at ``report_path``.

    A run without a single training record, with a shard that could not be written, with results
    the runner delivered twice or not at all, or whose --output lock another run has taken, writes
    no manifest: its presence means usable data. The report says which, and the launcher
    (pipeline/preprocess_command.py) turns it into one sentence. After a write error the run's
    shards are removed here already, which frees the space the report needs on a full disk."""

    def __init__(self, config: PreprocessConfig, vocab_entry: dict, special_ids: dict, files: list[str],
                 report_path: str, lock_token: str | None = None):
        self._config = config
        self._vocab_entry = vocab_entry
        self._special_ids = special_ids
        self._files = files
        self._report_path = report_path
        self._staging = posixpath.dirname(report_path)
        self._lock_token = lock_token

    def process(self, reports: list[dict]) -> Iterator[dict]:
        output = self._config.output
        report = RunReport.gather(reports, self._files, self._config)
        if self._lock_token is not None:  # never publish over a directory another run has taken
            owner = read_lock(output)
            if owner is None or owner.get("token") != self._lock_token:
                _LOG.warning("%s/%s not written: the directory's lock is no longer this run's", output, MANIFEST_NAME)
                report.lost_lock = describe(owner)
                Metrics.string_set(NAMESPACE, LOST_LOCK).add(report.lost_lock)
        if report.lost_lock is None and not report.write_errors and not report.problems:
            self._publish(report)
        if report.write_errors and report.lost_lock is None:
            _LOG.warning("%s/%s not written: %d file(s) could not be written", output, MANIFEST_NAME,
                         len(report.write_errors))
            remove_staged_shards(self._staging)
        save_report(report.to_dict(), self._report_path)
        yield report.to_dict()

    def _publish(self, report: "RunReport") -> None:
        """Writes the manifest when the run has training records (the report says whether it did)."""
        if not has_training_records(report.shards):
            _LOG.warning("no training records: %s/%s not written", self._config.output, MANIFEST_NAME)
            return
        sizes = shard_sizes(self._staging, [s["file"] for s in report.shards])
        manifest = build_manifest(self._config, self._vocab_entry, self._special_ids, report.shards, sizes,
                                  report.corpus_counters())
        problems = manifest.validate()
        if problems:
            raise RuntimeError("inconsistent shard statistics: " + "; ".join(problems))
        try:
            report.manifest = stage_manifest(manifest, self._staging)
        except OutputWriteError as failure:
            if not failure.lasting:
                raise
            Metrics.string_set(NAMESPACE, WRITE_ERRORS).add(failure.text())
            report.write_errors.append(failure.text())


@dataclass
class RunReport:
    """What a run learnt, gathered in its last stage from the reports that travelled through it as
    elements (never from a runner's metrics, which not every runner has): the same on every runner.

    ``counters``: the end-of-run counters (COUNTER_KEYS); ``shards``: each shard's report;
    ``reads`` / ``writes``: per worker (host:pid), how many files it read and shards it wrote;
    ``write_errors``: the files that could not be written for good (OutputWriteError texts);
    ``lost_lock``: the owner of --output's lock when it was no longer this run's; ``problems``:
    results the runner delivered twice or never; ``manifest``: its path once staged (the launcher
    publishes it); ``files``: each input file's read report."""

    counters: dict[str, int]
    shards: list[dict]
    reads: dict[str, int]
    writes: dict[str, int]
    files: list[dict] = field(default_factory=list)
    write_errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lost_lock: str | None = None
    manifest: str | None = None

    @classmethod
    def gather(cls, reports: list[dict], files: list[str], config: PreprocessConfig) -> "RunReport":
        reads = [r for r in reports if r.get("kind") == "read"]
        shards = [r for r in reports if r.get("kind") == "shard"]
        problems = _delivered_once("input file", [r["file"] for r in reads], files)
        problems += _delivered_once("shard", [r["file"] for r in shards],
                                    [config.shard_name(s.split, s.shard) for s in every_shard(config)])
        written = [s for s in shards if not s.get("write_error")]
        counters = {key: sum(r[key] for r in reads) for key in read_counters(config)}
        counters.update({key: sum(s[key] for s in written) for key in
                         ("documents", "tokens", "records", "masked_tokens", *SHARD_STATS,
                          *removal_counters(config.dedup))})
        counters.update(dedup_flow(counters, config.dedup))
        return cls(counters=counters, shards=sorted(written, key=lambda s: (s["split"], s["shard"])),
                   reads=dict(sorted(Counter(r["worker"] for r in reads).items())),
                   writes=dict(sorted(Counter(s["worker"] for s in shards).items())),
                   files=sorted(reads, key=lambda r: r["file"]),
                   write_errors=sorted(s["write_error"] for s in shards if s.get("write_error")), problems=problems)

    def progress_lines(self, output: str) -> list[str]:
        """The workers' progress lines (read_line, written_line) of the run, files then shards."""
        return [read_line(r) for r in self.files] + [written_line(s, output) for s in self.shards]

    def corpus_counters(self) -> dict[str, int]:
        """The counters that depend only on the corpus and settings (not on workers): the manifest's."""
        return dict(sorted(self.counters.items()))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "RunReport":
        return cls(**values)


def _delivered_once(what: str, delivered: list[str], expected: list[str]) -> list[str]:
    """Problems when the runner delivered an item's results more than once, or never."""
    seen = Counter(delivered)
    problems = [f"the runner delivered the results of {what} {name} {count} times"
                for name, count in sorted(seen.items()) if count > 1]
    missing = sorted(set(expected) - set(seen))
    if missing:
        problems.append(f"the runner delivered no results for {len(missing)} {what}(s), e.g. {missing[0]}")
    return problems


def has_training_records(shard_stats: list[dict]) -> bool:
    """Whether a run produced data to train on: the rule that decides if its manifest is written."""
    return any(s["records"] for s in shard_stats if s["split"] == "train")


def build_manifest(config: PreprocessConfig, vocab_entry: dict, special_ids: dict, shard_stats: list[dict],
                   sizes: dict[str, int], counters: dict[str, int] | None = None) -> Manifest:
    """The manifest for a finished run from the per-shard statistics and the shard files' sizes."""
    splits = {}
    for split in SPLITS:
        stats = sorted((s for s in shard_stats if s["split"] == split), key=lambda s: s["shard"])
        shards = tuple(
            ShardEntry(file=s["file"], records=s["records"], tokens=s["tokens"], masked_tokens=s["masked_tokens"],
                       documents=s["documents"], streams=tuple(StreamEntry(**stream) for stream in s["streams"]),
                       bytes=sizes[s["file"]])
            for s in stats)
        splits[split] = SplitEntry(num_shards=config.num_shards_of(split), num_streams=config.num_streams,
                                   shards=shards)
    return Manifest(config=config.to_dict(), vocab=vocab_entry, special_ids=special_ids, splits=splits,
                    counters=counters)


def duplicates_removed(candidates, config: PreprocessConfig) -> list:
    """The dedup stages from ReadDocuments' KeyedCandidates: the PCollections of ((split, shard),
    DuplicateRemoved) to join to the shards. Exact first; the near stage takes the copies it kept (or, without
    exact dedup, every candidate): band keys with document keys -> GroupByKey per band -> candidate pairs ->
    joined by document with the candidates (their signatures) -> GroupByKey per pair -> pairs verified -> one
    group of every pair -> clusters -> every member but the kept one."""
    removed = []
    if "exact" in config.dedup:
        exact = (candidates
                 | "ByExactKey" >> beam.Map(lambda element: (element.key, element.candidate))
                 | "GroupByText" >> beam.GroupByKey()
                 | "ExactDuplicates" >> beam.ParDo(ExactDuplicates(config.seed, "near" in config.dedup)))
        removed.append(exact | "ExactRemoved" >> beam.Filter(is_shard_element))
        candidates = exact | "ExactKept" >> beam.Filter(is_candidate)
    if "near" in config.dedup:
        settings = config.minhash_settings()
        pair_ends = (candidates
                     | "SignatureBands" >> beam.FlatMap(lambda element: band_members(element.candidate, settings))
                     | "GroupByBand" >> beam.GroupByKey()
                     | "BandPairs" >> beam.ParDo(BandPairs(settings.seed)))
        by_document = candidates | "ByDocument" >> beam.Map(lambda element: (element.candidate.key, element.candidate))
        removed.append({"candidate": by_document, "pairs": pair_ends}
                       | "JoinSignatures" >> beam.CoGroupByKey()
                       | "SignedPairEnds" >> beam.FlatMap(signed_pair_ends)
                       | "GroupByPair" >> beam.GroupByKey()
                       | "NearPairs" >> beam.ParDo(NearPairs(settings))
                       | "AllPairs" >> beam.GroupByKey()
                       | "NearClusters" >> beam.ParDo(NearClusters(config.seed)))
    return removed


def build_pipeline(pipeline: beam.Pipeline, config: PreprocessConfig, vocab: Vocab, files: list[InputFile],
                   lock_token: str | None = None) -> str:
    """Adds every stage of the preprocessing to ``pipeline`` and opens the run's staging place in
    ``config.output`` (pipeline/data_directory.py), where its workers write; returns where its last
    stage writes the run's report (take_report reads it). With ``lock_token`` (the run's
    pipeline/output_lock.py token, which also names the staging place) the manifest is staged only
    while the lock still holds it."""
    run_id = lock_token or uuid.uuid4().hex
    staging = staging_directory(config.output, run_id)
    open_staging(staging)
    path = report_path(config.output, run_id)
    # Create hands its elements to the workers by position: one file each (read_tasks) spreads the reading.
    matched = pipeline | "MatchedFiles" >> beam.Create(read_tasks(files, every_shard(config)))
    if config.dedup:
        read = matched | "ReadDocuments" >> beam.ParDo(ReadDocuments(config))
        documents = (read | "ShardElements" >> beam.Filter(is_shard_element),
                     *duplicates_removed(read | "Candidates" >> beam.Filter(is_candidate), config)) \
            | "WithDuplicates" >> beam.Flatten()
    else:
        documents = matched | "ReadDocuments" >> beam.ParDo(ReadDocuments(config))
    _ = (
        documents
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(WriteShard(config, vocab.sha256, staging))
        | "AllReports" >> beam.combiners.ToList()
        | "WriteManifest" >> beam.ParDo(WriteManifest(config, vocab.manifest_entry(), vocab.special_ids.to_dict(),
                                                       [f.path for f in files], path, lock_token)))
    return path
