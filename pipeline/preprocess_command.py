"""`xlnet preprocess`: corpus -> XLNet TFRecord shards + manifest, on any Beam runner.

Locally the default runner is Beam's FnApiRunner in multi-processing mode with ``--workers N``
worker processes (default: one per CPU core), fully offline; ``--direct_running_mode in_memory``
runs everything inside this process instead. ``--runner dask`` runs on a Dask cluster
(pipeline/dask_cluster.py). Any other flag is handed to Beam as a pipeline option, so Dataflow,
Flink and Spark are reached with their standard options, e.g.
``--runner DataflowRunner --project P --region R --temp_location gs://... --sdk_container_image IMAGE``.
Unknown flags are an error, never silently dropped.

What the launcher learns from a run (counters, write errors, a lost lock, which worker did what)
comes from the run's report, which the pipeline's last stage gathers from elements and writes
next to the data (pipeline/beam_pipeline.py, RunReport): the same on every runner, Beam metrics
or not.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import re
import signal
import threading
import time

from pipeline.dask_cluster import (DASK_RUNNER, DaskCluster, check_options, connection_timeout, dask_cluster,
                                   is_dask, option_value, scheduler_option, wait_for_run)
from pipeline.cleaning import (CLEANING_SETS, DEDUP, FILTERS, cleaning_set, parse_filter_rules, parse_minhash,
                               parse_names)
from pipeline.corpus import INPUT_FORMAT_HELP, INPUT_FORMATS
from pipeline.language_id import parse_languages
from pipeline.preprocess_config import COMPRESSIONS, PreprocessConfig
from tfrecords.errors import DataError, UsageError
from tfrecords.interruption import ending_on_signals
from tfrecords.manifest import MANIFEST_NAME
from tfrecords.record_config import ConfigError

# Apache Beam (and pipeline.data_directory and output_lock, which use it) is imported inside the functions that run the pipeline, once every flag that can be checked
# without it is: a usage error returns at once, without Beam's seconds of start-up.
# xlnet_cli hands flags this command does not define to run() as args.runner_options.
ACCEPTS_RUNNER_OPTIONS = True
LOCAL_RUNNERS = ("fnapirunner",)
_LOG = logging.getLogger("xlnet.preprocess")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = PreprocessConfig(inputs=(), output="", vocab="")
    io = parser.add_argument_group("input and output")
    io.add_argument("--input", action="append", required=True, metavar="GLOB",
                    help="corpus files (local or gs://; plain, .gz, .bz2, or Parquet); repeat for several globs")
    io.add_argument("--input-format", choices=INPUT_FORMATS, default=d.input_format, help=INPUT_FORMAT_HELP)
    io.add_argument("--text-field", default=d.text_field,
                    help="JSON-lines field or Parquet column (of strings) holding a document's text; a Parquet "
                         "file's `id` column, if any, names its documents in --removed")
    io.add_argument("--output", required=True, metavar="DIR", help="data directory to write (local or gs://)")
    io.add_argument("--vocab", required=True, help="SentencePiece model from `xlnet vocab` (local or gs://)")
    io.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=False,
                    help="replace shards and manifest in a non-empty --output")
    io.add_argument("--compression", choices=COMPRESSIONS, default=d.compression, help="gzip the shard files")
    io.add_argument("--max-line-bytes", type=int, default=d.max_line_bytes, help="longer lines are skipped (counted)")
    io.add_argument("--clean", default=None, metavar="SET",
                    help=f"a named set of cleaning stages: {', '.join(CLEANING_SETS)} (--filters "
                         f"{','.join(CLEANING_SETS['recommended']['filters'])} --dedup "
                         f"{','.join(CLEANING_SETS['recommended']['dedup'])}); --filters or --dedup given beside it "
                         "replace that part (docs/preprocessing.md, \"Cleaning\")")
    io.add_argument("--filters", default=None, metavar="NAMES",
                    help="quality and repetition filters applied to each document as it is read, comma-separated: "
                         f"{', '.join(FILTERS)} (docs/preprocessing.md, \"Cleaning\"); each removal counted by stage "
                         "in the manifest (default: none, the documents as they are)")
    io.add_argument("--filter-rules", default=None, metavar="FILTER.THRESHOLD=VALUE,...",
                    help="change the filters' thresholds from the anchors' defaults, e.g. gopher.min_words=30,"
                         "c4.min_sentences=2 (each threshold and its source: docs/preprocessing.md, \"Cleaning\"); "
                         "recorded in the manifest")
    io.add_argument("--languages", default=None, metavar="CODES",
                    help="keep only documents in these languages, comma-separated ISO 639 codes (en,de), identified "
                         "by py3langid before the filters; removal reason language:<code>, counted in the manifest "
                         "(default: every language)")
    io.add_argument("--language-threshold", type=float, default=d.language_threshold, metavar="P",
                    help="--languages: the least probability of the language identified (default: %(default)s, "
                         "fastText lid.176's in FineWeb)")
    io.add_argument("--dedup", default=None, metavar="KINDS",
                    help=f"duplicate removal after the filters, comma-separated: {', '.join(DEDUP)} (exact: "
                         "documents equal once case, punctuation and spacing are set aside; near: MinHash LSH, see "
                         "--minhash; one copy kept, chosen by a seeded hash; lines: C4's line dedup across the corpus, "
                         "each line kept in one page, a page left with too few sentences removed), counted in the "
                         "manifest (default: none)")
    io.add_argument("--minhash", default=None, metavar="KEY=VALUE,...",
                    help="--dedup near's settings, shingle_words 5, bands 14, rows 8 and min_jaccard 0.7 unless given, "
                         "and hashes, to check that bands x rows is the number of hash functions you mean")
    io.add_argument("--removed", default="", metavar="DIR",
                    help="write what --filters and --dedup removed into DIR (local or gs://), one JSON line per "
                         "document (its id, stage and reason, and for a duplicate the kept copy's id), one file per "
                         "shard, published with the data (default: none)")
    rec = parser.add_argument_group("records")
    rec.add_argument("--seq-len", type=int, default=d.seq_len, help="tokens per record")
    rec.add_argument("--reuse-len", type=int, default=d.reuse_len,
                     help="context tokens per record; consecutive records of a stream start this far apart")
    rec.add_argument("--num-predict", type=int, default=d.num_predict, help="targets per record")
    rec.add_argument("--perm-size", type=int, default=None, help="permutation block size to allow (default: reuse-len)")
    rec.add_argument("--mask-alpha", type=int, default=d.mask_alpha,
                     help="an n-gram span is placed in a window of n * mask-alpha / mask-beta tokens")
    rec.add_argument("--mask-beta", type=int, default=d.mask_beta, help="see --mask-alpha")
    rec.add_argument("--max-gram", type=int, default=d.max_gram, help="longest span, in words")
    rec.add_argument("--subword-spans", action=argparse.BooleanOptionalAction, default=d.subword_spans,
                     help="n-gram spans of n pieces, as the original code did, instead of n whole words")
    rec.add_argument("--bi-data", action=argparse.BooleanOptionalAction, default=d.bi_data,
                     help="also write every stream reversed (XLNet's bidirectional data)")
    rec.add_argument("--eod", dest="use_eod", action=argparse.BooleanOptionalAction, default=d.use_eod,
                     help="end every document with <eod>")
    rec.add_argument("--uncased", action=argparse.BooleanOptionalAction, default=d.uncased,
                     help="lower-case text (the vocab must be uncased too)")
    lay = parser.add_argument_group("layout")
    lay.add_argument("--num-streams", type=int, default=d.num_streams,
                     help="text streams per split: the largest batch size (per direction) training can use")
    lay.add_argument("--num-shards", type=int, default=d.num_shards, help="train shard files")
    lay.add_argument("--valid-shards", type=int, default=d.valid_shards, help="valid shard files")
    lay.add_argument("--valid-fraction", type=float, default=d.valid_fraction,
                     help="share of documents placed in the valid split (by a seeded hash of their key)")
    lay.add_argument("--seed", type=int, default=d.seed, help="seeds document placement and span masks")
    run_group = parser.add_argument_group("runner (other flags go to Beam, e.g. --project, --region)")
    run_group.add_argument("--runner", default="FnApiRunner",
                           help="FnApiRunner (local), dask (DaskRunner), DataflowRunner; FlinkRunner, SparkRunner "
                                "and PortableRunner need Beam's job-server jars (docs/preprocessing.md)")
    run_group.add_argument("--workers", type=int, default=default_workers(),
                           help="local worker processes of FnApiRunner, or of the local Dask cluster (default: the "
                                "number of CPU cores, here %(default)s); --direct_running_mode in_memory runs in "
                                "this process instead")
    run_group.add_argument("--dask-scheduler", metavar="tcp://HOST:PORT", default=None,
                           help="--runner dask: run on this existing Dask cluster instead of a local one of "
                                "--workers processes; --dask_npartitions N overrides how the work is split")


def default_workers() -> int:
    """Local worker processes when --workers is not given: one per CPU core."""
    return os.cpu_count() or 1


def config_from_args(args: argparse.Namespace) -> PreprocessConfig:
    return PreprocessConfig(
        inputs=tuple(args.input), output=args.output.rstrip("/"), vocab=args.vocab, seq_len=args.seq_len,
        reuse_len=args.reuse_len, num_predict=args.num_predict, perm_size=args.perm_size,
        mask_alpha=args.mask_alpha, mask_beta=args.mask_beta, max_gram=args.max_gram,
        subword_spans=args.subword_spans, bi_data=args.bi_data, use_eod=args.use_eod, uncased=args.uncased,
        num_streams=args.num_streams, num_shards=args.num_shards, valid_shards=args.valid_shards,
        valid_fraction=args.valid_fraction, seed=args.seed, compression=args.compression,
        input_format=args.input_format, text_field=args.text_field, max_line_bytes=args.max_line_bytes,
        filters=filters_of(args), filter_rules=filter_rules_of(args),
        dedup=dedup_of(args), removed=args.removed.rstrip("/"),
        languages=parse_languages(args.languages) if args.languages is not None else (),
        language_threshold=args.language_threshold, **minhash_fields(args))


def filters_of(args: argparse.Namespace) -> tuple[str, ...]:
    """--filters' names, else those of --clean's set, else none."""
    if args.filters is not None:
        return parse_names("--filters", args.filters)
    return cleaning_set(args.clean)["filters"] if args.clean is not None else ()


def dedup_of(args: argparse.Namespace) -> tuple[str, ...]:
    """--dedup's kinds, else those of --clean's set, else none."""
    if args.dedup is not None:
        return parse_names("--dedup", args.dedup)
    return cleaning_set(args.clean)["dedup"] if args.clean is not None else ()


def filter_rules_of(args: argparse.Namespace) -> tuple[tuple[str, int | float], ...]:
    """--filter-rules' changes, each of a filter --filters runs."""
    return parse_filter_rules(args.filter_rules, filters_of(args)) if args.filter_rules is not None else ()


