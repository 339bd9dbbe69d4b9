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
import posixpath
from collections import Counter
from typing import Any, Callable

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
    stats.span_lengths.update(span_run_lengths(masked[forward], parsed["word_start"][forward].astype(bool), reuse,
                                           subword).tolist())
    special = data.manifest.special_ids
    for row in np.flatnonzero(forward):
        ids, stream = parsed["input_ids"][row], int(parsed["stream_id"][row])
        text = ids[:reuse]
        if int(parsed["stream_pos"][row]) == last_pos[stream]:  # the stream's last record: its A (and B) too
            sep = int(np.count_nonzero(parsed["segment_ids"][row] == SEG_A)) - 1
            text = np.concatenate([ids[:sep], ids[sep + 1:-2] if parsed["label"][row] == 1 else ids[:0]])
        count_text(stats, stream, text, int(special["unk"]), int(special["eod"]))


def count_text(stats: SplitStats, stream: int, text: np.ndarray, unk: int, eod: int) -> None:
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


def span_run_lengths(masked: np.ndarray, word_start: np.ndarray, reuse: int, subword: bool) -> np.ndarray:
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
    draw_png(lambda: statistics_figure(stats), path)


def draw_png(draw: Callable[[], Any], path: str) -> None:
    """The matplotlib Figure ``draw`` returns, drawn with the Agg backend (no display needed) into a PNG at
    ``path`` through tf.io.gfile (gs:// works): every `xlnet inspect --plot`. ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import tensorflow as tf

    figure = draw()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(buffer.getvalue())


def statistics_figure(stats: DataStats):
    """The six panels of ``plot_statistics`` as a matplotlib Figure. Every split keeps one colour
    in every panel (one legend for the figure, above the panels). Splits differ in size (valid is a
    few percent of train), so no panel compares raw counts: distributions are shares of each split's
    own records, spans or documents, and stream lengths are on a log scale."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    figure, axes = plt.subplots(2, 3, figsize=(15, 9))
    names = list(stats.splits)
    colours = {name: f"C{index}" for index, name in enumerate(names)}
    _bars(axes[0, 0], {name: {k: _rate(v, s.records) for k, v in _sorted(s.targets_per_record).items()}
                       for name, s in stats.splits.items()}, colours)
    _panel(axes[0, 0], "targets per record", "targets in the record", "share of the split's records")
    unit = "pieces" if stats.config.subword_spans else "words"
    _span_panel(axes[0, 1], stats, colours, unit)
    _document_panel(axes[0, 2], stats, colours)
    _stream_panel(axes[1, 0], stats, colours)
    _share_panel(axes[1, 1], stats, colours)
    unknown = [100 * _rate(stats.splits[n].unknown, stats.splits[n].tokens_in_records) for n in names]
    bars = axes[1, 2].bar(names, unknown, color=[colours[n] for n in names], width=0.6)
    axes[1, 2].bar_label(bars, [f"{u:.3f}%" for u in unknown], padding=2)
    axes[1, 2].set_ylim(0, 1.2 * max(unknown + [1e-3]))
    _panel(axes[1, 2], "unknown pieces", "split", "% of the tokens the records reach")
    # The directory's own name: an absolute path (what a script passes) would fill the title.
    figure.suptitle(f"xlnet inspect --stats {posixpath.basename(stats.directory.rstrip('/')) or stats.directory}",
                    fontsize=13)
    figure.legend(handles=[Patch(color=colours[n], label=n) for n in names], loc="upper center", ncol=len(names),
                  bbox_to_anchor=(0.5, 0.955), frameon=False, fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.93), h_pad=2.5, w_pad=2.0)
    return figure


def _panel(axis, title: str, xlabel: str, ylabel: str) -> None:
    axis.set_title(title, fontsize=12)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.grid(axis="y", alpha=0.3)
    axis.set_axisbelow(True)


def _bars(axis, series: dict[str, dict[int, float]], colours: dict[str, str],
          series_drawn: int | None = None) -> list[int]:
    """Grouped bars of the first ``series_drawn`` (default all) {x: height} series, one colour each,
    over the x values of all of them; at most about 12 x tick labels. Returns the x values in order
    (bar group ``i`` is centred at ``i``)."""
    xs = sorted({x for values in series.values() for x in values})
    drawn = list(series.items())[:series_drawn]
    width = 0.8 / max(1, len(drawn))
    for index, (name, values) in enumerate(drawn):
        offset = (index - (len(drawn) - 1) / 2) * width
        axis.bar(np.arange(len(xs)) + offset, [values.get(x, 0) for x in xs], width, color=colours[name])
    step = max(1, int(np.ceil(len(xs) / 12)))
    axis.set_xticks(np.arange(len(xs))[::step], [str(x) for x in xs][::step])
    axis.set_xlim(-0.6, len(xs) - 0.4)
    return xs


SPAN_NOTE = ("observed runs are shorter than the drawn n-grams:\na span cut to the remaining budget, and the "
             "single\ntokens that top the budget up, count as short runs")


