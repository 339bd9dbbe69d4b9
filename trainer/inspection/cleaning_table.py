"""The cleaning a data directory went through (`xlnet inspect DATA_DIR --cleaning`), read from its manifest.

`xlnet preprocess --languages`, `--filters` and `--dedup` record their settings in the manifest's config and,
per stage, the documents and UTF-8 bytes in, removed and kept in its counters (``in_documents_gopher``,
``removed_bytes_near``, ...; docs/data-format.md). The stages are listed in the order they ran: the language
stage, the filters (already in their running order in the config), then exact, near and line dedup. Nothing is
recomputed here: the table is what the run counted.
"""
from __future__ import annotations

import dataclasses
import posixpath

from tfrecords.manifest import Manifest
from trainer.inspection.statistics import draw_png

COUNTED = ("in", "removed", "kept")
KINDS = ("documents", "bytes")
# The near-duplicate settings, as the manifest's config names them, and as --minhash calls them.
MINHASH_SETTINGS = {"shingle_words": "shingle_words", "minhash_bands": "bands", "minhash_rows": "rows",
                    "min_jaccard": "min_jaccard"}


@dataclasses.dataclass(frozen=True)
class StageRow:
    """One stage's line of the table: its counters (``in_documents``, ``removed_bytes``, ...) and settings."""

    stage: str
    counts: dict[str, int]
    settings: str

    def to_json(self) -> dict:
        return {"stage": self.stage, **self.counts, "settings": self.settings}


@dataclasses.dataclass(frozen=True)
class CleaningTable:
    """The cleaning of one data directory: its stages in running order, the documents read, the audit's place."""

    directory: str
    documents_read: int
    rows: tuple[StageRow, ...]
    removed: str

    def to_json(self) -> dict:
        return {"directory": self.directory, "documents_read": self.documents_read,
                "stages": [row.to_json() for row in self.rows], **({"removed": self.removed} if self.removed else {})}

    def to_text(self) -> str:
        header = ["stage", *(f"{kind} {what}" for kind in KINDS for what in COUNTED), "settings"]
        body = [[row.stage, *(f"{row.counts[f'{what}_{kind}']:,}" for kind in KINDS for what in COUNTED),
                 row.settings] for row in self.rows]
        widths = [max(len(line[column]) for line in [header, *body]) for column in range(len(header) - 1)]
        lines = [f"cleaning of {self.directory}: {self.documents_read:,} documents read"]
        for line in [header, *body]:
            cells = [line[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(line[1:-1], widths[1:])]
            lines.append("  ".join(cells + [line[-1]]).rstrip())
        if self.removed:
            lines.append(f"removed documents listed in {self.removed}")
        return "\n".join(lines)


def stages_of(config: dict) -> tuple[str, ...]:
    """The cleaning stages a run's config names, in the order they ran."""
    return (("language",) if config.get("languages") else ()) + tuple(config.get("filters", ())) + \
        tuple(config.get("dedup", ()))


def _settings(stage: str, config: dict, counters: dict) -> str:
    """What a stage ran with, as the flags say it (a filter: the thresholds --filter-rules changed, else the
    defaults; the line stage: the lines it dropped from the pages it kept)."""
    if stage == "language":
        return f"languages {','.join(config['languages'])}, threshold {config.get('language_threshold')}"
    if stage == "near":
        return ", ".join(f"{flag}={config[name]}" for name, flag in MINHASH_SETTINGS.items() if name in config)
    if stage == "exact":
        return f"seed {config.get('seed')}"
    if stage == "lines":
        dropped = int(counters.get("duplicate_lines_removed", 0))
        return f"seed {config.get('seed')}, {dropped:,} lines dropped from pages kept"
    rules = config.get("filter_rules")
    changed = [f"{key.partition('.')[2]}={value}" for key, value in sorted(rules.items())
               if str(key).startswith(f"{stage}.")] if isinstance(rules, dict) else []
    return f"defaults but {', '.join(changed)}" if changed else "defaults (docs/preprocessing.md, Cleaning)"


def cleaning_table(manifest: Manifest) -> CleaningTable | None:
    """The table of a manifest's cleaning; None when the run cleaned nothing."""
    stages = stages_of(manifest.config)
    if not stages:
        return None
    counters = manifest.counters or {}
    rows = tuple(StageRow(stage, {f"{what}_{kind}": int(counters.get(f"{what}_{kind}_{stage}", 0))
                                  for kind in KINDS for what in COUNTED},
                          _settings(stage, manifest.config, counters))
                 for stage in stages)
    return CleaningTable(manifest.directory, int(counters.get("documents_read", 0)), rows,
                         manifest.config.get("removed", ""))


def no_cleaning_line(manifest: Manifest) -> str:
    """What --cleaning says of a directory preprocessed without cleaning."""
    return (f"{manifest.directory} was preprocessed without cleaning (no --languages, --filters or --dedup): "
            "every document read was kept")


def plot_cleaning(table: CleaningTable, path: str) -> None:
    """Draws the table as one PNG (statistics.py's draw_png: gs:// works): per stage, the documents and the
    bytes kept and removed."""
    draw_png(lambda: cleaning_figure(table), path)


def cleaning_figure(table: CleaningTable):
    """Two panels, documents and bytes: a horizontal bar per stage (first at the top), kept and removed stacked,
    so that each bar is what entered the stage and the bars shrink as the stages run."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(13, 1.2 + 0.7 * len(table.rows)))
    stages = [row.stage for row in table.rows]
    for axis, kind in zip(axes, KINDS):
        kept = [row.counts[f"kept_{kind}"] for row in table.rows]
        removed = [row.counts[f"removed_{kind}"] for row in table.rows]
        axis.barh(stages, kept, color="C0", label="kept")
        bars = axis.barh(stages, removed, left=kept, color="C3", label="removed")
        axis.bar_label(bars, [f"-{r / max(r + k, 1):.1%}" for r, k in zip(removed, kept)], padding=3)
        axis.invert_yaxis()
        axis.set_xlim(0, 1.15 * max([r + k for r, k in zip(removed, kept)] + [1]))
        axis.set_title(f"{kind} per stage", fontsize=12)
        axis.set_xlabel(f"{kind}: kept, then removed")
        axis.grid(axis="x", alpha=0.3)
        axis.set_axisbelow(True)
    axes[0].legend(loc="lower right")
    figure.suptitle(f"xlnet inspect --cleaning {posixpath.basename(table.directory.rstrip('/')) or table.directory}",
                    fontsize=13)
    figure.tight_layout()
    return figure