def minhash_fields(args: argparse.Namespace) -> dict:
    """--minhash's settings as config fields; refused without --dedup near, which alone uses them."""
    if args.minhash is None:
        return {}
    if "near" not in dedup_of(args):
        raise ConfigError(f"--minhash {args.minhash}: only --dedup near uses it; add --dedup near (or exact,near)")
    return parse_minhash(args.minhash)


def beam_runner(runner: str) -> str:
    """The name Beam knows a --runner by (Dask's only by its class path)."""
    return DASK_RUNNER if is_dask(runner) else runner


def pipeline_options(runner: str, workers: int, runner_options: list[str]):
    """Beam options: our runner/worker choice plus the pass-through flags (unknown or malformed ones
    rejected as usage errors)."""
    import apache_beam.runners.dask.dask_runner  # noqa: F401 (defines DaskOptions: Dask's flags are known)
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    class Parser(_BeamArgumentParser):
        def error(self, message: str):  # argparse would print its usage and exit
            raise ConfigError(f"runner option: {message}")

    parser = Parser(allow_abbrev=False)
    for options_class in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        options_class._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(runner_options)
    if unknown:
        raise ConfigError(f"unknown option(s) {' '.join(unknown)}: neither an `xlnet preprocess` flag "
                          "nor a Beam pipeline option")
    extra = {}
    if runner.lower() in LOCAL_RUNNERS:
        extra = {"direct_num_workers": local_workers(runner, workers, runner_options)}
        if option_value(runner_options, "--direct_running_mode") is None:
            extra["direct_running_mode"] = "multi_processing"
    options = PipelineOptions(runner_options, runner=beam_runner(runner), **extra)
    if runner.lower() == "dataflowrunner":
        setup = options.get_all_options()
        if not (setup.get("setup_file") or setup.get("sdk_container_image")):
            raise ConfigError("DataflowRunner workers need this package: pass --sdk_container_image IMAGE "
                              "(see Dockerfile) or --setup_file ./setup.py")
    return options


