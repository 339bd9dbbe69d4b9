"""`xlnet preprocess --languages` and `--filters`: the language stage and the quality and repetition filters
applied to each document as it is read.

The language stage (pipeline/language_id.py) runs first, as the anchors order them, its removal reason
``language:<code>``; then the filters.

A document is its lines joined by newlines (paragraphs, as the corpus formats give them). The filters
named run in the order FineWeb's recipe runs them, whatever the order given: Gopher (repetition, then
quality), C4 (which also drops the lines it does not keep), FineWeb. A document's removal reason is
the first rule that removed it, named ``stage:rule`` (``gopher:gopher_short_doc``); the counters the
manifest records are per stage (``stage_counters``: ``in_``, ``removed_`` and ``kept_documents_gopher``, and
the UTF-8 bytes of that text, ``..._bytes_gopher``). The rules themselves: pipeline/quality_filters.py.

``--dedup exact`` then removes exact duplicates (pipeline/near_duplicates.py's ``exact_key``: the text with
case, width, punctuation and spacing simplified): every copy but the one with the least seeded hash of
its key (``keep_rank``), whatever order the copies arrive in, counted as ``removed_documents_exact``.
``--dedup near`` removes near duplicates among the documents exact dedup kept (MinHash LSH, pipeline/near_duplicates.py;
the Beam stages in pipeline/beam_pipeline.py), counted as ``removed_documents_near``.
``--dedup lines`` is C4's line dedup across the corpus, last, among the documents both kept: each line (as C4
compares lines, ``near_duplicates.line_text``) is kept in the one page of least ``keep_rank`` that has it and
dropped from every other, and a repeat of a line within a page is dropped too (``drop_duplicate_lines``); a page
that lost lines is re-checked by C4's sentence rule, and removed (counted as ``removed_documents_lines``) when
no line or too few sentences are left.

Off by default: without ``--filters`` and ``--dedup`` nothing here runs and the output is byte for byte
what it was.
"""
from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Optional

from pipeline import quality_filters as rules
from pipeline.near_duplicates import MinHashSettings, line_hash, line_text
from tfrecords.record_config import ConfigError

# In the order they run, after --languages' stage.
FILTERS = ("gopher", "c4", "fineweb")
LANGUAGE = "language"
# `--dedup`: the duplicate removals, after the filters, in their running order (exact first: a document it
# removed is no near-duplicate candidate; lines last: a line is kept in a page the others kept).
DEDUP = ("exact", "near", "lines")


# `--clean NAME`: named sets of stages, each part replaced by --filters or --dedup when those are given.
# recommended: every filter and both document dedups, as FineWeb's recipe runs them (languages are the corpus's
# choice: add --languages; C4's line dedup changes pages, not only which are kept: add --dedup exact,near,lines).
CLEANING_SETS = {"recommended": {"filters": FILTERS, "dedup": ("exact", "near")}}


def cleaning_set(name: str) -> dict[str, tuple[str, ...]]:
    """The stages of ``--clean NAME`` (``filters``, ``dedup``); a ConfigError naming the flag for an unknown name."""
    if name not in CLEANING_SETS:
        raise ConfigError(f"--clean {name!r}: unknown set; the sets are {', '.join(CLEANING_SETS)}")
    return CLEANING_SETS[name]


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


# `--minhash KEY=VALUE,...`: each key and the PreprocessConfig field it sets (``hashes`` only checks bands x rows).
MINHASH_KEYS = {"shingle_words": "shingle_words", "bands": "minhash_bands", "rows": "minhash_rows",
                "min_jaccard": "min_jaccard", "hashes": None}


def parse_minhash(text: str) -> dict[str, int | float]:
    """``--minhash``'s value (``bands=20,rows=5,hashes=100``) as PreprocessConfig fields; a ConfigError naming the
    flag for an unknown key, a value that is not a number, or ``hashes`` other than bands x rows."""
    values: dict[str, int | float] = {}
    for item in (item.strip() for item in text.split(",") if item.strip()):
        key, _, value = (part.strip() for part in item.partition("="))
        if key not in MINHASH_KEYS:
            raise ConfigError(f"--minhash {text!r}: unknown key {key!r}; the keys are {', '.join(MINHASH_KEYS)}")
        try:
            values[key] = float(value) if key == "min_jaccard" else int(value)
        except ValueError:
            raise ConfigError(f"--minhash {text!r}: {key} must be a number, got {value!r}") from None
    if not values:
        raise ConfigError(f"--minhash {text!r}: no KEY=VALUE given; the keys are {', '.join(MINHASH_KEYS)}")
    bands, rows = values.get("bands", MinHashSettings.bands), values.get("rows", MinHashSettings.rows)
    if "hashes" in values and values["hashes"] != bands * rows:
        raise ConfigError(f"--minhash {text!r}: bands x rows = {bands} x {rows} = {bands * rows} hash functions, "
                          f"not hashes={values['hashes']}")
    return {MINHASH_KEYS[key]: value for key, value in values.items() if MINHASH_KEYS[key]}


