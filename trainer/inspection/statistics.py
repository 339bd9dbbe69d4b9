"""Statistics of a whole data directory (`xlnet inspect DATA_DIR --stats`), read from every record.

Every shard is read through with the checks of `--verify` (tfrecords/verification.py); a damaged
record stops the count with ``DamagedDataError`` naming the file and the record. What is counted:

* records and targets (``is_masked``) per split, which must equal the manifest's ``records`` and
  ``masked_tokens`` (a difference is damaged data);
* targets per record (mean, histogram);
* span lengths: runs of consecutive targets inside one part (memory-reuse part or A/B part) of the
  forward streams' records, in words (word starts inside the run; pieces with ``subword_spans``),
  against the configured ``p(n) ~ 1/n`` for ``n <= max_gram`` (tfrecords/span_masking.py). Spans
  that touch merge into one run, spans shortened to fit the budget and the top-up singles shift the
  observed shares towards short runs;
* the text the records reach: a forward stream's records tile its text with their memory-reuse
  parts (record k+1 starts ``reuse_len`` tokens after record k), and its last record adds its A (and
  B, when B continues A). Tokens past that (a tail shorter than a record) are in the manifest's
  ``tokens`` but in no record. Over that text: the unknown-piece rate, the documents (``<eod>``
  ends one) and their lengths, the streams' lengths;
* the manifest's own counts beside them, and the splits' shares.
"""
from __future__ import annotations

import dataclasses
import io
from collections import Counter
from typing import Any

import numpy as np

from tfrecords.manifest import ShardEntry
from tfrecords.record_config import RecordConfig
from tfrecords.schema import SEG_A, parse_records
from tfrecords.verification import DamagedDataError, record_checker, scan_records
from trainer.inspection.records import DataDirectory


@dataclasses.dataclass
class SplitStats:
    """What one split's records hold (see the module docstring)."""

    split: str
    manifest_totals: dict[str, int]
    num_streams: int
    records: int = 0
    targets: int = 0
    targets_per_record: Counter = dataclasses.field(default_factory=Counter)
    span_lengths: Counter = dataclasses.field(default_factory=Counter)
    tokens_in_records: int = 0
    unknown: int = 0
    document_ends: int = 0
    document_lengths: list[int] = dataclasses.field(default_factory=list)
    stream_lengths: dict[int, int] = dataclasses.field(default_factory=dict)
    _open_document: dict[int, int] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return {"records": self.records, "targets": self.targets, "manifest": self.manifest_totals,
                "targets_per_record": {"mean": self.records and self.targets / self.records,
                                       "histogram": _sorted(self.targets_per_record)},
                "span_lengths": _sorted(self.span_lengths), "tokens_in_records": self.tokens_in_records,
                "unknown_pieces": self.unknown, "unknown_rate": _rate(self.unknown, self.tokens_in_records),
                "documents_ending_in_records": self.document_ends,
                "document_lengths": _summary(self.document_lengths),
                "stream_lengths": _summary(list(self.stream_lengths.values())),
                "streams": {str(s): n for s, n in sorted(self.stream_lengths.items())}}