def local_workers(runner: str, workers: int, runner_options: list[str]) -> int:
    """The worker processes a run uses: ``workers``, but one where FnApiRunner runs the pipeline
    inside this process (``--direct_running_mode in_memory``: Beam warns about any other number)."""
    if runner.lower() in LOCAL_RUNNERS and option_value(runner_options, "--direct_running_mode") == "in_memory":
        return 1
    return workers


def check_paths(config: PreprocessConfig, runner: str, files) -> None:
    """Remote runners cannot read local inputs or write a local output."""
    from pipeline.data_directory import is_local_path

    if runner.lower() in LOCAL_RUNNERS:
        return
    local_inputs = [f.path for f in files if is_local_path(f.path)]
    if local_inputs and runner.lower() == "dataflowrunner":
        raise ConfigError(f"--input: {runner} workers cannot read local files such as {local_inputs[0]}; "
                          "copy the corpus to gs://")
    if is_local_path(config.output) and runner.lower() == "dataflowrunner":
        raise ConfigError(f"--output {config.output}: {runner} workers cannot write a local directory; use gs://")
    if is_local_path(config.vocab) and runner.lower() == "dataflowrunner":
        raise ConfigError(f"--vocab {config.vocab}: {runner} workers load the model themselves; copy it to gs://")


