"""`xlnet preprocess --filters`: the quality and repetition filters applied to each document as it is read.

A document is its lines joined by newlines (paragraphs, as the corpus formats give them). The filters
named run in the order FineWeb's recipe runs them, whatever the order given: Gopher (repetition, then
quality), C4 (which also drops the lines it does not keep), FineWeb. A document's removal reason is
the first rule that removed it, named ``stage:rule`` (``gopher:gopher_short_doc``); the counters the
manifest records are per stage (``removed_documents_gopher``, ``removed_bytes_gopher``: the UTF-8
bytes of the removed documents' text). The rules themselves: pipeline/quality_filters.py.

``--dedup exact`` then removes exact duplicates (pipeline/near_duplicates.py's ``exact_key``: the text with
case, width, punctuation and spacing simplified): every copy but the one with the least seeded hash of
its key (``keep_rank``), whatever order the copies arrive in, counted as ``removed_documents_exact``.
``--dedup near`` removes near duplicates among the documents exact dedup kept (MinHash LSH, pipeline/near_duplicates.py;
the Beam stages in pipeline/beam_pipeline.py), counted as ``removed_documents_near``.

Off by default: without ``--filters`` and ``--dedup`` nothing here runs and the output is byte for byte
what it was.
"""
from __future__ import annotations

from typing import Callable, Optional

from pipeline import quality_filters as rules
from tfrecords.record_config import ConfigError

# In the order they run.
FILTERS = ("gopher", "c4", "fineweb")
# `--dedup`: the duplicate removals, after the filters, in their running order (exact first: a document it
# removed is no near-duplicate candidate).
DEDUP = ("exact", "near")


# Each flag's known names, in their running order, and what one of them is called in an error.
CHOICES = {"--filters": (FILTERS, "filter"), "--dedup": (DEDUP, "kind")}


def parse_names(flag: str, text: str) -> tuple[str, ...]:
    """``flag``'s value (comma-separated names) as the names to run, in their running order; a
    ConfigError naming the flag for an unknown name or none."""
    known, noun = CHOICES[flag]
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise ConfigError(f"{flag} {text!r}: {f'unknown {noun} {unknown[0]!r}' if unknown else f'no {noun} named'}; "
                          f"the {noun}s are {', '.join(known)}")
    return tuple(name for name in known if name in names)


def check_names(flag: str, names: tuple[str, ...]) -> None:
    """ConfigError naming ``flag`` for a name of a configuration that it does not know."""
    known, noun = CHOICES[flag]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError(f"{flag}: unknown {noun} {unknown[0]!r}; the {noun}s are {', '.join(known)}")


def _gopher(text: str) -> tuple[Optional[str], str]:
    return rules.gopher_repetition(text) or rules.gopher_quality(text), text


def _fineweb(text: str) -> tuple[Optional[str], str]:
    return rules.fineweb_quality(text), text


STAGES: dict[str, Callable[[str], tuple[Optional[str], str]]] = {"gopher": _gopher, "c4": rules.c4_clean,
                                                                   "fineweb": _fineweb}


def clean_document(lines: list[str], filters: tuple[str, ...]) -> tuple[Optional[tuple[str, str]], list[str]]:
    """(the stage and rule that removed the document, or None; its lines as kept)."""
    text = "\n".join(lines)
    for stage in (stage for stage in FILTERS if stage in filters):  # their running order, whatever the given one
        reason, text = STAGES[stage](text)
        if reason is not None:
            return (stage, reason), []
    return None, text.split("\n") if text != "\n".join(lines) else lines


def removal_counters(stages: tuple[str, ...]) -> tuple[str, ...]:
    """The counters a run with these filters (its read reports) or dedup kinds (its shard reports) adds to
    its manifest."""
    return tuple(f"removed_{kind}_{stage}" for stage in stages for kind in ("documents", "bytes"))