# A stage: text -> (its removal reason or None, the text as kept).
Stage = Callable[[str], tuple[Optional[str], str]]


@dataclass(frozen=True)
class FilterRules:
    """The filters' thresholds, one rule set each (pipeline/quality_filters.py: defaults the anchors', ranges
    checked there); `--filter-rules` changes the numbers of any of them."""

    gopher_quality: rules.GopherQuality = rules.GopherQuality()
    gopher_repetition: rules.GopherRepetition = rules.GopherRepetition()
    c4: rules.C4Rules = rules.C4Rules()
    fineweb: rules.FineWebRules = rules.FineWebRules()

    def run(self, stage: str, text: str) -> tuple[Optional[str], str]:
        """Filter ``stage`` on ``text``: (its removal reason or None, the text as kept; C4 drops lines)."""
        if stage == "gopher":  # repetition first, as datatrove's FineWeb recipe runs them
            reason = rules.gopher_repetition(text, self.gopher_repetition) or rules.gopher_quality(
                text, self.gopher_quality)
            return reason, text
        if stage == "c4":
            return rules.c4_clean(text, self.c4)
        return rules.fineweb_quality(text, self.fineweb), text

    @classmethod
    def of(cls, settings: tuple[tuple[str, int | float], ...]) -> "FilterRules":
        """The rules with ``settings`` (``(stage.field, value)`` pairs, as parse_filter_rules gives them) changed."""
        changes: dict[str, dict] = {}
        for key, value in settings:
            stage, field = key.split(".", 1)
            changes.setdefault(rule_set_of(stage, field), {})[field] = value
        defaults = cls()
        return cls(**{name: dataclasses.replace(getattr(defaults, name), **values) for name, values in changes.items()})


DEFAULT_RULES = FilterRules()

# `--filter-rules stage.field=value`: each filter's rule sets (FilterRules' fields) whose numbers it takes.
RULE_SETS = {"gopher": ("gopher_quality", "gopher_repetition"), "c4": ("c4",), "fineweb": ("fineweb",)}


def tunable_fields(stage: str) -> list[str]:
    """The numeric thresholds of filter ``stage`` (the rule sets' int and float fields), in their order."""
    return [field.name for name in RULE_SETS[stage] for field in dataclasses.fields(getattr(DEFAULT_RULES, name))
            if type(getattr(getattr(DEFAULT_RULES, name), field.name)) in (int, float)]


def rule_set_of(stage: str, field: str) -> str:
    """The FilterRules field holding threshold ``field`` of filter ``stage``."""
    return next(name for name in RULE_SETS[stage]
                if field in {f.name for f in dataclasses.fields(getattr(DEFAULT_RULES, name))})


def parse_filter_rules(text: str, filters: tuple[str, ...]) -> tuple[tuple[str, int | float], ...]:
    """``--filter-rules``'s value (``gopher.min_words=30,c4.min_sentences=2``) as sorted (key, value) pairs; a
    ConfigError naming the flag for an unknown filter or threshold, a value that is not a number (a whole number
    for a count), or what check_filter_rules refuses."""
    values: dict[str, int | float] = {}
    for item in (item.strip() for item in text.split(",") if item.strip()):
        key, _, value = (part.strip() for part in item.partition("="))
        stage, _, field = key.partition(".")
        if stage not in RULE_SETS:
            raise ConfigError(f"--filter-rules {text!r}: {key!r} names no filter; a key is FILTER.THRESHOLD, the "
                              f"filters {', '.join(FILTERS)}")
        if field not in tunable_fields(stage):
            raise ConfigError(f"--filter-rules {text!r}: {stage} has no threshold {field!r}; its thresholds are "
                              f"{', '.join(tunable_fields(stage))}")
        default = getattr(getattr(DEFAULT_RULES, rule_set_of(stage, field)), field)
        try:
            values[key] = int(value) if isinstance(default, int) else float(value)
        except ValueError:
            kind = "a whole number" if isinstance(default, int) else "a number"
            raise ConfigError(f"--filter-rules {text!r}: {key} must be {kind}, got {value!r}") from None
    if not values:
        raise ConfigError(f"--filter-rules {text!r}: no FILTER.THRESHOLD=VALUE given")
    settings = tuple(sorted(values.items()))
    check_filter_rules(settings, filters, f"--filter-rules {text!r}")
    return settings


def check_filter_rules(settings: tuple[tuple[str, int | float], ...], filters: tuple[str, ...], where: str) -> None:
    """ConfigError, ``where`` first, for a threshold of a filter not in ``filters`` or settings the rule sets
    refuse (their ranges: quality_filters.py)."""
    for key, _ in settings:
        stage = key.partition(".")[0]
        if stage not in filters:
            raise ConfigError(f"{where}: {key} is a threshold of the {stage} filter, not run: add --filters {stage}")
    try:
        FilterRules.of(settings)
    except (ValueError, TypeError, KeyError, StopIteration) as error:
        raise ConfigError(f"{where}: {error}") from None