COUNTER_KEYS = ("files", "lines", "documents", "tokens", "records", "masked_tokens", "empty_files",
                "unreadable_files", "invalid_lines", "long_lines", "dropped_bytes", "empty_documents",
                "short_streams", "uncovered_tokens")
SKIPPED_KEYS = ("unreadable_files", "invalid_lines", "long_lines", "empty_files")


class NoTrainingRecordsError(DataError):
    """The run produced no training record: it wrote no manifest and its shards were removed.
    A data problem (exit status 3), not a usage error; ``metrics`` holds the run's counters."""

    def __init__(self, message: str, metrics: dict[str, int]):
        super().__init__(message)
        self.metrics = metrics


def counter_lines(metrics: dict[str, int]) -> list[str]:
    """The counters line of the end-of-run report, and a warning line when input was skipped."""
    lines = ["  counters: " + ", ".join(f"{k}={metrics.get(k, 0)}" for k in COUNTER_KEYS)]
    removed = {key: metrics[key] for key in sorted(metrics) if key.startswith("removed_")}
    if removed:
        lines.append("  cleaning: " + ", ".join(f"{key}={value}" for key, value in removed.items()))
    skipped = {k: metrics.get(k, 0) for k in SKIPPED_KEYS}
    if any(skipped.values()):
        lines.append("  WARNING: skipped input: " + ", ".join(f"{k}={v}" for k, v in skipped.items() if v)
                     + " (see the log for file names)")
    return lines