@dataclasses.dataclass(frozen=True)
class DataStats:
    """Every split's statistics and the configured span distribution."""

    directory: str
    splits: dict[str, SplitStats]
    config: RecordConfig
    use_eod: bool
    bi_data: bool

    def span_distribution(self) -> dict[int, float]:
        """The configured ``p(n) ~ 1/n`` for ``n`` in ``1..max_gram``."""
        weights = 1.0 / np.arange(1, self.config.max_gram + 1)
        return {n + 1: float(w) for n, w in enumerate(weights / weights.sum())}

    def shares(self) -> dict[str, dict[str, float]]:
        """Each split's share of the records, tokens and documents (the manifest's counts)."""
        keys = ("records", "tokens", "documents")
        totals = {key: sum(s.manifest_totals[key] for s in self.splits.values()) for key in keys}
        return {name: {key: _rate(s.manifest_totals[key], totals[key]) for key in keys}
                for name, s in self.splits.items()}

    def to_json(self) -> dict:
        return {"directory": self.directory, "splits": {name: s.to_json() for name, s in self.splits.items()},
                "configured_span_lengths": {str(n): p for n, p in self.span_distribution().items()},
                "unit": "pieces" if self.config.subword_spans else "words", "shares": self.shares()}

    def to_text(self) -> str:
        lines = [f"statistics of {self.directory}"]
        for s in self.splits.values():
            lines += self._split_text(s)
        lines.append("split shares (of the manifest's counts):")
        for name, share in self.shares().items():
            lines.append(f"  {name}: " + ", ".join(f"{100 * v:.1f}% of the {k}" for k, v in share.items()))
        return "\n".join(lines)

    def _split_text(self, s: SplitStats) -> list[str]:
        m, unit = s.manifest_totals, "pieces" if self.config.subword_spans else "words"
        mean = s.targets / s.records if s.records else 0.0
        lines = [f"{s.split}: {s.records} records (manifest {m['records']}), {s.num_streams} streams"
                 + (" and their reversed copies" if self.bi_data else ""),
                 f"  tokens: {m['tokens']} in the manifest, {s.tokens_in_records} "
                 f"({100 * _rate(s.tokens_in_records, m['tokens']):.1f}%) reached by the forward streams' records",
                 f"  documents: {m['documents']} in the manifest, "
                 + (f"{s.document_ends} end inside the records (a stream's last one ends in its tail)"
                    if self.use_eod else "not marked (use_eod off)"),
                 f"  targets: {s.targets} (manifest masked_tokens {m['masked_tokens']}); per record: mean {mean:.2f}, "
                 "histogram " + ", ".join(f"{k}: {v}" for k, v in _sorted(s.targets_per_record).items()),
                 f"  span lengths in {unit} (forward streams): n, spans, share, configured share"]
        total = sum(s.span_lengths.values())
        configured = self.span_distribution()
        for n in sorted(set(s.span_lengths) | set(configured)):
            share = _rate(s.span_lengths.get(n, 0), total)
            lines.append(f"    {n:>3} {s.span_lengths.get(n, 0):>8} {100 * share:6.1f}%"
                         + (f" {100 * configured[n]:6.1f}%" if n in configured else "      -"))
        lines.append(f"  unknown pieces: {s.unknown} of {s.tokens_in_records} tokens "
                     f"({100 * _rate(s.unknown, s.tokens_in_records):.3f}%)")
        for name, values in (("document lengths", s.document_lengths),
                             ("stream lengths", list(s.stream_lengths.values()))):
            summary = _summary(values)
            lines.append(f"  {name} (tokens, {summary['count']}): " + (
                f"min {summary['min']}, median {summary['median']:g}, mean {summary['mean']:.1f}, max {summary['max']}"
                if values else "none"))
        return lines


def _sorted(counter: Counter) -> dict[int, int]:
    return {int(k): int(counter[k]) for k in sorted(counter)}


def _rate(part: float, whole: float) -> float:
    return float(part) / whole if whole else 0.0