def clean_document(lines: list[str], filters: tuple[str, ...], tally: Counter | None = None,
                   language: Stage | None = None, rules_of: FilterRules = DEFAULT_RULES
                   ) -> tuple[Optional[tuple[str, str]], list[str]]:
    """(the stage and rule that removed the document, or None; its lines as kept). ``language`` (--languages,
    pipeline/language_id.py) runs first, then the filters, with the thresholds of ``rules_of``. ``tally``
    counts, per stage it reached, the document and its UTF-8 bytes in, and removed or kept (as it entered, and
    as it left the stage: C4 drops lines of the documents it keeps)."""
    text = "\n".join(lines)
    tally = Counter() if tally is None else tally
    stages = [(stage, functools.partial(rules_of.run, stage)) for stage in FILTERS if stage in filters]  # their order
    for stage, run_stage in ([(LANGUAGE, language)] if language is not None else []) + stages:
        size = len(text.encode("utf-8"))
        tally[f"in_documents_{stage}"] += 1
        tally[f"in_bytes_{stage}"] += size
        reason, kept = run_stage(text)
        if reason is not None:
            tally[f"removed_documents_{stage}"] += 1
            tally[f"removed_bytes_{stage}"] += size
            return (stage, reason), []
        tally[f"kept_documents_{stage}"] += 1
        tally[f"kept_bytes_{stage}"] += size if kept is text else len(kept.encode("utf-8"))
        text = kept
    return None, text.split("\n") if text != "\n".join(lines) else lines


def drop_duplicate_lines(lines: list[str], dropped: set[int] | frozenset[int], seed: int,
                         rules_of: FilterRules = DEFAULT_RULES) -> tuple[Optional[str], list[str]]:
    """``--dedup lines`` on one page: (why it is removed, or None; its lines as kept). A line whose
    ``line_hash`` is in ``dropped`` (another page keeps that line) is dropped, and so is a repeat of a line
    earlier in the page (as C4 does); blank lines stay. A page that lost a line is re-checked: removed when no
    line is left (``lines_all_duplicate``) or fewer sentences than C4's ``min_sentences``
    (``lines_too_few_sentences``); an untouched page is returned as it came."""
    seen: set[str] = set()
    kept = []
    for line in lines:
        text = line_text(line)
        if text:
            if text in seen or (dropped and line_hash(text, seed) in dropped):
                continue
            seen.add(text)
        kept.append(line)
    if len(kept) == len(lines):
        return None, lines
    if not any(seen):
        return "lines_all_duplicate", []
    if rules.too_few_sentences(kept, rules_of.c4):
        return "lines_too_few_sentences", []
    return None, kept


COUNTED = ("in", "removed", "kept")
KINDS = ("documents", "bytes")


def stage_counters(stages: tuple[str, ...]) -> tuple[str, ...]:
    """Every counter of these stages the manifest records: the documents and their UTF-8 bytes in, removed and
    kept (``in_documents_gopher``, ``removed_bytes_near``, ...)."""
    return tuple(f"{what}_{kind}_{stage}" for stage in stages for what in COUNTED for kind in KINDS)


def removal_counters(stages: tuple[str, ...]) -> tuple[str, ...]:
    """The counters of what these stages removed (the dedup stages' shard reports carry these)."""
    return tuple(f"removed_{kind}_{stage}" for stage in stages for kind in KINDS)


# What the shard stage also counts of --dedup lines: the documents it kept and their bytes once their duplicate
# lines were dropped (so the bytes dropped are in - removed - kept, as for C4's filter), and the lines dropped.
LINE_STAGE_COUNTERS = ("kept_documents_lines", "kept_bytes_lines", "duplicate_lines_removed")


def shard_counters(dedup: tuple[str, ...]) -> tuple[str, ...]:
    """What the shard stage counts of the dedup stages: their removals (removal_counters), and under --dedup
    lines what that stage kept (LINE_STAGE_COUNTERS)."""
    return removal_counters(dedup) + (LINE_STAGE_COUNTERS if "lines" in dedup else ())


def dedup_input_counters(dedup: tuple[str, ...]) -> tuple[str, ...]:
    """What the readers count of the documents entering the first dedup stage (none without dedup)."""
    return tuple(f"in_{kind}_{dedup[0]}" for kind in KINDS) if dedup else ()


def dedup_flow(counters: dict[str, int], dedup: tuple[str, ...]) -> dict[str, int]:
    """The dedup stages' in and kept counters from what the readers counted in (dedup_input_counters) and the
    shards removed: each stage takes what the one before it kept. The lines stage's kept are the shards' own
    count (LINE_STAGE_COUNTERS): it drops lines of the pages it keeps."""
    flow = {}
    entering = {kind: counters.get(f"in_{kind}_{dedup[0]}", 0) for kind in KINDS} if dedup else {}
    for stage in dedup:
        for kind in KINDS:
            flow[f"in_{kind}_{stage}"] = entering[kind]
            entering[kind] = counters.get(f"kept_{kind}_{stage}", 0) if stage == "lines" else \
                entering[kind] - counters.get(f"removed_{kind}_{stage}", 0)
            flow[f"kept_{kind}_{stage}"] = entering[kind]
    return flow