def _span_panel(axis, stats: DataStats, colours: dict[str, str], unit: str) -> None:
    """Observed span lengths per split (bars) against the configured p(n) ~ 1/n (a black mark over
    each group of bars, n <= max_gram)."""
    shares = {name: {n: _rate(c, sum(s.span_lengths.values())) for n, c in _sorted(s.span_lengths).items()}
              for name, s in stats.splits.items()}
    configured = stats.span_distribution()
    xs = _bars(axis, {**shares, "configured": {n: 0.0 for n in configured}}, {**colours, "configured": "none"},
               series_drawn=len(shares))
    axis.plot([xs.index(n) for n in configured], list(configured.values()), "k_", markersize=24,
              markeredgewidth=2.5, label=f"configured p(n) ~ 1/n, n <= {stats.config.max_gram}")
    axis.legend(loc="upper right", fontsize=9)
    # Why the observed n = 1 share tops the configured one (docs/inspect.md), on the figure itself.
    axis.text(0.98, 0.80, SPAN_NOTE, transform=axis.transAxes, ha="right", va="top", fontsize=8, color="0.3")
    _panel(axis, "span lengths, observed and configured (forward streams)", f"span length ({unit})",
           "share of the split's spans")


def _document_panel(axis, stats: DataStats, colours: dict[str, str]) -> None:
    """Document lengths as each split's share of documents per bin, log-spaced bins."""
    import matplotlib.ticker as ticker

    values = {name: np.asarray(s.document_lengths) for name, s in stats.splits.items() if s.document_lengths}
    if values:
        smallest = min(int(v.min()) for v in values.values())
        largest = max(int(v.max()) for v in values.values())
        bins = np.unique(np.geomspace(max(smallest, 1), max(largest, smallest + 1) + 1, 30).round())
        for name, lengths in values.items():
            axis.hist(lengths, bins=bins, weights=np.full(len(lengths), 1 / len(lengths)), histtype="step",
                      linewidth=2, color=colours[name])
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(ticker.FuncFormatter(_tokens))
    else:
        axis.text(0.5, 0.5, "no document ends inside the records", ha="center", transform=axis.transAxes)
    _panel(axis, "document lengths (each split's own share)", "document length (tokens, log scale)",
           "share of the split's documents")


def _stream_panel(axis, stats: DataStats, colours: dict[str, str]) -> None:
    """Every stream's length as a dot on a log scale, one row per split, with the split's median."""
    import matplotlib.ticker as ticker

    names = list(stats.splits)
    rng = np.random.default_rng(0)
    for row, name in enumerate(names):
        lengths = np.asarray(list(stats.splits[name].stream_lengths.values()))
        if len(lengths):
            axis.scatter(lengths, row + rng.uniform(-0.18, 0.18, len(lengths)), s=18, alpha=0.7,
                         color=colours[name])
            median = float(np.median(lengths))
            axis.plot([median, median], [row - 0.32, row + 0.32], color="black", linewidth=2)
            axis.annotate(f"median {_tokens(median)}", (median, row - 0.36), ha="center", fontsize=9)
    axis.set_xscale("log")
    axis.xaxis.set_major_formatter(ticker.FuncFormatter(_tokens))
    axis.xaxis.set_minor_formatter(ticker.NullFormatter())
    axis.set_yticks(range(len(names)), names)
    axis.set_ylim(len(names) - 0.2, -0.6)  # the first split on top
    axis.margins(x=0.15)
    _panel(axis, "stream lengths (one dot per forward stream)", "tokens the stream's records reach (log scale)",
           "split")
    axis.grid(axis="x", which="major", alpha=0.3)


def _share_panel(axis, stats: DataStats, colours: dict[str, str]) -> None:
    """Each split's share of the records, tokens and documents, stacked to 100%, labelled."""
    share = stats.shares()
    keys = ("records", "tokens", "documents")
    bottom = np.zeros(len(keys))
    for name in stats.splits:
        values = 100 * np.array([share[name][key] for key in keys])
        axis.bar(keys, values, bottom=bottom, color=colours[name], width=0.6)
        for x, (value, base) in enumerate(zip(values, bottom)):
            if value > 0:  # inside a segment tall enough to hold it, else just above the bar
                y, style = (base + value / 2, "white") if value >= 8 else (base + value + 1, "black")
                axis.text(x, y, f"{value:.1f}%", ha="center", va="center" if value >= 8 else "bottom",
                          color=style, fontsize=9)
        bottom += values
    axis.set_ylim(0, 112)
    axis.set_yticks(range(0, 101, 20))
    _panel(axis, "split shares (the manifest's counts)", "", "% of all splits")


def _tokens(value: float, _position=None) -> str:
    """A tick label for a token count, three significant digits at most: 800, 7.53k, 130k, 1.5M."""
    if value >= 1e6:
        return f"{value / 1e6:.3g}M"
    if value >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"
