"""`xlnet preprocess`: corpus -> XLNet TFRecord shards + manifest, on any Beam runner.

Locally the default runner is Beam's FnApiRunner in multi-processing mode with ``--workers N``
worker processes (default: one per CPU core), fully offline; ``--direct_running_mode in_memory``
runs everything inside this process instead. Any other flag is handed to Beam as a pipeline option, so Dataflow, Flink and
Spark are reached with their standard options, e.g.
``--runner DataflowRunner --project P --region R --temp_location gs://... --sdk_container_image IMAGE``.
Unknown flags are an error, never silently dropped.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import threading
import time

from pipeline.corpus import INPUT_FORMAT_HELP, INPUT_FORMATS, expand_inputs
from pipeline.data_directory import (abandon_run, found_write_error, has_manifest, is_local_path,
                                     make_output_directory, output_error, prepare_output, read_manifest,
                                     remove_run_files)
from pipeline.output_lock import OutputInUseError, OutputLock
from pipeline.preprocess_config import COMPRESSIONS, PreprocessConfig
from pipeline.vocab import load_vocab
from tfrecords.errors import DataError
from tfrecords.interruption import ending_on_signals
from tfrecords.manifest import MANIFEST_NAME
from tfrecords.record_config import ConfigError

# xlnet_cli hands flags this command does not define to run() as args.runner_options.
ACCEPTS_RUNNER_OPTIONS = True
LOCAL_RUNNERS = ("fnapirunner",)
_LOG = logging.getLogger("xlnet.preprocess")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = PreprocessConfig(inputs=(), output="", vocab="")
    io = parser.add_argument_group("input and output")
    io.add_argument("--input", action="append", required=True, metavar="GLOB",
                    help="corpus files (local or gs://; plain, .gz, .bz2); repeat for several globs")
    io.add_argument("--input-format", choices=INPUT_FORMATS, default=d.input_format, help=INPUT_FORMAT_HELP)
    io.add_argument("--text-field", default=d.text_field, help="JSON-lines field holding a document's text")
    io.add_argument("--output", required=True, metavar="DIR", help="data directory to write (local or gs://)")
    io.add_argument("--vocab", required=True, help="SentencePiece model from `xlnet vocab` (local or gs://)")
    io.add_argument("--overwrite", action=argparse.BooleanOptionalAction, default=False,
                    help="replace shards and manifest in a non-empty --output")
    io.add_argument("--compression", choices=COMPRESSIONS, default=d.compression, help="gzip the shard files")
    io.add_argument("--max-line-bytes", type=int, default=d.max_line_bytes, help="longer lines are skipped (counted)")
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
                           help="FnApiRunner (local), DataflowRunner, FlinkRunner, SparkRunner, PortableRunner")
    run_group.add_argument("--workers", type=int, default=default_workers(),
                           help="FnApiRunner worker processes (default: the number of CPU cores, here "
                                "%(default)s); --direct_running_mode in_memory runs in this process instead")


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
        input_format=args.input_format, text_field=args.text_field, max_line_bytes=args.max_line_bytes)


def pipeline_options(runner: str, workers: int, runner_options: list[str]):
    """Beam options: our runner/worker choice plus the pass-through flags (unknown ones rejected)."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for options_class in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        options_class._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(runner_options)
    if unknown:
        raise ConfigError(f"unknown option(s) {' '.join(unknown)}: neither an `xlnet preprocess` flag "
                          "nor a Beam pipeline option")
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    extra = {}
    if runner.lower() in LOCAL_RUNNERS:
        extra = {"direct_num_workers": workers}
        if not any(flag.startswith("--direct_running_mode") for flag in runner_options):
            extra["direct_running_mode"] = "multi_processing"
    options = PipelineOptions(runner_options, runner=runner, **extra)
    if runner.lower() == "dataflowrunner":
        setup = options.get_all_options()
        if not (setup.get("setup_file") or setup.get("sdk_container_image")):
            raise ConfigError("DataflowRunner workers need this package: pass --sdk_container_image IMAGE "
                              "(see Dockerfile) or --setup_file ./setup.py")
    return options


def check_paths(config: PreprocessConfig, runner: str, files) -> None:
    """Remote runners cannot read local inputs or write a local output."""
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


def counters(result) -> dict[str, int]:
    """The pipeline's xlnet.* counters, summed over steps."""
    from apache_beam.metrics.metric import MetricsFilter

    from pipeline.beam_pipeline import NAMESPACE

    totals: dict[str, int] = {}
    for counter in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + int(value or 0)
    return totals


COUNTER_KEYS = ("files", "lines", "documents", "tokens", "records", "masked_tokens", "empty_files",
                "unreadable_files", "invalid_lines", "long_lines", "empty_documents", "short_streams",
                "uncovered_tokens")
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
    skipped = {k: metrics.get(k, 0) for k in SKIPPED_KEYS}
    if any(skipped.values()):
        lines.append("  WARNING: skipped input: " + ", ".join(f"{k}={v}" for k, v in skipped.items() if v)
                     + " (see the log for file names)")
    return lines