def _summary(values: list[int]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    array = np.asarray(values)
    return {"count": len(values), "min": int(array.min()), "median": float(np.median(array)),
            "mean": float(array.mean()), "max": int(array.max())}


def data_statistics(data: DataDirectory) -> DataStats:
    """Reads every record of every split (see the module docstring)."""
    manifest = data.manifest
    splits = {}
    for name, entry in manifest.splits.items():
        stats = SplitStats(name, entry.totals, entry.num_streams)
        for shard in entry.shards:
            _read_shard(data, stats, shard)
        splits[name] = stats
    return DataStats(manifest.directory, splits, RecordConfig.from_mapping(manifest.config),
                     bool(manifest.config.get("use_eod", True)), manifest.bi_data)


def _read_shard(data: DataDirectory, stats: SplitStats, shard: ShardEntry) -> None:
    import tensorflow as tf

    manifest = data.manifest
    path = manifest.shard_path(shard)
    if not tf.io.gfile.exists(path):
        raise DamagedDataError(f"{path}: missing (the manifest lists it, the directory lacks it)")
    check = record_checker(shard, manifest.seq_len, data.vocab.vocab_size)
    last_pos = {stream.stream_id: stream.records - 1 for stream in shard.streams}
    targets_before = stats.targets

    def collect(start: int, batch):
        bad = check(start, batch)
        if bad is None:
            parsed = {k: v.numpy() for k, v in parse_records(batch, manifest.seq_len).items()}
            _count(data, stats, parsed, last_pos)
        return bad

    read, bad = scan_records(path, manifest.compression_type, collect)
    if bad is not None:
        raise DamagedDataError(f"{path}: record {bad.index}: {bad.problem}")
    if read != shard.records:
        raise DamagedDataError(f"{path}: the file ends after {read} records, the manifest says {shard.records}")
    if stats.targets - targets_before != shard.masked_tokens:
        raise DamagedDataError(f"{path}: {stats.targets - targets_before} targets, the manifest says "
                               f"{shard.masked_tokens} masked_tokens")


def _count(data: DataDirectory, stats: SplitStats, parsed: dict[str, np.ndarray], last_pos: dict[int, int]) -> None:
    """Adds one parsed batch of records to ``stats``."""
    masked = parsed["is_masked"].astype(bool)
    per_record = masked.sum(axis=1)
    stats.records += len(per_record)
    stats.targets += int(per_record.sum())
    stats.targets_per_record.update(per_record.tolist())
    forward = parsed["stream_id"] < stats.num_streams
    if not forward.any():
        return
    reuse = data.manifest.reuse_len
    subword = bool(data.manifest.config.get("subword_spans", False))
    stats.span_lengths.update(_run_lengths(masked[forward], parsed["word_start"][forward].astype(bool), reuse,
                                           subword).tolist())
    special = data.manifest.special_ids
    for row in np.flatnonzero(forward):
        ids, stream = parsed["input_ids"][row], int(parsed["stream_id"][row])
        text = ids[:reuse]
        if int(parsed["stream_pos"][row]) == last_pos[stream]:  # the stream's last record: its A (and B) too
            sep = int(np.count_nonzero(parsed["segment_ids"][row] == SEG_A)) - 1
            text = np.concatenate([ids[:sep], ids[sep + 1:-2] if parsed["label"][row] == 1 else ids[:0]])
        _count_text(stats, stream, text, int(special["unk"]), int(special["eod"]))


def _count_text(stats: SplitStats, stream: int, text: np.ndarray, unk: int, eod: int) -> None:
    """Adds the next piece of a forward stream's text: tokens, unknown pieces, documents."""
    stats.tokens_in_records += len(text)
    stats.stream_lengths[stream] = stats.stream_lengths.get(stream, 0) + len(text)
    stats.unknown += int(np.count_nonzero(text == unk))
    ends = np.flatnonzero(text == eod)
    previous = -1
    for end in ends:  # a document runs from the previous <eod> (or the stream's start) to its <eod>
        stats.document_lengths.append(stats._open_document.pop(stream, 0) + int(end - previous))
        previous = int(end)
    stats.document_ends += len(ends)
    stats._open_document[stream] = stats._open_document.get(stream, 0) + len(text) - 1 - previous


def _run_lengths(masked: np.ndarray, word_start: np.ndarray, reuse: int, subword: bool) -> np.ndarray:
    """Lengths of the runs of targets in [R, seq_len] masks, never across the two parts; in words
    (word starts inside the run, at least 1) or, with ``subword``, in pieces."""
    gap = np.zeros((len(masked), 1), bool)
    flags = np.concatenate([masked[:, :reuse], gap, masked[:, reuse:], gap], axis=1).ravel()
    starts = np.concatenate([word_start[:, :reuse], gap, word_start[:, reuse:], gap], axis=1).ravel()
    opens = flags & ~np.concatenate([[False], flags[:-1]])
    run = np.cumsum(opens)[flags] - 1
    if len(run) == 0:
        return np.zeros(0, np.int64)
    if subword:
        return np.bincount(run)
    return np.maximum(np.bincount(run, weights=starts[flags]).astype(np.int64), 1)


def plot_statistics(stats: DataStats, path: str) -> None:
    """Draws the statistics as one PNG (Agg backend) written through tf.io.gfile (gs:// works).
    ImportError when matplotlib is not installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import tensorflow as tf

    figure, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    names = list(stats.splits)
    _bars(axes[0, 0], {name: {k: _rate(v, s.records) for k, v in _sorted(s.targets_per_record).items()}
                       for name, s in stats.splits.items()}, "targets per record", "share of records")
    configured = stats.span_distribution()
    shares = {name: {n: _rate(c, sum(s.span_lengths.values())) for n, c in _sorted(s.span_lengths).items()}
              for name, s in stats.splits.items()}
    _bars(axes[0, 1], {**shares, "configured p(n) ~ 1/n": configured},
          f"span length ({'pieces' if stats.config.subword_spans else 'words'})", "share of spans")
    for axis, attribute, label in ((axes[0, 2], "document_lengths", "document length (tokens)"),
                                   (axes[1, 0], "stream_lengths", "stream length (tokens reached by records)")):
        for name in names:
            values = getattr(stats.splits[name], attribute)
            values = list(values.values()) if isinstance(values, dict) else values
            if values:
                axis.hist(values, bins=30, alpha=0.6, label=name)
        axis.set_xlabel(label)
        axis.set_ylabel("count")
        axis.legend()
    share = stats.shares()
    keys = ("records", "tokens", "documents")
    bottom = np.zeros(len(keys))
    for name in names:
        values = np.array([share[name][key] for key in keys])
        axes[1, 1].bar(keys, values, bottom=bottom, label=name)
        bottom += values
    axes[1, 1].set_title("split shares")
    axes[1, 1].legend()
    unknown = [100 * _rate(stats.splits[n].unknown, stats.splits[n].tokens_in_records) for n in names]
    axes[1, 2].bar(names, unknown)
    axes[1, 2].set_title("unknown pieces (% of tokens)")
    figure.suptitle(f"xlnet inspect --stats {stats.directory}")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(buffer.getvalue())


def _bars(axis, series: dict[str, dict[int, float]], xlabel: str, ylabel: str) -> None:
    """Grouped bars of several {x: height} series."""
    xs = sorted({x for values in series.values() for x in values})
    width = 0.8 / max(1, len(series))
    for index, (name, values) in enumerate(series.items()):
        axis.bar(np.arange(len(xs)) + index * width, [values.get(x, 0) for x in xs], width, label=name)
    axis.set_xticks(np.arange(len(xs)) + 0.4 - width / 2, [str(x) for x in xs])
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.legend()
