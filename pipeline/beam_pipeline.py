"""The Apache Beam pipeline of `xlnet preprocess`.

Stages (each DoFn loads what it needs once per worker in ``setup``: the SentencePiece model
is read from ``--vocab``, which workers must be able to read, and checked against the
SHA-256 the launcher saw, so a vocabulary replaced mid-run fails loudly)::

    matched files (Create redistributes them) -> ReadDocuments (batches of documents) -> Reshuffle
        -> TokenizeDocuments -> ((split, shard), [documents]) -> GroupByKey (every shard
           seeded, so empty ones exist too)
        -> WriteShard: per stream concatenate documents in hash order, build records
           (forward, then reversed with bi_data), write the shard file
        -> shard statistics -> combined -> WriteManifest (last, atomic)

Shard files are written by WriteShard itself through ``apache_beam.io.filesystems``
(local, gs://, ...) with TFRecord framing, because their content must be in a fixed order:
streams by ascending id, records by stream_pos. A retried bundle rewrites the same bytes.

Beam metrics (namespace ``xlnet``): files, empty_files, unreadable_files, lines,
invalid_lines, long_lines, documents, empty_documents, tokens, records, masked_tokens,
short_streams (streams with tokens but no record), uncovered_tokens (stream tails too short
for another record). Workers log progress every ``PROGRESS_EVERY`` documents per file and
for every shard written.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections import Counter, defaultdict
from typing import Iterable, Iterator

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.metrics import Metrics

from pipeline.corpus import CorpusError, InputFile, read_documents
from pipeline.normalization import normalize_text
from pipeline.preprocess_config import PreprocessConfig
from pipeline.records import RecordBuilder
from pipeline.streams import (TokenizedDocument, concatenate_stream, place_document, reverse_stream,
                              shard_of_stream, stream_rng, streams_of_shard)
from pipeline.vocab import Vocab, load_vocab
from tfrecords.example_codec import encode_batch
from tfrecords.manifest import Manifest, ShardEntry, SplitEntry, StreamEntry
from tfrecords.manifest import SPLITS

NAMESPACE = "xlnet"
PROGRESS_EVERY = 20000
DOCUMENT_BATCH = 256
_LOG = logging.getLogger("xlnet.preprocess")


class Counters:
    """Beam counters of one DoFn, created once (not per element)."""

    def __init__(self, *names: str):
        self._counters = {name: Metrics.counter(NAMESPACE, name) for name in names}

    def add(self, name: str, value: int) -> None:
        if value:
            self._counters[name].inc(value)


class ReadDocuments(beam.DoFn):
    """InputFile -> batches of (document key, raw sentence lines).

    Documents travel in batches of up to ``DOCUMENT_BATCH`` because Beam's per-element cost
    is comparable to tokenising a short document."""

    def __init__(self, input_format: str, text_field: str, max_line_bytes: int):
        self._input_format = input_format
        self._text_field = text_field
        self._max_line_bytes = max_line_bytes
        self._counters = Counters("files", "empty_files", "unreadable_files", "lines", "invalid_lines",
                                  "long_lines", "documents_read")

    def process(self, input_file: InputFile) -> Iterator[list[tuple[str, list[str]]]]:
        stats: Counter = Counter()
        index = -1
        start = time.time()
        batch: list[tuple[str, list[str]]] = []
        try:
            documents = read_documents(input_file.path, self._input_format, self._text_field,
                                       self._max_line_bytes, stats)
            for index, lines in enumerate(documents):
                batch.append((f"{input_file.key}:{index}", lines))
                if len(batch) == DOCUMENT_BATCH:
                    yield batch
                    batch = []
                if (index + 1) % PROGRESS_EVERY == 0:
                    _LOG.info("%s: read %d documents, %d lines", input_file.path, index + 1, stats["lines"])
        except CorpusError as error:
            _LOG.error("skipping the rest of %s: %s", input_file.path, error)
            stats["unreadable_files"] += 1
        if batch:
            yield batch
        stats["files"] += 1
        stats["documents_read"] += index + 1
        for name, value in stats.items():
            self._counters.add(name, value)
        _LOG.info("read %s: %d documents, %d lines in %.1f s", input_file.path, index + 1, stats["lines"],
                  time.time() - start)
        if stats["invalid_lines"] or stats["long_lines"]:
            _LOG.warning("%s: skipped %d invalid and %d over-long lines", input_file.path,
                         stats["invalid_lines"], stats["long_lines"])


class TokenizeDocuments(beam.DoFn):
    """A batch of (key, lines) -> ((split, shard), [TokenizedDocument]): normalise, encode, place."""

    def __init__(self, config: PreprocessConfig, vocab_sha256: str):
        self._config = config
        self._vocab_sha256 = vocab_sha256
        self._processor = None
        self._eod = -1
        self._counters = Counters("documents", "empty_documents", "tokens")

    def setup(self) -> None:
        vocab = load_vocab(self._config.vocab, expected_sha256=self._vocab_sha256)
        self._processor = vocab.processor()
        self._eod = vocab.special_ids.eod

    def start_bundle(self) -> None:
        self._bundle_start, self._bundle_documents = time.time(), 0

    def finish_bundle(self) -> None:
        if self._bundle_documents:
            _LOG.info("tokenised %d documents in %.1f s", self._bundle_documents, time.time() - self._bundle_start)

    def process(self, batch: list[tuple[str, list[str]]]) -> Iterator[tuple[tuple[str, int], list]]:
        self._bundle_documents += len(batch)
        by_shard: dict[tuple[str, int], list[TokenizedDocument]] = defaultdict(list)
        for key, lines in batch:
            placed = self._tokenize(key, lines)
            if placed is not None:
                split, document = placed
                shard = shard_of_stream(document.stream, self._config.num_shards_of(split))
                by_shard[(split, shard)].append(document)
        yield from by_shard.items()

    def _tokenize(self, key: str, lines: list[str]) -> tuple[str, TokenizedDocument] | None:
        c = self._config
        texts = [text for text in (normalize_text(line, c.uncased) for line in lines) if text]
        sentences = [ids for ids in self._processor.encode(texts, out_type=int, num_threads=1) if ids] if texts else []
        if not sentences:
            self._counters.add("empty_documents", 1)
            return None
        if c.use_eod:
            sentences.append([self._eod])
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int32, count=len(sentences))
        ids = np.fromiter(itertools.chain.from_iterable(sentences), dtype=np.int32, count=int(lengths.sum()))
        place = place_document(key, c.seed, c.valid_fraction, c.num_streams)
        self._counters.add("documents", 1)
        self._counters.add("tokens", len(ids))
        return place.split, TokenizedDocument(key, place.stream, place.order, ids.tobytes(), lengths.tobytes())


class WriteShard(beam.DoFn):
    """((split, shard), documents) -> the shard file on disk, and its statistics (a dict)."""

    def __init__(self, config: PreprocessConfig, vocab_sha256: str):
        self._config = config
        self._vocab_sha256 = vocab_sha256
        self._builder = None
        self._counters = Counters("records", "masked_tokens", "short_streams", "uncovered_tokens")

    def setup(self) -> None:
        vocab = load_vocab(self._config.vocab, expected_sha256=self._vocab_sha256)
        special = vocab.special_ids
        self._builder = RecordBuilder(self._config.record_config(), vocab.word_start_table(), special.sep, special.cls)

    def process(self, element: tuple[tuple[str, int], Iterable]) -> Iterator[dict]:
        (split, shard), values = element
        c = self._config
        arrival = time.time()
        by_stream: dict[int, list[TokenizedDocument]] = defaultdict(list)
        for documents in values:
            for document in documents or ():  # None: the empty seed every shard gets
                by_stream[document.stream].append(document)
        start = time.time()
        path = FileSystems.join(c.output, c.shard_name(split, shard))
        compression = CompressionTypes.GZIP if c.compression == "gzip" else CompressionTypes.UNCOMPRESSED
        with FileSystems.create(path, mime_type="application/octet-stream", compression_type=compression) as handle:
            streams, totals = self._write_streams(handle, split, shard, by_stream)
        documents = sum(len(docs) for docs in by_stream.values())
        tokens = sum(d.num_tokens for docs in by_stream.values() for d in docs)
        self._counters.add("records", totals["records"])
        self._counters.add("masked_tokens", totals["masked_tokens"])
        _LOG.info("wrote %s: %d records from %d documents (%d tokens) in %.1f s (+%.1f s receiving documents)",
                  path, totals["records"], documents, tokens, time.time() - start, start - arrival)
        yield {"split": split, "shard": shard, "file": c.shard_name(split, shard), "records": totals["records"],
               "tokens": tokens, "masked_tokens": totals["masked_tokens"], "documents": documents,
               "streams": streams}

    def _write_streams(self, handle, split: str, shard: int,
                       by_stream: dict[int, list[TokenizedDocument]]) -> tuple[list[dict], Counter]:
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
            self._counters.add("short_streams", int(count == 0 and len(ids) > 0))
            self._counters.add("uncovered_tokens", max(0, len(ids) - covered))
        return streams, totals


class WriteManifest(beam.DoFn):
    """All shard statistics -> DIR/manifest.json, written atomically once every shard is done."""

    def __init__(self, config: PreprocessConfig, vocab_entry: dict, special_ids: dict):
        self._config = config
        self._vocab_entry = vocab_entry
        self._special_ids = special_ids

    def process(self, shard_stats: list[dict]) -> Iterator[str]:
        manifest = build_manifest(self._config, self._vocab_entry, self._special_ids, shard_stats)
        problems = manifest.validate()
        if problems:
            raise RuntimeError("inconsistent shard statistics: " + "; ".join(problems))
        yield manifest.save(self._config.output)


def build_manifest(config: PreprocessConfig, vocab_entry: dict, special_ids: dict, shard_stats: list[dict]) -> Manifest:
    """The manifest for a finished run from the per-shard statistics."""
    splits = {}
    for split in SPLITS:
        stats = sorted((s for s in shard_stats if s["split"] == split), key=lambda s: s["shard"])
        shards = tuple(
            ShardEntry(file=s["file"], records=s["records"], tokens=s["tokens"], masked_tokens=s["masked_tokens"],
                       documents=s["documents"], streams=tuple(StreamEntry(**stream) for stream in s["streams"]))
            for s in stats)
        splits[split] = SplitEntry(num_shards=config.num_shards_of(split), num_streams=config.num_streams,
                                   shards=shards)
    return Manifest(config=config.to_dict(), vocab=vocab_entry, special_ids=special_ids, splits=splits)


def build_pipeline(pipeline: beam.Pipeline, config: PreprocessConfig, vocab: Vocab, files: list[InputFile]) -> None:
    """Adds every stage of the preprocessing to ``pipeline``."""
    shard_keys = [((split, shard), None) for split in SPLITS for shard in range(config.num_shards_of(split))]
    documents = (
        pipeline
        | "MatchedFiles" >> beam.Create(files)  # Create itself redistributes more than one element
        | "ReadDocuments" >> beam.ParDo(ReadDocuments(config.input_format, config.text_field, config.max_line_bytes))
        | "SpreadDocuments" >> beam.Reshuffle()
        | "Tokenize" >> beam.ParDo(TokenizeDocuments(config, vocab.sha256)))
    every_shard = pipeline | "EveryShard" >> beam.Create(shard_keys, reshuffle=False)
    _ = (
        (documents, every_shard)
        | "WithEmptyShards" >> beam.Flatten()
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(WriteShard(config, vocab.sha256))
        | "AllShards" >> beam.combiners.ToList()
        | "WriteManifest" >> beam.ParDo(WriteManifest(config, vocab.manifest_entry(), vocab.special_ids.to_dict())))