def summary(manifest, metrics: dict[str, int], seconds: float) -> str:
    """The readable end-of-run report (with how the work was split when ``metrics`` holds the run's report)."""
    lines = [f"preprocessing finished in {seconds:.1f} s -> {manifest.directory}/{MANIFEST_NAME}"]
    for name, split in manifest.splits.items():
        t = split.totals
        lines.append(f"  {name}: {t['documents']} documents, {t['tokens']} tokens -> {t['records']} records "
                     f"({t['masked_tokens']} masked tokens) in {split.num_shards} shard(s), "
                     f"{split.num_streams} streams{' x2 (bi_data)' if manifest.bi_data else ''}")
    report = getattr(metrics, "report", None)
    return "\n".join(lines + counter_lines(metrics) + ([work_split(report)] if report is not None else []))


def no_records_message(config: PreprocessConfig, metrics: dict[str, int]) -> str:
    """Why a run produced no training record, from its counters: no documents at all (an empty
    input, or one whose every line was skipped), or documents too short for one record."""
    count = {key: metrics.get(key, 0) for key in COUNTER_KEYS}
    read = f"read {count['files']} file(s) from --input: {count['lines']} lines, {count['documents']} documents"
    nothing_written = f"Nothing was written as data (no {MANIFEST_NAME}, no shard files)."
    removed = {stage: metrics.get(f"removed_documents_{stage}", 0) for stage in config.read_stages + config.dedup}
    if count["documents"] == 0 and any(removed.values()):
        stages = ", ".join(f"{stage} {number}" for stage, number in removed.items() if number)
        flags = [f"--languages {','.join(config.languages)}"] * bool(config.languages) + \
            [f"--filters {','.join(config.filters)}"] * bool(config.filters) + \
            [f"--dedup {','.join(config.dedup)}"] * bool(removed.get("lines"))
        return (f"{' and '.join(flag.split()[0] for flag in flags)} removed every document ({stages} of "
                f"{metrics.get('documents_read', 0)} read; the first stage that removed one is named); loosen or "
                f"drop {' '.join(flags)}. {nothing_written}")
    if count["documents"] == 0:
        return f"{_no_documents_headline(count)}: {read}; {_skipped_input(count)}. {nothing_written}"
    return (f"no training records: the corpus is too short for --seq-len {config.seq_len} in "
            f"{config.num_streams} streams ({read}, {count['tokens']} tokens); lower --num-streams or "
            f"--seq-len. {nothing_written}")


def _no_documents_headline(count: dict[str, int]) -> str:
    if count["lines"] == 0 and not any(count[key] for key in SKIPPED_KEYS if key != "empty_files"):
        return "the input is empty"
    if count["lines"] == 0:
        return "the input holds no valid line"
    return "the input holds no text (only blank lines, or lines empty after normalisation)"


def _skipped_input(count: dict[str, int]) -> str:
    """Invalid lines always (the usual culprit), the other kinds of skipped input when there are any."""
    parts = [f"skipped {count['invalid_lines']} invalid lines (not UTF-8, NUL bytes, or JSON lines without "
             "a string --text-field; the log names the files)"]
    others = (("long_lines", "lines over --max-line-bytes"), ("unreadable_files", "unreadable files"),
              ("empty_files", "empty files"))
    parts += [f"{count[key]} {what}" for key, what in others if count[key]]
    return ", ".join(parts)


def check_flags(config: PreprocessConfig, runner: str, workers: int, runner_options: list[str],
                dask_scheduler: str | None) -> None:
    """Every check that needs neither Apache Beam nor a file: the settings, --workers and the Dask
    flags (pipeline/dask_cluster.py). Raises a UsageError naming the flag."""
    config.validate()
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    check_options(runner, runner_options, dask_scheduler)


