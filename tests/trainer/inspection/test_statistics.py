"""The plot of `xlnet inspect DATA_DIR --stats --plot FILE` (trainer/inspection/statistics.py):
written as a PNG, a title on every panel, tick labels that do not run together, legends clear of
the bars, and a valid split a few percent the size of train drawn on scales where it shows."""
from __future__ import annotations

import itertools
from collections import Counter

import matplotlib
import numpy as np
import pytest

from tfrecords.record_config import RecordConfig
from trainer.inspection.statistics import DataStats, SplitStats, plot_statistics, statistics_figure

matplotlib.use("Agg")


def split_stats(name: str, streams: int, stream_length: int, documents: int, seed: int) -> SplitStats:
    rng = np.random.default_rng(seed)
    records = streams * stream_length // 64
    stats = SplitStats(name, {"records": records, "tokens": streams * stream_length, "documents": documents,
                              "masked_tokens": 21 * records}, num_streams=streams)
    stats.records, stats.targets = records, 21 * records
    # targets per record from 8 to 40: more values than a row of tick labels holds
    stats.targets_per_record = Counter({k: int(rng.integers(1, 50)) for k in range(8, 41)})
    stats.span_lengths = Counter({1: 57 * records, 2: 20 * records, 3: 12 * records, 4: 7 * records,
                                  5: 4 * records, 6: 1, 9: 1})
    stats.tokens_in_records, stats.unknown = streams * stream_length, streams * stream_length // 5000
    stats.document_ends = documents
    stats.document_lengths = [int(x) for x in rng.lognormal(5, 0.8, documents)]
    # six-digit stream lengths: the labels that ran together on a linear axis
    stats.stream_lengths = {s: int(stream_length * rng.uniform(0.9, 1.1)) for s in range(streams)}
    return stats


@pytest.fixture(scope="module")
def stats() -> DataStats:
    splits = {"train": split_stats("train", 16, 130_000, 10_600, 0), "valid": split_stats("valid", 16, 7_500, 600, 1)}
    return DataStats("/data/demo", splits, RecordConfig(seq_len=128, reuse_len=64, num_predict=21), True, True)


@pytest.fixture(scope="module")
def drawn(stats):
    import matplotlib.pyplot as plt

    figure = statistics_figure(stats)
    figure.canvas.draw()
    yield figure
    plt.close(figure)


def test_the_plot_is_written_as_a_png(stats, tmp_path):
    path = tmp_path / "stats.png"
    plot_statistics(stats, str(path))
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_every_panel_has_a_title_and_axis_labels(drawn):
    assert len(drawn.axes) == 6
    for axis in drawn.axes:
        assert axis.get_title(), axis
        assert axis.get_ylabel(), axis.get_title()


def test_tick_labels_do_not_run_together(drawn):
    renderer = drawn.canvas.get_renderer()
    for axis in drawn.axes:
        for ticks in (axis.get_xticklabels(), axis.get_yticklabels()):
            boxes = [label.get_window_extent(renderer) for label in ticks if label.get_visible() and label.get_text()]
            for first, second in itertools.combinations(boxes, 2):
                assert not first.overlaps(second), (axis.get_title(), [t.get_text() for t in ticks])


def test_legends_cover_no_bar(drawn):
    from matplotlib.patches import Rectangle

    renderer = drawn.canvas.get_renderer()
    assert len(drawn.legends) == 1, "one legend for the splits' colours"
    box = drawn.legends[0].get_window_extent(renderer)
    for axis in drawn.axes:  # the figure's legend stays outside every panel
        assert not box.overlaps(axis.get_tightbbox(renderer)), axis.get_title()
    for axis in drawn.axes:  # a panel's own legend covers none of its bars and marks
        if axis.get_legend():
            box = axis.get_legend().get_window_extent(renderer)
            drawn_items = [bar for bar in axis.patches if isinstance(bar, Rectangle) and bar.get_height() > 0]
            for item in drawn_items + axis.lines:
                assert not box.overlaps(item.get_window_extent(renderer)), axis.get_title()


def test_splits_of_very_different_sizes_are_compared_as_shares_or_on_a_log_scale(drawn):
    panels = {axis.get_title(): axis for axis in drawn.axes}
    streams = next(axis for title, axis in panels.items() if title.startswith("stream lengths"))
    documents = next(axis for title, axis in panels.items() if title.startswith("document lengths"))
    assert streams.get_xscale() == "log" and "log scale" in streams.get_xlabel()
    assert "share" in documents.get_ylabel()
    # each split's histogram sums to 1 (its own documents), however few the valid split has
    # (a step outline's vertices: (x0, 0), (x0, h0), (x1, h0), (x1, h1), ..., (xn, 0))
    sums = [float(patch.get_xy()[1:-1:2, 1].sum()) for patch in documents.patches]
    assert sums == [pytest.approx(1.0)] * 2


def test_the_title_names_the_directory_not_its_absolute_path(drawn):
    assert drawn._suptitle.get_text() == "xlnet inspect --stats demo"  # DataStats("/data/demo", ...)


def test_the_span_panel_says_why_short_runs_top_the_configured_share(drawn):
    from matplotlib.patches import Rectangle

    from trainer.inspection.statistics import SPAN_NOTE

    renderer = drawn.canvas.get_renderer()
    spans = next(axis for axis in drawn.axes if axis.get_title().startswith("span lengths"))
    note = next(text for text in spans.texts if text.get_text() == SPAN_NOTE)
    assert "shorter than the drawn n-grams" in SPAN_NOTE  # the reason docs/inspect.md gives
    box = note.get_window_extent(renderer)
    assert box.x0 >= spans.get_window_extent(renderer).x0 and box.x1 <= spans.get_window_extent(renderer).x1
    for bar in [bar for bar in spans.patches if isinstance(bar, Rectangle) and bar.get_height() > 0]:
        assert not box.overlaps(bar.get_window_extent(renderer))
    for line in spans.lines:  # the configured share's marks
        assert not any(box.contains(x, y) for x, y in spans.transData.transform(line.get_xydata()))
    assert not box.overlaps(spans.get_legend().get_window_extent(renderer))
