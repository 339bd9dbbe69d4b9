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
        (--dedup, beside the shards' documents: Candidates packs of the documents the filters kept (keys,
         exact keys, MinHash signatures as flat arrays; one per file or CANDIDATES_PER_PACK documents). Every
         dedup shuffle carries packs, one per pack and bucket, never an element per document or band
         (FnApiRunner's cost is per element); the buckets, one per BUCKET_INPUT_BYTES of stored input
         (dedup_buckets), bound what a worker holds to about that much input's rows, whatever the corpus:
           exact: ByExactBucket -> GroupByText (a bucket of exact keys) -> ExactDuplicates (one sort of the
             keys finds the copies): every copy but the kept one named to its shard, the kept ones passed
             on as a pack
           near: SignatureBands (each band a row: its hash, index and values, by the hash's bucket)
             -> GroupByBand -> BandPairs (one sort of the hashes finds the band groups of two or more; each
             member paired with the group's least-ranked one)
             -> JoinSignatures (by document bucket: the pairs' ends with ByDocumentBucket's Candidates)
             -> SignedPairEnds -> GroupByPair (by pair bucket: a pair's two signatures) -> NearPairs (the
             estimated Jaccard checked) -> AllPairs (one group of the pairs found, on one worker: edges
             between duplicates only) -> NearClusters: every member of a connected component but the kept
             one named to its shard
           lines (LineRows packs: each document's distinct line hashes): with exact or near dedup,
             LinesByDocumentBucket + RemovedByDocumentBucket -> JoinRemoved -> LinesOfKeptDocuments (the
             removed documents' rows left out), else ByLineBucket -> GroupByLine -> LineOwners (one sort of
             the rows by line and page rank finds each line's keeper): each shard sent the rows of the lines
             its documents lose)
        -> GroupByKey: the only shuffle of the text
        -> WriteShard: (--dedup lines: drop each document's lost and repeated lines, re-check the pages that
           lost some) normalise + tokenise the shard's documents, per stream concatenate
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

from pipeline.cleaning import (clean_document, dedup_flow, dedup_input_counters, drop_duplicate_lines,
                               shard_counters, stage_counters)
from pipeline.near_duplicates import (Clusters, MinHashSettings, band_pairs, band_rows, document_hash,
                                      equal_row_groups, estimated_jaccard, exact_key_of_words, keep_order, keep_rank,
                                      kept_and_removed, line_hashes, minhash_words, signatures_of)
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
# Under --dedup, a reader sends the dedup stages its documents in packs of at most this many (about 1 kB each
# with a signature: some 32 MB at most held per reader).
CANDIDATES_PER_PACK = 1 << 15
# A reader signs its candidates this many at a time (signatures_of: about half the CPU of one at a time on crawl
# documents), or sooner once they hold this many words: that bounds the words held for signing and a batch's
# (shingle_words, words) table of terms, to 2.6 MB at 5-word shingles plus the last document's share (which
# signing it alone needed too).
SIGNATURE_BATCH = 256
SIGNATURE_BATCH_WORDS = 1 << 16
# The dedup stages' shuffles group packed arrays by bucket: one bucket per this many stored bytes of input, a
# count the launcher derives from the input files' sizes before any work (dedup_buckets). A bucket thus holds
# the dedup rows of about this much input, whatever the corpus's size: its documents' exact keys and
# signatures (about 1 kB a document), or their bands (14 rows of 80 bytes a document).
BUCKET_INPUT_BYTES = 16 << 20
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
    Under --removed, ``ids[i]`` is the id a user finds it by (the shard stage names a document ``--dedup lines``
    removes).
    """

    file_key: str
    indices: bytes  # int64 per document: its index in the file
    streams: bytes  # int32 per document
    orders: bytes  # uint64 per document: its sort key inside the stream
    line_counts: bytes  # int32 per document
    text: str
    ids: tuple = ()

    def identified(self) -> dict[str, str | int]:
        """Each document's key -> its id (under --removed; empty otherwise)."""
        return {f"{self.file_key}:{index}": identity
                for index, identity in zip(np.frombuffer(self.indices, dtype=np.int64).tolist(), self.ids)}

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
        self.indices, self.streams, self.orders, self.line_counts, self.lines, self.ids = [], [], [], [], [], []

    def add(self, index: int, stream: int, order: int, lines: list[str], identity: str | int = "") -> None:
        self.indices.append(index)
        self.streams.append(stream)
        self.orders.append(order)
        self.line_counts.append(len(lines))
        self.lines += lines
        self.ids.append(identity)

    def pack(self, file_key: str, identified: bool = False) -> RawDocuments:
        return RawDocuments(file_key, np.array(self.indices, dtype=np.int64).tobytes(),
                            np.array(self.streams, dtype=np.int32).tobytes(),
                            np.array(self.orders, dtype=np.uint64).tobytes(),
                            np.array(self.line_counts, dtype=np.int32).tobytes(), "\n".join(self.lines),
                            tuple(self.ids) if identified else ())


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
    """One document as the near-duplicate pairs carry it: its key, where it goes, its size; with its MinHash
    signature (uint64 bytes) only on the way to the check of the candidate pairs it is in."""

    key: str
    split: str
    shard: int
    bytes: int
    signature: bytes = b""
    id: str | int = ""  # under --removed: the id a user finds the document by


class Candidates(NamedTuple):
    """Documents as the dedup stages see them, packed into a few flat values, so that a shuffle moves a few
    arrays per bucket instead of an element per document (FnApiRunner's cost is per element, not per byte).

    Document ``i``'s key is ``f"{files[file_of[i]]}:{indices[i]}"``; ``exact_keys`` (16 bytes each) only under
    ``--dedup exact``, ``signatures`` (``hashes`` uint64 each) only under ``--dedup near``, ``ids`` only under
    ``--removed``. ReadDocuments yields one per file (or per CANDIDATES_PER_PACK documents); the stages split
    it into buckets (``select``) and join a bucket's again (``joined``)."""

    files: tuple[str, ...]
    file_of: bytes  # int32 per document: its file's place in ``files``
    indices: bytes  # int64 per document: its index in its file
    splits: bytes  # int8 per document: its split's place in SPLITS
    shards: bytes  # int32 per document
    sizes: bytes  # int64 per document: its UTF-8 bytes
    hashes: bytes  # uint64 per document: document_hash of its key (its bucket in the signatures' join)
    exact_keys: bytes = b""
    signatures: bytes = b""
    ids: tuple = ()

    def column(self, name: str) -> np.ndarray:
        return np.frombuffer(getattr(self, name), dtype=CANDIDATE_COLUMNS[name])

    @property
    def count(self) -> int:
        return len(self.indices) // 8

    def keys(self, rows: np.ndarray | None = None) -> list[str]:
        """The documents' keys (of ``rows`` only, when given)."""
        return document_keys(self.files, self.column("file_of"), self.column("indices"), rows)

    def candidate(self, row: int, key: str, signed: bool = False) -> DuplicateCandidate:
        """Document ``row`` (key ``key``) alone; with its signature when ``signed``."""
        width = len(self.signatures) // self.count if signed else 0
        values = self.signatures[width * row:width * (row + 1)]
        return DuplicateCandidate(key, SPLITS[int(self.column("splits")[row])], int(self.column("shards")[row]),
                                  int(self.column("sizes")[row]), values,
                                  self.ids[row] if self.ids else "")

    def select(self, rows: np.ndarray) -> "Candidates":
        """The documents of ``rows`` (ascending indices), in that order."""
        return Candidates(self.files, *selected_columns(self, CANDIDATE_COLUMNS, self.count, rows),
                          tuple(self.ids[i] for i in rows.tolist()) if self.ids else ())

    @classmethod
    def joined(cls, packs: Iterable["Candidates"]) -> "Candidates":
        """One pack of the documents of ``packs``, in their order (their files' tables merged)."""
        packs = [pack for pack in packs if pack.count]
        return cls(**joined_columns(packs, CANDIDATE_COLUMNS),
                   ids=tuple(itertools.chain.from_iterable(pack.ids for pack in packs)))


def selected_columns(pack: tuple, columns: dict, count: int, rows: np.ndarray) -> list[bytes]:
    """The packed ``columns`` of ``pack`` (``count`` rows; a column's width is its bytes over the rows) of
    ``rows`` only, in their order."""
    def taken(name: str) -> bytes:
        packed = getattr(pack, name)
        width = len(packed) // count if count else 0
        return np.frombuffer(packed, np.uint8).reshape(count, width)[rows].tobytes() if width else b""
    return [taken(name) for name in columns]


def joined_columns(packs: list, columns: dict) -> dict:
    """The fields of one pack of the rows of ``packs`` (Candidates or LineRows), in their order: their files'
    tables merged, each of ``columns`` concatenated."""
    files, file_of = merged_files(packs)
    return {**{name: b"".join(getattr(pack, name) for pack in packs) for name in columns},
            "files": files, "file_of": file_of}


def merged_files(packs: list) -> tuple[tuple[str, ...], bytes]:
    """The file keys of ``packs`` (Candidates, BandRows or LineRows) as one sorted table, and each row's place in it
    (int32 bytes), the packs' rows in their order."""
    files = tuple(sorted({name for pack in packs for name in pack.files}))
    place = {name: k for k, name in enumerate(files)}
    file_of = [np.array([place[name] for name in pack.files], np.int32)[np.frombuffer(pack.file_of, np.int32)]
               for pack in packs]
    return files, np.concatenate(file_of).tobytes() if packs else b""


def document_keys(files: tuple[str, ...], file_of: np.ndarray, indices: np.ndarray,
                  rows: np.ndarray | None = None) -> list[str]:
    """The keys ``f"{file key}:{index}"`` of packed documents (of ``rows`` only, when given)."""
    if rows is not None:
        file_of, indices = file_of[rows], indices[rows]
    return [f"{files[f]}:{index}" for f, index in zip(file_of.tolist(), indices.tolist())]


# The packed columns of Candidates and their dtypes (exact_keys 16 bytes and signatures ``hashes`` uint64 per
# document, as raw bytes).
CANDIDATE_COLUMNS = {"file_of": np.int32, "indices": np.int64, "splits": np.int8, "shards": np.int32,
                     "sizes": np.int64, "hashes": np.uint64, "exact_keys": np.uint8, "signatures": np.uint64}


class CandidateBuffer:
    """The documents one reader holds for the dedup stages until it sends them on as Candidates. The signatures of
    those added by ``add_words`` are computed SIGNATURE_BATCH at a time (sooner once SIGNATURE_BATCH_WORDS words
    wait, and before a pack or a document added with its signature): only the words of those not yet signed are
    held."""

    def __init__(self, minhash: MinHashSettings | None = None):
        self._minhash = minhash  # needed by add_words only
        self._clear()

    def _clear(self) -> None:
        self.indices, self.splits, self.shards, self.sizes, self.hashes = [], [], [], [], []
        self.exact_keys, self.ids = [], []
        self.signatures: list[bytes] = []  # the signed documents' signatures (a batch's in one block), in order
        self._unsigned: list[list[str]] = []  # the words of the documents after those, in order
        self._unsigned_words = 0

    def add(self, index: int, split: str, shard: int, size: int, key: str, exact: bytes, values: bytes,
            identity: str | int) -> None:
        """Adds a document with its exact key and its signature's bytes (each b"" when not asked for)."""
        self._sign()  # the documents added before it first: the signatures stay in the documents' order
        self._add_keys(index, split, shard, size, key, exact, identity)
        self.signatures.append(values)

    def add_words(self, index: int, split: str, shard: int, size: int, key: str, exact: bytes, words: list[str],
                  identity: str | int) -> None:
        """Adds a document with its exact key (b"" when not asked for) and its words (``minhash_words``), to sign
        with the next batch."""
        self._add_keys(index, split, shard, size, key, exact, identity)
        self._unsigned.append(words)
        self._unsigned_words += len(words)
        if len(self._unsigned) >= SIGNATURE_BATCH or self._unsigned_words >= SIGNATURE_BATCH_WORDS:
            self._sign()

    def _add_keys(self, index: int, split: str, shard: int, size: int, key: str, exact: bytes,
                  identity: str | int) -> None:
        self.indices.append(index)
        self.splits.append(SPLITS.index(split))
        self.shards.append(shard)
        self.sizes.append(size)
        self.hashes.append(document_hash(key))
        self.exact_keys.append(exact)
        self.ids.append(identity)

    def _sign(self) -> None:
        if self._unsigned:
            self.signatures.append(signatures_of(self._unsigned, self._minhash).tobytes())
            self._unsigned, self._unsigned_words = [], 0

    def __len__(self) -> int:
        return len(self.indices)

    def pack(self, file_key: str, identified: bool) -> Candidates:
        self._sign()
        packed = Candidates((file_key,), np.zeros(len(self), np.int32).tobytes(),
                            np.array(self.indices, np.int64).tobytes(), np.array(self.splits, np.int8).tobytes(),
                            np.array(self.shards, np.int32).tobytes(), np.array(self.sizes, np.int64).tobytes(),
                            np.array(self.hashes, np.uint64).tobytes(), b"".join(self.exact_keys),
                            b"".join(self.signatures), tuple(self.ids) if identified else ())
        self._clear()
        return packed


class LineRows(NamedTuple):
    """Lines of some documents for ``--dedup lines``, packed: row ``i`` is line ``lines[i]`` (its ``line_hash``)
    of the document of key ``f"{files[file_of[i]]}:{indices[i]}"``, of shard (SPLITS[``splits[i]``],
    ``shards[i]``), whose key's ``document_hash`` is ``documents[i]`` and whose ``keep_order`` is ``ranks[i]``.
    A reader sends each document's distinct lines; LineOwners sends each shard the rows of the lines its
    documents lose (kept in another page)."""

    files: tuple[str, ...]
    file_of: bytes  # int32 per row
    indices: bytes  # int64 per row
    splits: bytes  # int8 per row
    shards: bytes  # int32 per row
    documents: bytes  # uint64 per row
    lines: bytes  # uint64 per row
    ranks: bytes  # uint64 per row

    def column(self, name: str) -> np.ndarray:
        return np.frombuffer(getattr(self, name), dtype=LINE_COLUMNS[name])

    @property
    def count(self) -> int:
        return len(self.lines) // 8

    def keys(self, rows: np.ndarray | None = None) -> list[str]:
        """The keys of the rows' documents (of ``rows`` only, when given)."""
        return document_keys(self.files, self.column("file_of"), self.column("indices"), rows)

    def select(self, rows: np.ndarray) -> "LineRows":
        """The rows of ``rows`` (indices), in that order."""
        return LineRows(self.files, *selected_columns(self, LINE_COLUMNS, self.count, rows))

    @classmethod
    def joined(cls, packs: Iterable["LineRows"]) -> "LineRows":
        """One pack of the rows of ``packs``, in their order (their files' tables merged)."""
        return cls(**joined_columns([pack for pack in packs if pack.count], LINE_COLUMNS))


LINE_COLUMNS = {"file_of": np.int32, "indices": np.int64, "splits": np.int8, "shards": np.int32,
                "documents": np.uint64, "lines": np.uint64, "ranks": np.uint64}


class LineBuffer:
    """The distinct lines of the documents one reader holds for ``--dedup lines`` until it sends them on."""

    def __init__(self, seed: int):
        self._seed = seed  # keys each page's keep_order
        self.documents, self.lines = [], []  # (index, split, shard, document hash, rank, lines) each; their hashes

    def add(self, index: int, split: str, shard: int, key: str, hashes: np.ndarray) -> None:
        if hashes.size:
            self.documents.append((index, SPLITS.index(split), shard, document_hash(key), keep_order(key, self._seed),
                                   hashes.size))
            self.lines.append(hashes)

    def __len__(self) -> int:
        return len(self.documents)

    def pack(self, file_key: str) -> LineRows:
        columns = list(zip(*self.documents))
        counts = np.array(columns[5], np.int64)
        repeated = lambda values, dtype: np.repeat(np.array(values, dtype), counts).tobytes()
        packed = LineRows((file_key,), np.zeros(int(counts.sum()), np.int32).tobytes(), repeated(columns[0], np.int64),
                          repeated(columns[1], np.int8), repeated(columns[2], np.int32),
                          repeated(columns[3], np.uint64), np.concatenate(self.lines).tobytes(),
                          repeated(columns[4], np.uint64))
        self.documents, self.lines = [], []
        return packed


def is_candidate(element) -> bool:
    return isinstance(element, Candidates)


def is_line_rows(element) -> bool:
    return isinstance(element, LineRows)


def is_shard_element(element) -> bool:
    return not isinstance(element, (Candidates, LineRows))


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
    (REPORT_CARRIER, the file's read report: a dict with kind "read"). Under --dedup, also the documents the
    filters kept as Candidates (their keys, exact keys, signatures) and under --dedup lines as LineRows (their
    distinct lines' hashes), one pack per CANDIDATES_PER_PACK documents and one at the end of the file: a reader
    holds at most that many."""

    def __init__(self, config: PreprocessConfig):
        self._config = config
        self._minhash = config.minhash_settings()
        self._language = LanguageFilter(config.languages, config.language_threshold) if config.languages else None
        self._rules = config.filter_rules_of()
        self._counters = Counters(*READ_STATS)

    def process(self, task: ReadTask) -> Iterator[tuple[tuple[str, int], RawDocuments | dict | None]
                                                  | Candidates]:
        for marker in task.markers:
            yield (marker.split, marker.shard), None
        if task.file is not None:
            yield from self._read(task.file)

    def _read(self, input_file: InputFile) -> Iterator[tuple[tuple[str, int], RawDocuments | dict | None]
                                                       | Candidates]:
        c = self._config
        stats: Counter = Counter()
        index = -1
        start = time.time()
        buffers: dict[tuple[str, int], _ShardBuffer] = defaultdict(_ShardBuffer)
        buffered_chars = 0
        candidates, line_rows = CandidateBuffer(self._minhash), LineBuffer(c.seed)
        try:
            read = (read_identified_documents if c.removed else read_documents)(
                input_file.path, c.input_format, c.text_field, c.max_line_bytes, stats)
            for index, document in enumerate(read):
                identity, lines = document if c.removed else ("", document)
                place = place_document(f"{input_file.key}:{index}", c.seed, c.valid_fraction, c.num_streams)
                shard = (place.split, shard_of_stream(place.stream, c.num_shards_of(place.split)))
                if c.read_stages:
                    removed, kept_lines = clean_document(lines, c.filters, stats, self._language, self._rules)  # counted by stage
                    if removed is not None:  # its key's index stays used (the same keys as unfiltered)
                        if c.removed:  # its audit line goes to the shard it would have gone to
                            yield shard, RemovedDocument(identity, *removed)
                        continue
                    lines = kept_lines
                buffers[shard].add(index, place.stream, place.order, lines, identity)
                if c.dedup:
                    size = self._candidate(candidates, line_rows, input_file.key, index, shard, lines, identity)
                    stats[f"in_documents_{c.dedup[0]}"] += 1
                    stats[f"in_bytes_{c.dedup[0]}"] += size
                    if max(len(candidates), len(line_rows)) >= CANDIDATES_PER_PACK:
                        yield from self._dedup_packs(input_file.key, candidates, line_rows)
                buffered_chars += sum(map(len, lines))
                if buffered_chars >= READ_BUFFER_CHARS:
                    yield from self._flush(input_file.key, buffers, bool(c.removed))
                    buffered_chars = 0
                if (index + 1) % PROGRESS_EVERY == 0:
                    _LOG.info("%s: read %d documents, %d lines", input_file.path, index + 1, stats["lines"])
        except CorpusError as error:
            _LOG.error("skipping the rest of %s: %s", input_file.path, error)
            stats["unreadable_files"] += 1
            stats["dropped_bytes"] += max(0, input_file.size_bytes - stats["bytes_read"])
        yield from self._flush(input_file.key, buffers, bool(c.removed))
        yield from self._dedup_packs(input_file.key, candidates, line_rows)
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

    def _candidate(self, candidates: CandidateBuffer, line_rows: LineBuffer, file_key: str, index: int,
                   shard: tuple[str, int], lines: list[str], identity: str | int) -> int:
        """Adds the document as the dedup stages see it (its exact key, signature and line hashes computed here,
        where its text is; the signature in ``candidates``' next batch) to ``candidates`` (exact, near) and
        ``line_rows`` (lines); returns its UTF-8 bytes."""
        c = self._config
        text = "\n".join(lines)
        size = len(text.encode("utf-8"))
        key = f"{file_key}:{index}"
        if "exact" in c.dedup or "near" in c.dedup:
            words = minhash_words(text)  # one split for both keys
            exact = exact_key_of_words(words, self._minhash.seed) if "exact" in c.dedup else b""
            if "near" in c.dedup:
                candidates.add_words(index, *shard, size, key, exact, words, identity)
            else:
                candidates.add(index, *shard, size, key, exact, b"", identity)
        if "lines" in c.dedup:
            line_rows.add(index, *shard, key, line_hashes(lines, c.seed))
        return size

    def _dedup_packs(self, file_key: str, candidates: CandidateBuffer, line_rows: LineBuffer) -> Iterator[
            Candidates | LineRows]:
        """What the buffers hold, as one pack each (emptying them)."""
        if len(candidates):
            yield candidates.pack(file_key, bool(self._config.removed))
        if len(line_rows):
            yield line_rows.pack(file_key)

    @staticmethod
    def _flush(file_key: str, buffers: dict, identified: bool) -> Iterator[tuple[tuple[str, int], RawDocuments]]:
        for shard in sorted(buffers):
            yield shard, buffers[shard].pack(file_key, identified)
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


def dedup_buckets(input_bytes: int) -> int:
    """The buckets of the dedup shuffles for this much stored input: one per BUCKET_INPUT_BYTES (at least one).
    Which bucket a row goes to never changes what is found: equal keys and equal bands always share one."""
    return max(1, -(-input_bytes // BUCKET_INPUT_BYTES))


class RemovedDuplicates(NamedTuple):
    """The duplicates of one shard that one bucket of a dedup stage found, packed: WriteShard drops them."""

    removed: tuple[DuplicateRemoved, ...]


def by_shard(removed: Iterable[DuplicateRemoved], shard_of: dict[str, tuple[str, int]]) -> Iterator[
        tuple[tuple[str, int], RemovedDuplicates]]:
    """``removed`` packed per shard (``shard_of``: each document's), in shard order."""
    packs: dict[tuple[str, int], list[DuplicateRemoved]] = defaultdict(list)
    for duplicate in removed:
        packs[shard_of[duplicate.key]].append(duplicate)
    for shard in sorted(packs):
        yield shard, RemovedDuplicates(tuple(packs[shard]))


def exact_buckets(candidates: Candidates, buckets: int) -> Iterator[tuple[int, Candidates]]:
    """(bucket, the documents of ``candidates`` in it) by their exact key: every copy of a text in one bucket."""
    keys = np.frombuffer(candidates.exact_keys, "<u8").reshape(-1, 2)
    yield from split_by_bucket(candidates, keys[:, 0] % np.uint64(buckets))


def document_buckets(candidates: Candidates, buckets: int) -> Iterator[tuple[int, Candidates]]:
    """(bucket, the documents of ``candidates`` in it) by their key's hash: where the signatures' join finds them."""
    yield from split_by_bucket(candidates, candidates.column("hashes") % np.uint64(buckets))


def split_by_bucket(candidates: Candidates, bucket_of: np.ndarray) -> Iterator[tuple[int, Candidates]]:
    """(bucket, its documents of ``candidates``) for each bucket holding some, its documents in their order."""
    for bucket, rows in bucket_rows(bucket_of):
        yield bucket, candidates.select(rows)


def bucket_rows(bucket_of: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(bucket, the indices of its rows, ascending) for each bucket in ``bucket_of`` (each row's), by bucket."""
    order = np.argsort(bucket_of, kind="stable")
    ordered = bucket_of[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    for start, end in zip(starts.tolist(), starts[1:].tolist() + [len(order)]):
        yield int(ordered[start]), order[start:end]


class ExactDuplicates(beam.DoFn):
    """(bucket, Candidates packs) -> ((split, shard), RemovedDuplicates) naming every copy of a text but the one
    kept: the least ``keep_rank`` of its key, whatever order the copies arrived in; with ``near``, the copies
    kept as one Candidates pack for the near-duplicate stage (so a copy removed here is never a near candidate).
    Copies share an exact key, and so a bucket: one sort of the bucket's keys finds them. A worker holds one
    bucket (about BUCKET_INPUT_BYTES of input's keys and signatures), plus every copy of a text that is in it."""

    def __init__(self, seed: int, near: bool = False):
        self._seed = seed
        self._near = near

    def process(self, element: tuple[int, Iterable[Candidates]]) -> Iterator[
            tuple[tuple[str, int], RemovedDuplicates] | Candidates]:
        candidates = Candidates.joined(element[1])
        kept = np.ones(candidates.count, bool)
        removed, shard_of = [], {}
        for rows in equal_row_groups(np.frombuffer(candidates.exact_keys, "<u8").reshape(-1, 2)):
            copies = [candidates.candidate(row, key) for row, key in zip(rows.tolist(), candidates.keys(rows))]
            first = min(copies, key=lambda copy: (keep_rank(copy.key, self._seed), copy.key))
            kept[rows] = [copy is first for copy in copies]
            for copy in copies:
                if copy is not first:
                    removed.append(DuplicateRemoved(copy.key, first.key, copy.bytes, "exact", copy.id, first.id))
                    shard_of[copy.key] = (copy.split, copy.shard)
        if self._near and kept.any():
            yield candidates.select(np.flatnonzero(kept))
        yield from by_shard(removed, shard_of)


class BandRows(NamedTuple):
    """The LSH bands of some documents bound for one bucket, packed: ``rows`` is near_duplicates.band_rows's
    table (uint64: hash, band index, the band's values), row ``i`` a band of the document of key
    ``f"{files[file_of[i]]}:{indices[i]}"``."""

    files: tuple[str, ...]
    file_of: bytes  # int32 per row
    indices: bytes  # int64 per row
    rows: bytes  # uint64, (2 + rows) per row

    @classmethod
    def joined(cls, packs: Iterable["BandRows"]) -> "BandRows":
        """One pack of the rows of ``packs``, in their order (their files' tables merged)."""
        packs = list(packs)
        return cls(*merged_files(packs), b"".join(pack.indices for pack in packs), b"".join(pack.rows for pack in packs))

    def keys(self, rows: np.ndarray) -> list[str]:
        """The keys of the documents of ``rows``."""
        return document_keys(self.files, np.frombuffer(self.file_of, np.int32), np.frombuffer(self.indices, np.int64),
                             rows)


def band_buckets(candidates: Candidates, settings: MinHashSettings, buckets: int) -> Iterator[tuple[int, BandRows]]:
    """(bucket, BandRows) of the bands of ``candidates``, by the band's hash: equal bands always share a bucket.
    A pack of n documents gives n x bands rows, cut into at most ``buckets`` elements (FnApiRunner then encodes
    a few arrays, not an element per band)."""
    signatures = candidates.column("signatures").reshape(candidates.count, settings.hashes)
    rows = band_rows(signatures, settings)
    document = np.repeat(np.arange(candidates.count), settings.bands)
    file_of, indices = candidates.column("file_of")[document], candidates.column("indices")[document]
    for bucket, taken in bucket_rows(rows[:, 0] % np.uint64(buckets)):
        yield bucket, BandRows(candidates.files, file_of[taken].tobytes(), indices[taken].tobytes(),
                               rows[taken].tobytes())


class BandPairs(beam.DoFn):
    """(bucket, BandRows packs) -> (document bucket, candidate pairs by one of their ends) for both documents of
    each candidate pair the bucket's band groups give (``band_pairs``: each member with the group's least-ranked
    one), each distinct pair once per bucket, so that the join by document brings the pair the two signatures.
    One sort of the band hashes finds the groups of two or more (most bands are alone). A worker holds one
    bucket's bands (about BUCKET_INPUT_BYTES of input's), plus every member of a band group that is in it."""

    def __init__(self, seed: int, buckets: int, width: int):
        self._seed = seed
        self._buckets = buckets
        self._width = width  # uint64 values per row: hash, index and the band's rows

    def process(self, element: tuple[int, Iterable[BandRows]]) -> Iterator[tuple[int, tuple[tuple[str, str, str], ...]]]:
        bands = BandRows.joined(element[1])
        pairs = set()
        for group in equal_row_groups(np.frombuffer(bands.rows, np.uint64).reshape(-1, self._width)):
            pairs.update(band_pairs(bands.keys(group), self._seed))
        ends: dict[int, list[tuple[str, str, str]]] = defaultdict(list)
        for a, b in sorted(pairs):
            for end in (a, b):
                ends[document_hash(end) % self._buckets].append((end, a, b))
        for bucket in sorted(ends):
            yield bucket, tuple(ends[bucket])


class SignedEnds(NamedTuple):
    """Candidate pairs' ends bound for one pair bucket: (pair, the end's candidate with its signature) each.
    One object, not a tuple of them: Beam's coder pickles what it does not know, once per object it meets."""

    ends: tuple[tuple[tuple[str, str], DuplicateCandidate], ...]


class PairsFound(NamedTuple):
    """The duplicate pairs one pair bucket found (their candidates without signatures), as one object."""

    pairs: tuple[tuple[DuplicateCandidate, DuplicateCandidate], ...]


def signed_pair_ends(element: tuple[int, dict[str, Iterable]], buckets: int) -> Iterator[tuple[int, SignedEnds]]:
    """(document bucket, {"candidates": its Candidates packs, "pairs": the candidate pairs ending in it}) ->
    (pair bucket, SignedEnds: (pair, candidate with its signature) for each distinct pair and end): a
    signature travels only to the pairs found, never with every band."""
    _, joined = element
    wanted: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for ends in joined["pairs"]:
        for end, a, b in ends:
            wanted[end].add((a, b))
    if not wanted:  # most document buckets of a corpus with few duplicates
        return
    signed: dict[int, list] = defaultdict(list)
    for candidates in joined["candidates"]:
        for row, key in enumerate(candidates.keys()):
            for pair in sorted(wanted.get(key, ())):
                signed[pair_bucket(pair, buckets)].append((pair, candidates.candidate(row, key, signed=True)))
    for bucket in sorted(signed):
        yield bucket, SignedEnds(tuple(signed[bucket]))


def pair_bucket(pair: tuple[str, str], buckets: int) -> int:
    """The bucket where a candidate pair's two signatures meet."""
    return document_hash(f"{pair[0]}\n{pair[1]}") % buckets


class NearPairs(beam.DoFn):
    """(pair bucket, SignedEnds packs) -> (None, PairsFound: the bucket's pairs whose signatures' estimated
    Jaccard is at least ``min_jaccard`` (``pairs_in_band``'s check), as pairs of candidates without their
    signatures)."""

    def __init__(self, settings: MinHashSettings):
        self._settings = settings

    def process(self, element: tuple[int, Iterable[SignedEnds]]) -> Iterator[tuple[None, PairsFound]]:
        ends: dict[tuple[str, str], dict[str, DuplicateCandidate]] = defaultdict(dict)
        for pack in element[1]:
            for pair, candidate in pack.ends:
                ends[pair][candidate.key] = candidate
        found = []
        for (a_key, b_key), by_key in sorted(ends.items()):
            a, b = by_key[a_key], by_key[b_key]
            similarity = estimated_jaccard(np.frombuffer(a.signature, dtype=np.uint64),
                                           np.frombuffer(b.signature, dtype=np.uint64))
            if similarity >= self._settings.min_jaccard:
                found.append((a._replace(signature=b""), b._replace(signature=b"")))
        if found:
            yield None, PairsFound(tuple(found))


class NearClusters(beam.DoFn):
    """(None, every pair bucket's PairsFound) -> ((split, shard), RemovedDuplicates) naming every member of
    every cluster (the pairs' connected components) but its kept copy (the least ``keep_rank``). The components
    are computed on one worker, which holds only the pairs found (edges between near duplicates) and their
    documents' ids, never the corpus's documents."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, element: tuple[None, Iterable[PairsFound]]) -> Iterator[tuple[tuple[str, int], RemovedDuplicates]]:
        clusters, members = Clusters(), {}
        for a, b in itertools.chain.from_iterable(found.pairs for found in element[1]):
            clusters.add_pair(a.key, b.key)
            members[a.key], members[b.key] = a, b
        removed = [DuplicateRemoved(key, kept, members[key].bytes, "near", members[key].id, members[kept].id)
                   for key, kept in sorted(kept_and_removed(clusters.groups().values(), self._seed).items())]
        yield from by_shard(removed, {key: (member.split, member.shard) for key, member in members.items()})


def removed_by_document_bucket(element: tuple[tuple[str, int], RemovedDuplicates], buckets: int) -> Iterator[
        tuple[int, tuple[str, ...]]]:
    """((split, shard), RemovedDuplicates) -> (document bucket, the keys of the documents removed in it): there
    the lines of the documents exact and near dedup removed are left out of the line stage."""
    keys: dict[int, list[str]] = defaultdict(list)
    for removed in element[1].removed:
        keys[document_hash(removed.key) % buckets].append(removed.key)
    for bucket in sorted(keys):
        yield bucket, tuple(keys[bucket])


def line_document_buckets(rows: LineRows, buckets: int) -> Iterator[tuple[int, LineRows]]:
    """(bucket, the rows of ``rows`` in it) by their document's key hash: where the removals meet them."""
    yield from split_by_bucket(rows, rows.column("documents") % np.uint64(buckets))


def line_buckets(rows: LineRows, buckets: int) -> Iterator[tuple[int, LineRows]]:
    """(bucket, the rows of ``rows`` in it) by their line's hash: every page of a line in one bucket."""
    yield from split_by_bucket(rows, rows.column("lines") % np.uint64(buckets))


def lines_of_kept_documents(element: tuple[int, dict[str, Iterable]], buckets: int) -> Iterator[
        tuple[int, LineRows]]:
    """(document bucket, {"lines": its LineRows packs, "removed": the keys exact and near dedup removed in it})
    -> (line bucket, LineRows) of the lines of the documents they kept, so that a line is always kept in a page
    that stays. The removed keys' hashes find the few rows to compare by key."""
    _, joined = element
    rows = LineRows.joined(joined["lines"])
    removed = set(itertools.chain.from_iterable(joined["removed"]))
    if removed and rows.count:
        hashes = np.fromiter(map(document_hash, removed), np.uint64, len(removed))
        maybe = np.flatnonzero(np.isin(rows.column("documents"), hashes))
        gone = maybe[np.fromiter((key in removed for key in rows.keys(maybe)), bool, maybe.size)]
        rows = rows.select(np.setdiff1d(np.arange(rows.count), gone))
    if rows.count:
        yield from line_buckets(rows, buckets)


class LineOwners(beam.DoFn):
    """(line bucket, LineRows packs) -> ((split, shard), LineRows) of the lines each shard's documents lose: of
    the pages that have a line, the one of least ``keep_rank`` keeps it and every other loses it, whatever order
    they arrived in (C4 keeps a line in the page of least hash). Every page of a line is in one bucket; one
    sort of the bucket's rows by line and ``keep_order`` (the rows carry it: no key is built) finds each line's
    keeper, the first of its line; ``keep_rank`` itself decides only between pages whose orders tie. A worker
    holds one bucket's rows (about BUCKET_INPUT_BYTES of input's lines, 41 bytes a row), plus every page of a line
    that is in it (41 bytes each)."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, element: tuple[int, Iterable[LineRows]]) -> Iterator[tuple[tuple[str, int], LineRows]]:
        rows = LineRows.joined(element[1])
        lines, ranks = rows.column("lines"), rows.column("ranks")
        order = np.lexsort((ranks, lines))
        lines, ranks = lines[order], ranks[order]
        later = np.r_[False, lines[1:] == lines[:-1]]  # not the first row of its line: it loses the line
        for line in np.unique(lines[later & np.r_[False, ranks[1:] == ranks[:-1]]]).tolist():
            self._break_tie(rows, order, lines == line, later)
        if not later.any():
            return
        lost = rows.select(np.sort(order[later]))
        shard_of = lost.column("splits").astype(np.int64) << 32 | lost.column("shards").astype(np.int64)
        for code, taken in bucket_rows(shard_of):
            yield (SPLITS[code >> 32], code & 0xFFFFFFFF), lost.select(taken)

    def _break_tie(self, rows: LineRows, order: np.ndarray, of_line: np.ndarray, later: np.ndarray) -> None:
        """Marks in ``later`` (by sorted position) every page of one line but the one of least (``keep_rank``, key):
        for a line whose least ``keep_order`` two pages share (1 in 2^64 per pair)."""
        places = np.flatnonzero(of_line)
        keys = rows.keys(order[places])
        keeper = min(range(len(keys)), key=lambda member: (keep_rank(keys[member], self._seed), keys[member]))
        later[places] = True
        later[places[keeper]] = False


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
        self._rules = config.filter_rules_of()  # --dedup lines re-checks a page by C4's sentence rule
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
        lost: dict[str, set[int]] = defaultdict(set)  # --dedup lines: the lines each document loses
        for value in values:  # None: the empty seed every shard gets
            if isinstance(value, RawDocuments):
                raw.append(value)
            elif isinstance(value, RemovedDuplicates):
                duplicates.update((removed.key, removed) for removed in value.removed)
            elif isinstance(value, LineRows):
                for key, line in zip(value.keys(), value.column("lines").tolist()):
                    lost[key].add(line)
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
        for document in self._tokenize(raw, stats, set(duplicates), lost, audit):
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
                      **{name: stats[name] for name in SHARD_STATS + shard_counters(c.dedup)})
        for name in ("records", "tokens", "masked_tokens", "documents", *SHARD_STATS):
            self._counters.add(name, report[name])
        report["seconds"] = round(time.time() - start, 3)
        _LOG.info(written_line(report, c.output))
        return report

    def _tokenize(self, batches: list[RawDocuments], stats: Counter, removed: set[str], lost: dict[str, set[int]],
                  audit: list) -> Iterator[TokenizedDocument]:
        """Normalises and tokenises the documents (one SentencePiece call per batch) but the ``removed``
        keys (duplicates), under --dedup lines without the lines they ``lost`` (its removals listed in
        ``audit`` under --removed); drops empty ones."""
        c = self._config
        for batch in batches:
            documents = [document for document in batch.documents() if document[0] not in removed]
            if "lines" in c.dedup:
                documents = self._line_stage(batch, documents, lost, stats, audit)
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

    def _line_stage(self, batch: RawDocuments, documents: list, lost: dict[str, set[int]], stats: Counter,
                    audit: list) -> list:
        """``--dedup lines`` on the documents of ``batch`` the other stages kept: each without the lines it
        ``lost`` and its repeated lines (drop_duplicate_lines); a page removed by the re-check is counted, and
        under --removed listed in ``audit``. Returns the documents kept, with their lines as kept."""
        c = self._config
        ids = batch.identified() if c.removed else {}
        kept = []
        for key, stream, order, lines in documents:
            reason, kept_lines = drop_duplicate_lines(lines, lost.get(key, frozenset()), c.seed, self._rules)
            size = len("\n".join(lines).encode("utf-8"))
            if reason is not None:
                stats["removed_documents_lines"] += 1
                stats["removed_bytes_lines"] += size
                if c.removed:
                    audit.append(RemovedDocument(ids[key], "lines", reason))
                continue
            stats["kept_documents_lines"] += 1
            stats["kept_bytes_lines"] += size if kept_lines is lines else len("\n".join(kept_lines).encode("utf-8"))
            stats["duplicate_lines_removed"] += len(lines) - len(kept_lines)
            kept.append((key, stream, order, kept_lines))
        return kept

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
                          *shard_counters(config.dedup))})
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


def duplicates_removed(candidates, config: PreprocessConfig, buckets: int = 1, lines=None) -> list:
    """The dedup stages from ReadDocuments' Candidates packs (and LineRows packs, ``lines``): the PCollections of
    ((split, shard), RemovedDuplicates or LineRows) to join to the shards. Every shuffle carries packs per
    bucket (``buckets``: dedup_buckets of the input's size), never an element per document, band or line. Exact
    first (by exact key); the near stage takes the copies it kept (or, without exact dedup, every candidate):
    bands by bucket -> candidate pairs -> joined by document bucket with the candidates (their signatures) -> by
    pair bucket -> pairs verified -> one group of every pair -> clusters -> every member but the kept one; the
    lines stage last (duplicate_lines)."""
    removed = []
    if "exact" in config.dedup:
        exact = (candidates
                 | "ByExactBucket" >> beam.FlatMap(exact_buckets, buckets)
                 | "GroupByText" >> beam.GroupByKey()
                 | "ExactDuplicates" >> beam.ParDo(ExactDuplicates(config.seed, "near" in config.dedup)))
        removed.append(exact | "ExactRemoved" >> beam.Filter(is_shard_element))
        candidates = exact | "ExactKept" >> beam.Filter(is_candidate)
    if "near" in config.dedup:
        settings = config.minhash_settings()
        pair_ends = (candidates
                     | "SignatureBands" >> beam.FlatMap(band_buckets, settings, buckets)
                     | "GroupByBand" >> beam.GroupByKey()
                     | "BandPairs" >> beam.ParDo(BandPairs(settings.seed, buckets, 2 + settings.rows)))
        by_document = candidates | "ByDocumentBucket" >> beam.FlatMap(document_buckets, buckets)
        removed.append({"candidates": by_document, "pairs": pair_ends}
                       | "JoinSignatures" >> beam.CoGroupByKey()
                       | "SignedPairEnds" >> beam.FlatMap(signed_pair_ends, buckets)
                       | "GroupByPair" >> beam.GroupByKey()
                       | "NearPairs" >> beam.ParDo(NearPairs(settings))
                       | "AllPairs" >> beam.GroupByKey()
                       | "NearClusters" >> beam.ParDo(NearClusters(config.seed)))
    if "lines" in config.dedup:
        removed.append(duplicate_lines(lines, removed, config, buckets))
    return removed


def duplicate_lines(lines, removed: list, config: PreprocessConfig, buckets: int):
    """C4's line dedup across the corpus from ReadDocuments' LineRows packs: ((split, shard), LineRows) of the
    lines each shard's documents lose. With exact or near dedup (``removed``: their PCollections), the rows
    first meet the removals by document bucket and lose the removed documents' rows (a line is kept in a page
    that stays); then by line bucket -> LineOwners."""
    if removed:
        by_document = lines | "LinesByDocumentBucket" >> beam.FlatMap(line_document_buckets, buckets)
        gone = (tuple(removed) | "DocumentsRemoved" >> beam.Flatten()
                | "RemovedByDocumentBucket" >> beam.FlatMap(removed_by_document_bucket, buckets))
        by_line = ({"lines": by_document, "removed": gone}
                   | "JoinRemoved" >> beam.CoGroupByKey()
                   | "LinesOfKeptDocuments" >> beam.FlatMap(lines_of_kept_documents, buckets))
    else:
        by_line = lines | "ByLineBucket" >> beam.FlatMap(line_buckets, buckets)
    return (by_line
            | "GroupByLine" >> beam.GroupByKey()
            | "LineOwners" >> beam.ParDo(LineOwners(config.seed)))


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
        buckets = dedup_buckets(sum(f.size_bytes for f in files))
        lines = read | "LineRows" >> beam.Filter(is_line_rows) if "lines" in config.dedup else None
        documents = (read | "ShardElements" >> beam.Filter(is_shard_element),
                     *duplicates_removed(read | "Candidates" >> beam.Filter(is_candidate), config, buckets, lines)) \
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