def preprocess(config: PreprocessConfig, runner: str = "FnApiRunner", workers: int | None = None,
               runner_options: list[str] | None = None, overwrite: bool = False,
               dask_scheduler: str | None = None) -> tuple:
    """Validates everything, runs the pipeline, returns (manifest, counters). Raises on bad input, and
    NoTrainingRecordsError (after removing the run's shards) when there is no training record.
    The counters are a RunCounters: a dict that also holds the whole RunReport as ``report``.

    One run writes a data directory at a time: the run holds ``--output``'s lock
    (pipeline/output_lock.py) from before it prepares the directory until it returns, so a second
    run on it stops at once, naming the first. Its workers write only into the run's staging place
    and the launcher publishes from there (pipeline/data_directory.py). A run that fails after it
    prepared the directory, wherever it fails, closes its staging place and removes what it wrote
    (no manifest without a whole dataset) and raises one sentence for the failures it knows (a full
    disk, a read-only directory, a lost cluster); SIGINT and SIGTERM end it, its local workers with
    it (``ending_cleanly_on_signals``).

    Locally (FnApiRunner) ``workers`` worker processes (default: one per CPU core) run the
    pipeline unless ``runner_options`` choose ``--direct_running_mode=in_memory``. With
    ``runner="dask"`` it runs on the Dask cluster at ``dask_scheduler``, or on a local one of
    ``workers`` processes (pipeline/dask_cluster.py).

    A local ``--vocab`` is stored in the manifest as an absolute path (a data directory is then
    usable from any working directory); a URL (gs://) as given."""
    workers = default_workers() if workers is None else workers
    runner_options = list(runner_options or [])
    check_flags(config, runner, workers, runner_options, dask_scheduler)  # before Beam's start-up

    from pipeline.beam_pipeline import RunReport
    from pipeline.corpus import check_parquet_inputs, expand_inputs
    from pipeline.data_directory import make_output_directory, output_error, prepare_output, prepare_removed
    from pipeline.output_lock import OutputLock
    from pipeline.vocab import load_vocab

    config = dataclasses.replace(config, vocab=findable_path(config.vocab))
    pipeline_options(runner, workers, runner_options)  # every flag checked before any work
    vocab = load_vocab(config.vocab)
    files = expand_inputs(config.inputs)
    check_paths(config, runner, files)
    check_parquet_inputs(files, config.input_format, config.text_field)  # a DataError (exit 3), before any work
    make_output_directory(config.output)
    lock = OutputLock(config.output)
    try:
        lock.acquire()
    except OSError as error:  # read-only, not ours to write
        raise output_error(config.output, lock.path, error.errno or 0, error.strerror or str(error)) from None
    try:
        # Locally the run is this process and its workers; a remote job is not ended by ending this one.
        local = runner.lower() in LOCAL_RUNNERS or (is_dask(runner) and not dask_scheduler
                                                     and not scheduler_option(runner_options))
        with contextlib.ExitStack() as stack:
            if local:
                stack.enter_context(ending_cleanly_on_signals(config.output, lock))
            cluster = None
            if is_dask(runner):
                cluster = stack.enter_context(dask_cluster(dask_scheduler or scheduler_option(runner_options),
                                                           workers, connection_timeout(runner_options)))
                elements = max(1, len(files))  # the Create's elements: one ReadTask per file (beam_pipeline)
                runner_options = cluster.runner_options(runner_options, elements)
                workers = len(cluster.workers)
            options = pipeline_options(runner, workers, runner_options)
            if config.removed:  # first: a refused DIR leaves --output as it was
                prepare_removed(config.removed, overwrite)
            try:
                prepare_output(config.output, overwrite)
            except OSError as error:
                raise output_error(config.output, config.output, error.errno or 0,
                                   error.strerror or str(error)) from None
            _LOG.info("preprocessing %d file(s) (%.1f MB) with %s, %d worker(s)", len(files),
                      sum(f.size_bytes for f in files) / 1e6, runner, local_workers(runner, workers, runner_options))
            report = RunReport.from_dict(run_pipeline(options, config, vocab, files, lock, cluster))
            if cluster is not None:  # Dask workers' logs stay on the workers: the same lines, from the report
                for line in report.progress_lines(config.output):
                    _LOG.info(line)
            return judged(config, report, lock)
    finally:
        lock.release()


def findable_path(path: str) -> str:
    """``path`` as it finds the same file from any working directory: a local path made absolute, a
    URL (gs://...) as given."""
    return path if "://" in path else os.path.abspath(path)


