"""How one split's text streams feed a run's rows, replicas and input pipelines (hosts): the rule of
shards, streams and hosts, checked by `xlnet train` at start-up and by the readers.

The readers (tfrecords/reader.py, tfrecords/mixture.py) give every forward row of the global batch
streams of its own: row r walks the split's non-empty forward streams {i-th : i % rows == r} (with
bi_data its backward partner reads their reversed copies). tf.distribute runs one input pipeline per
host (``InputContext.num_input_pipelines``: a worker of MultiWorkerMirroredStrategy, a host of a TPU
pod), and each pipeline reads the rows of its own replicas only. So:

- every replica needs at least one row (two with bi_data: a forward row and its backward partner):
  the global batch must split evenly over the replicas;
- every forward row needs a stream of its own, so the split needs at least as many non-empty forward
  streams as the global batch has forward rows; then every pipeline has streams, and no two rows,
  replicas or hosts read the same one;
- shard files do not matter: a stream lives in one shard and a host opens the shards of its rows'
  streams, wherever they are, so a directory with fewer shards than hosts is read like any other
  (several hosts read parts of the same file).

Pure Python (no TensorFlow), so the rule reads the same at start-up and in the readers.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tfrecords.errors import UsageError

if TYPE_CHECKING:
    from tfrecords.manifest import Manifest


class InputLayoutError(UsageError):
    """A global batch the data or the replicas cannot feed as the readers lay it out (exit status 2)."""


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    """One micro-step's global batch over a run's replicas and input pipelines.

    ``global_batch`` counts rows summed over replicas (``train.train_batch_size`` or
    ``train.eval_batch_size``), ``batch_field`` is the setting that gave it, for messages."""

    global_batch: int
    replicas: int = 1
    pipelines: int = 1
    bi_data: bool = False
    batch_field: str = "train.train_batch_size"

    @property
    def rows_per_forward_row(self) -> int:
        """Rows a forward row brings into the batch: itself, and with bi_data its backward partner."""
        return 2 if self.bi_data else 1

    @property
    def forward_rows(self) -> int:
        """Forward rows of the global batch: the streams it reads at once."""
        return self.global_batch // self.rows_per_forward_row

    def batch_problem(self) -> str | None:
        """Why the global batch cannot be split evenly over the replicas (into [forward, backward]
        halves with bi_data), or None."""
        step = self.replicas * self.rows_per_forward_row
        if self.global_batch >= step and self.global_batch % step == 0:
            return None
        halves = " into even [forward, backward] halves (bi_data)" if self.bi_data else ""
        return (f"global batch size {self.global_batch} ({self.batch_field}) cannot be split over {self.replicas} "
                f"replica(s){halves}: use a multiple of {step}")

    def per_replica(self) -> int:
        """Rows of one replica's batch; InputLayoutError unless the batch splits evenly."""
        problem = self.batch_problem()
        if problem:
            raise InputLayoutError(problem)
        return self.global_batch // self.replicas

    def describe(self) -> str:
        """The batch's numbers in words: rows per replica and per input pipeline."""
        forward = self.forward_rows
        pipelines = max(1, self.pipelines)
        rows = f"{forward} forward rows (bi_data)" if self.bi_data else f"{forward} rows"
        return (f"{self.batch_field} {self.global_batch} over {self.replicas} replica(s) in {self.pipelines} input "
                f"pipeline(s) has {rows}, {forward // pipelines} per pipeline")

    def largest_batch(self, streams: int) -> int:
        """The largest global batch up to the current one that ``streams`` forward streams can feed
        and the replicas split evenly; 0 when none can."""
        step = self.replicas * self.rows_per_forward_row
        most = min(self.global_batch, streams * self.rows_per_forward_row)
        return most - most % step


def forward_streams(manifest: Manifest, split: str) -> list[int]:
    """The ids of ``split``'s non-empty forward streams, ascending: what the readers hand to rows."""
    entry = manifest.split(split)
    return sorted(stream.stream_id for shard in entry.shards for stream in shard.streams
                  if stream.records > 0 and stream.stream_id < entry.num_streams)


def too_few_streams(forward_rows: int, streams: int) -> str:
    """The sentence of a batch that needs more forward streams than a split has."""
    return (f"the batch needs {forward_rows} forward text streams (one per forward row) but the split has "
            f"{streams}")


def streams_problem(layout: BatchLayout, streams: int, shards: int, where: str) -> str | None:
    """Why ``streams`` non-empty forward streams (in ``shards`` shard files, of ``where``, e.g.
    "--data DIR's train split") cannot feed ``layout``'s rows, with what to preprocess or set
    instead; None when every row has a stream of its own."""
    if layout.forward_rows <= streams:
        return None
    fix = (f"preprocess with `xlnet preprocess --num-streams {layout.forward_rows}` or more (a multiple of "
           f"{layout.forward_rows} gives every row as many streams; --num-shards can be any count up to "
           "--num-streams, it need not match the hosts)")
    largest = layout.largest_batch(streams)
    lower = (f", or lower {layout.batch_field} to {largest}" if largest else
             f"; fewer streams than replicas cannot give every replica a row, whatever {layout.batch_field} is")
    return (f"{where} has {streams} non-empty forward text stream(s) in {shards} shard(s); {layout.describe()}, "
            f"and every forward row reads a stream of its own ({layout.forward_rows} > {streams}): {fix}{lower}")


def layout_problems(layout: BatchLayout, streams: int, shards: int, where: str) -> list[str]:
    """Every reason ``layout`` cannot be fed by ``streams`` forward streams in ``shards`` shards."""
    return [problem for problem in (layout.batch_problem(), streams_problem(layout, streams, shards, where))
            if problem]


def check_layout(layout: BatchLayout, manifests: list[Manifest], split: str, where: str) -> None:
    """Raises InputLayoutError when the ``split`` of ``manifests`` (one directory, or the directories of
    a mixture, whose streams the rows share) cannot feed ``layout``, naming the numbers and the fix."""
    streams = sum(len(forward_streams(manifest, split)) for manifest in manifests)
    shards = sum(len(manifest.split(split).shards) for manifest in manifests)
    problems = layout_problems(layout, streams, shards, where)
    if problems:
        raise InputLayoutError("; ".join(problems))