def summary(manifest, metrics: dict[str, int], seconds: float) -> str:
    """The readable end-of-run report."""
    lines = [f"preprocessing finished in {seconds:.1f} s -> {manifest.directory}/{MANIFEST_NAME}"]
    for name, split in manifest.splits.items():
        t = split.totals
        lines.append(f"  {name}: {t['documents']} documents, {t['tokens']} tokens -> {t['records']} records "
                     f"({t['masked_tokens']} masked tokens) in {split.num_shards} shard(s), "
                     f"{split.num_streams} streams{' x2 (bi_data)' if manifest.bi_data else ''}")
    return "\n".join(lines + counter_lines(metrics))


def no_records_message(config: PreprocessConfig, metrics: dict[str, int]) -> str:
    """Why a run produced no training record, from its counters: no documents at all (an empty
    input, or one whose every line was skipped), or documents too short for one record."""
    count = {key: metrics.get(key, 0) for key in COUNTER_KEYS}
    read = f"read {count['files']} file(s) from --input: {count['lines']} lines, {count['documents']} documents"
    nothing_written = f"Nothing was written as data (no {MANIFEST_NAME}, no shard files)."
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


def preprocess(config: PreprocessConfig, runner: str = "FnApiRunner", workers: int | None = None,
               runner_options: list[str] | None = None, overwrite: bool = False):
    """Validates everything, runs the pipeline, returns (manifest, counters). Raises on bad input, and
    NoTrainingRecordsError (after removing the run's shards) when there is no training record.

    One run writes a data directory at a time: the run holds ``--output``'s lock
    (pipeline/output_lock.py) from before it prepares the directory until it returns, so a second
    run on it stops at once, naming the first. A run that fails writing its output (a full disk, a
    read-only directory) removes what it wrote and raises one sentence naming ``--output``; SIGINT
    and SIGTERM end it, its local workers with it (``ending_cleanly_on_signals``).

    Locally (FnApiRunner) ``workers`` worker processes (default: one per CPU core) run the
    pipeline unless ``runner_options`` choose ``--direct_running_mode=in_memory``."""
    import apache_beam as beam

    from pipeline.beam_pipeline import LOST_LOCK, build_pipeline

    config.validate()
    workers = default_workers() if workers is None else workers
    options = pipeline_options(runner, workers, list(runner_options or []))
    vocab = load_vocab(config.vocab)
    files = expand_inputs(config.inputs)
    check_paths(config, runner, files)
    make_output_directory(config.output)
    lock = OutputLock(config.output)
    try:
        lock.acquire()
    except OSError as error:  # read-only, not ours to write
        raise output_error(config.output, lock.path, error.errno or 0, error.strerror or str(error)) from None
    try:
        # Locally the run is this process and its workers; a remote job is not ended by ending this one.
        local = runner.lower() in LOCAL_RUNNERS
        with ending_cleanly_on_signals(config.output, lock) if local else contextlib.nullcontext():
            try:
                prepare_output(config.output, overwrite)
            except OSError as error:
                raise output_error(config.output, config.output, error.errno or 0,
                                   error.strerror or str(error)) from None
            _LOG.info("preprocessing %d file(s) (%.1f MB) with %s, %d worker(s)", len(files),
                      sum(f.size_bytes for f in files) / 1e6, runner, workers)
            pipeline = beam.Pipeline(options=options)
            build_pipeline(pipeline, config, vocab, files, lock.token)
            try:
                result = pipeline.run()
                result.wait_until_finish()
            except Exception as error:
                known = failed_run_error(config.output, error)
                if known is None:
                    raise  # a bug: keeps its traceback (its partial output is removed all the same)
                raise known from None
            taken = string_set(result, LOST_LOCK)
            if taken:  # its shards may be the other run's by now: leave the directory to it
                raise OutputInUseError(f"--output {config.output} was taken by another `xlnet preprocess` ({taken[0]}) "
                                       "while this run wrote it; this run wrote no manifest, and the directory is "
                                       "left to that run")
            failures = write_errors(result)
            if failures:
                raise failed_run_error(config.output, failures[0]) or DataError(failures[0])
            metrics = counters(result)
            if not has_manifest(config.output):  # the pipeline writes none without a training record
                remove_run_files(config.output)
                raise NoTrainingRecordsError(no_records_message(config, metrics), metrics)
            return read_manifest(config.output), metrics
    finally:
        lock.release()


def write_errors(result) -> list[str]:
    """The files the run could not write for good (beam_pipeline.WRITE_ERRORS), sorted."""
    from pipeline.beam_pipeline import WRITE_ERRORS

    return string_set(result, WRITE_ERRORS)


def string_set(result, name: str) -> list[str]:
    """The values of the pipeline's string-set metric ``name`` (namespace xlnet), sorted."""
    from apache_beam.metrics.metric import MetricsFilter

    from pipeline.beam_pipeline import NAMESPACE

    found: set[str] = set()
    query = MetricsFilter().with_namespace(NAMESPACE).with_name(name)
    for metric in result.metrics().query(query).get("string_sets", []):
        found |= set(metric.committed or ()) | set(metric.attempted or ())
    return sorted(found)


def failed_run_error(output: str, error: BaseException | str) -> Exception | None:
    """After the pipeline failed: removes what the run wrote, and returns the one-sentence error for
    a file of --output that could not be written (found in Beam's error text), or None."""
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
                                       args.overwrite)
    except NoTrainingRecordsError as error:  # a DataError (exit 3), after the counters that explain it
        print(f"preprocessing failed after {time.time() - start:.1f} s\n" + "\n".join(counter_lines(error.metrics)))
        raise
    print(summary(manifest, metrics, time.time() - start))
    return 0