def run_pipeline(options, config: PreprocessConfig, vocab, files, lock, cluster: DaskCluster | None) -> dict:
    """Runs the pipeline and returns its report (a dict). Any failure removes what the run wrote
    first (its staging place closed before anything else), and becomes one sentence where it is
    known: a file that could not be written, the loss of the Dask cluster."""
    import apache_beam as beam

    from pipeline.beam_pipeline import build_pipeline
    from pipeline.data_directory import abandon_run, found_write_error, take_report

    try:
        pipeline = beam.Pipeline(options=options)
        report_path = build_pipeline(pipeline, config, vocab, files, lock.token)
        result = pipeline.run()
        if cluster is not None:
            wait_for_run(result, cluster)
        else:
            result.wait_until_finish()
        report = take_report(report_path)
        if report is None:
            raise DataError(f"the pipeline finished without its report ({report_path}): the run is incomplete")
        return report
    except BaseException as error:
        # Our own errors (a lost cluster, ...) are one sentence already; a file that could not be
        # written is turned into one naming --output below.
        if isinstance(error, (DataError, UsageError)) and found_write_error(error) is None:
            with contextlib.suppress(Exception):
                abandon_run(config.output)
            raise
        known = failed_run_error(config.output, error)
        if known is None or isinstance(error, KeyboardInterrupt):
            raise  # a bug keeps its traceback (its partial output is removed all the same)
        raise known from None


def judged(config: PreprocessConfig, report, lock) -> tuple:
    """(manifest, counters) of a run whose report says it staged its data, once the launcher has
    published it (still holding ``lock``); otherwise the one sentence for why not, once what the
    run wrote is removed (but not from a directory another run has taken: that is left to it,
    only this run's staging place is removed)."""
    from pipeline.data_directory import (abandon_run, close_staging, has_manifest, publish_run, read_manifest,
                                         staging_directory)
    from pipeline.output_lock import OutputInUseError, read_lock
    from tfrecords.lock_owner import describe

    staging = staging_directory(config.output, lock.token)
    lost_lock = report.lost_lock or (None if lock.is_ours() else describe(read_lock(config.output)))
    if lost_lock:  # its shards may be the other run's by now: leave the directory to it
        with contextlib.suppress(Exception):
            close_staging(staging)
        raise OutputInUseError(f"--output {config.output} was taken by another `xlnet preprocess` "
                               f"({lost_lock}) while this run wrote it; this run wrote no manifest, and "
                               "the directory is left to that run")
    counters = RunCounters(report.counters, report)
    try:
        if report.write_errors:
            raise failed_run_error(config.output, report.write_errors[0]) or DataError(report.write_errors[0])
        if report.problems:
            raise DataError(f"the run's results are incomplete: {report.problems[0]}; nothing was published")
        if not report.manifest:  # none without a training record
            raise NoTrainingRecordsError(no_records_message(config, counters), counters)
        audit = [shard["removed_file"] for shard in report.shards if "removed_file" in shard]
        publish_run(staging, config.output, [shard["file"] for shard in report.shards],
                    (config.removed, audit) if config.removed else None)
        if not has_manifest(config.output):
            raise DataError(f"--output {config.output}: the manifest was not found after publishing; the run is "
                            "incomplete")
        return read_manifest(config.output), counters
    except BaseException:
        with contextlib.suppress(Exception):  # the first error stands
            abandon_run(config.output)
        raise


class RunCounters(dict):
    """The run's counters (a dict, COUNTER_KEYS and more), with the whole RunReport as ``report``."""

    def __init__(self, counters: dict[str, int], report):
        super().__init__(counters)
        self.report = report


def work_split(report) -> str:
    """How the work was split over the workers (host:pid), from the run's report."""
    def listed(counts: dict[str, int]) -> str:
        return ", ".join(f"{worker} {count}" for worker, count in counts.items())

    return (f"  work: {sum(report.reads.values())} file(s) read by {len(report.reads)} worker(s) "
            f"[{listed(report.reads)}]; {sum(report.writes.values())} shard(s) written by {len(report.writes)} "
            f"worker(s) [{listed(report.writes)}]")


def failed_run_error(output: str, error: BaseException | str) -> Exception | None:
    """After the pipeline failed: removes what the run wrote, and returns the one-sentence error for
    a file of --output that could not be written (found in Beam's error text), or None."""
    from pipeline.data_directory import abandon_run, found_write_error, output_error

    try:
        abandon_run(output)
        removed = "what the run wrote was removed"
    except Exception as cleanup:  # the disk may be gone altogether: say so, the first error stands
        removed = f"what the run wrote could not all be removed ({cleanup})"
    found = found_write_error(error)
    if found is None:
        _LOG.error("preprocessing failed; %s", removed)
        return None
    known = output_error(output, *found)
    return type(known)(f"{known}; {removed}")


def ending_cleanly_on_signals(output: str, lock: OutputLock) -> contextlib.AbstractContextManager:
    """While the block runs, SIGINT and SIGTERM end the run at once and quietly
    (tfrecords/interruption.py): the local Beam worker processes are killed (otherwise they outlive
    the launcher, logging gRPC errors), the partial shards are removed (a manifest is never partial:
    it is written last, whole), the lock is released, one line says so, and the exit status is 128 +
    the signal's number (130, 143)."""
    from pipeline.data_directory import has_manifest, remove_run_files

    def clean_up() -> str:
        logging.disable(logging.CRITICAL)  # Beam's threads notice their workers die: not worth a word
        threading.excepthook = lambda args: None
        end_worker_processes()
        try:
            if has_manifest(output):
                what = f"its data was complete: {output}/{MANIFEST_NAME} had been published"
            else:
                remove_run_files(output)
                what = f"nothing was published in {output} and its partial shards were removed"
        except Exception as error:  # the process must still end; the next run refuses the leftovers
            what = f"what it wrote in {output} could not all be removed ({error})"
        lock.release()
        return what

    return ending_on_signals("preprocess", clean_up)


def end_worker_processes() -> list[int]:
    """Kills every process descended from this one: locally, the FnApiRunner's SDK worker processes
    (and the shells that started them); this process starts no other. Returns their pids."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:  # not Linux: the workers end when their gRPC channel closes
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, pending = [], list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, [])
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


class WorkerLogFilter(logging.Filter):
    """Local multi-process runs: Beam re-logs every worker log entry as protobuf text. Keep the
    entries our pipeline code wrote (its progress log), as plain messages; drop Beam's chatter."""

    _FIELD = re.compile(r'(\w+): "((?:[^"\\]|\\.)*)"')

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if "severity:" not in text[:40]:
            return True
        fields = dict(self._FIELD.findall(text))
        if "/pipeline/" not in fields.get("log_location", ""):
            # a file the run could not write is reported once, as a sentence, by the launcher
            return record.levelno >= logging.ERROR and "OutputWriteError" not in text
        record.msg = fields.get("message", "").encode("latin-1", "backslashreplace").decode("unicode_escape")
        record.args, record.name = (), "xlnet.worker"
        return True


# Loggers through which Beam forwards local workers' log entries.
_WORKER_LOG_FORWARDERS = ("apache_beam.runners.portability.local_job_service",
                          "apache_beam.runners.portability.fn_api_runner.worker_handlers")


def configure_logging() -> None:
    """INFO for our progress log (driver and local workers), WARNING for Beam's own chatter."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    handler.addFilter(WorkerLogFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for noisy in ("apache_beam", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for forwarder in _WORKER_LOG_FORWARDERS:
        logging.getLogger(forwarder).setLevel(logging.INFO)


def run(args: argparse.Namespace) -> int:
    configure_logging()
    start = time.time()
    config = config_from_args(args)
    try:  # bad flags, vocabulary, corpus or output: a UsageError (exit 2)
        manifest, metrics = preprocess(config, args.runner, args.workers, getattr(args, "runner_options", []),
                                       args.overwrite, getattr(args, "dask_scheduler", None))
    except NoTrainingRecordsError as error:  # a DataError (exit 3), after the counters that explain it
        print(f"preprocessing failed after {time.time() - start:.1f} s\n" + "\n".join(counter_lines(error.metrics)))
        raise
    print(summary(manifest, metrics, time.time() - start))
    return 0
