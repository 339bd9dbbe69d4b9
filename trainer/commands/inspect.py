"""`xlnet inspect DATA_DIR`: what a preprocessed data directory holds, as the model sees it.

One mode per run:

* no mode flag: records decoded with the directory's vocabulary (memory-reuse part, A, B, label,
  targets marked), chosen with --split, --stream and --records (trainer/inspection/records.py);
* ``--permutation STEP``: the rows of that training step's batch, with the factorisation order the
  trainer draws and what a few targets may see (trainer/inspection/permutations.py); the training
  settings come from --preset, --config and --set as for `xlnet train`;
* ``--stats``: counts and distributions over every record, ``--plot FILE.png`` as figures
  (trainer/inspection/statistics.py);
* ``--verify``: every record checked against manifest.json (tfrecords/verification.py);
* ``--cleaning``: the manifest's cleaning table (per stage of --languages, --filters and --dedup: documents
  and bytes in, removed and kept, and its settings), ``--plot FILE.png`` as a figure
  (trainer/inspection/cleaning_table.py); no record is read.

Exit status: 0 when done (for --verify: every shard intact), 3 when the data is damaged (a shard
missing, a record unreadable or out of place, a token id outside the vocabulary: the message names
the file and the record), 2 on a usage error or a DATA_DIR without a readable manifest.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys

from tfrecords.errors import UsageError

DEFAULT_RECORDS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet inspect`."""
    from tfrecords.manifest import SPLITS
    from tfrecords.verification import DEFAULT_THREADS
    from trainer.models.config import MODEL_PRESETS

    parser.add_argument("data_dir", metavar="DATA_DIR",
                        help="data directory written by `xlnet preprocess` (local or gs://), or its manifest.json")
    modes = parser.add_argument_group("modes (one per run; without one, records are decoded)") \
        .add_mutually_exclusive_group()
    modes.add_argument("--permutation", type=int, metavar="STEP",
                       help="the rows of training step STEP's batch: the factorisation order the trainer draws for "
                            "each and what a few targets may see (settings from --preset/--config/--set)")
    modes.add_argument("--stats", action="store_true",
                       help="read every record: records, tokens, documents, targets per record, span lengths "
                            "against the configured distribution, unknown pieces, document and stream lengths, "
                            "split shares")
    modes.add_argument("--cleaning", action="store_true",
                       help="the cleaning `xlnet preprocess --languages/--filters/--dedup` did, from manifest.json: "
                            "per stage the documents and bytes in, removed and kept, and its settings")
    modes.add_argument("--verify", action="store_true",
                       help="read every record of every shard and check it against manifest.json: CRCs, record "
                            "counts, stream layout, file sizes, token ids; names each damaged file and its first "
                            "bad record")
    parser.add_argument("--split", default="train", choices=SPLITS, help="split to decode")
    parser.add_argument("--stream", type=int, metavar="S",
                        help="stream to decode (default: the split's first with records); with --permutation, "
                             "the batch rows reading it")
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS, metavar="N",
                        help="records (batch rows with --permutation) to show")
    parser.add_argument("--format", default="text", choices=("text", "json"),
                        help="text, or JSON (one object per record, one for --stats)")
    parser.add_argument("--plot", metavar="FILE.png", help="with --stats or --cleaning: draw them into this PNG "
                                                           "(local or gs://; needs matplotlib: pip install '.[plot]')")
    parser.add_argument("--preset", default="tiny", choices=sorted(MODEL_PRESETS),
                        help="with --permutation: the training preset (as `xlnet train --preset`)")
    parser.add_argument("--config", help="with --permutation: the JSON file `xlnet train --config` takes")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="with --permutation: a training setting as `xlnet train --set` takes it, e.g. "
                             "train.seed=1, train.perm_size=32, train.train_batch_size=8 (repeatable)")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="with --verify: shard files read at the same time")


def needs_tensorflow(args: argparse.Namespace) -> bool:
    """Whether this inspection needs TensorFlow (xlnet_cli.py imports it, quietly, only then): every
    mode but --cleaning of a local DATA_DIR, which reads manifest.json alone."""
    from trainer.commands.flag_checks import is_local_path

    return not (args.cleaning and is_local_path(args.data_dir))


def check_flags(args: argparse.Namespace) -> None:
    """The flags checked before TensorFlow loads (xlnet_cli.py): their combinations, and with
    --permutation the training settings (--preset, a local --config, --set)."""
    from trainer.commands.flag_checks import is_local_path
    from trainer.launch.pretraining_run import pretraining_configs

    problem = _usage_problem(args)
    if problem:
        raise UsageError(problem)
    if args.permutation is not None and (args.config is None or is_local_path(args.config)):
        pretraining_configs(args.preset, args.config, args.overrides)


def run(args: argparse.Namespace) -> int:
    """Runs the chosen mode; 0 when done (for --verify: every shard intact). A usage problem or a
    DATA_DIR without a readable manifest raises a UsageError (exit 2), damaged data a DataError (3)."""
    problem = _usage_problem(args)
    if problem:
        raise UsageError(problem)
    if args.verify:
        _verify(args.data_dir, args.threads)
    elif args.cleaning:
        _cleaning(args)
    else:
        _inspect(args)
    return 0


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    if args.records < 1:
        return f"--records must be >= 1, got {args.records}"
    if args.plot and not (args.stats or args.cleaning):
        return "--plot draws the statistics or the cleaning: use it with --stats or --cleaning"
    if (args.overrides or args.config) and args.permutation is None:
        return "--config and --set give the training settings of --permutation: use them with it"
    return None


def _inspect(args: argparse.Namespace) -> None:
    import tensorflow as tf

    from tfrecords.manifest import ManifestError
    from tfrecords.tensorflow_errors import error_text
    from tfrecords.verification import DamagedDataError
    from tfrecords.vocabulary import VocabError

    try:
        for block in _outputs(args):
            print(block, flush=True)
    except (ManifestError, VocabError) as error:
        raise UsageError(f"DATA_DIR {args.data_dir}: {error}") from None
    except DamagedDataError as error:
        raise DamagedDataError(f"damaged data: {error}; `xlnet inspect {args.data_dir} --verify` checks every "
                               "shard") from None
    except tf.errors.OpError as error:  # the filesystem refused, e.g. no access
        raise UsageError(f"DATA_DIR {args.data_dir}: {error_text(error)}") from None


def _outputs(args: argparse.Namespace):
    """The blocks of output of the chosen mode, one at a time."""
    from trainer.inspection.records import DataDirectory

    data = DataDirectory.open(args.data_dir)
    if args.stats:
        yield from _stats(data, args)
        return
    views = _permutation_views(data, args) if args.permutation is not None else _record_views(data, args)
    for index, view in enumerate(views):
        if args.format == "json":
            yield json.dumps(view.to_json(), ensure_ascii=False)
        else:
            yield ("\n" if index else "") + view.to_text()


def _record_views(data, args: argparse.Namespace) -> list:
    from trainer.inspection.records import decode_record, default_stream, read_stream

    stream = args.stream if args.stream is not None else default_stream(data, args.split)
    return [decode_record(data, record) for record in read_stream(data, args.split, stream, args.records)]


def _permutation_views(data, args: argparse.Namespace) -> list:
    from trainer.inspection.permutations import step_views
    from trainer.launch.pretraining_run import pretraining_configs

    model, train, _ = pretraining_configs(args.preset, args.config, args.overrides)
    return step_views(data, model, train, args.split, args.permutation, args.records, args.stream)


def _stats(data, args: argparse.Namespace):
    from trainer.inspection.statistics import data_statistics, plot_statistics

    _plot_needs_matplotlib(args.plot)  # said before reading every record
    stats = data_statistics(data)
    yield json.dumps(stats.to_json(), indent=1) if args.format == "json" else stats.to_text()
    if args.plot:
        plot_statistics(stats, args.plot)
        if args.format == "text":
            yield f"plot written to {args.plot}"


def _cleaning(args: argparse.Namespace) -> None:
    """Prints the manifest's cleaning table (or the one line saying there was none), and draws it with --plot."""
    from trainer.inspection.cleaning_table import cleaning_table, no_cleaning_line, plot_cleaning

    _plot_needs_matplotlib(args.plot)
    manifest = _manifest(args.data_dir)
    table = cleaning_table(manifest)
    if table is None:
        print(no_cleaning_line(manifest))
        return
    print(json.dumps(table.to_json(), indent=1) if args.format == "json" else table.to_text())
    if args.plot:
        plot_cleaning(table, args.plot)
        if args.format == "text":
            print(f"plot written to {args.plot}")


def _manifest(data_dir: str):
    """DATA_DIR's manifest; a UsageError (exit 2) naming DATA_DIR when there is none to read."""
    from tfrecords.manifest import ManifestError, load_manifest

    refused: tuple[type[Exception], ...] = (ManifestError,)
    if "tensorflow" in sys.modules:  # loaded for a gs:// DATA_DIR (needs_tensorflow): its filesystem's refusals
        refused += (sys.modules["tensorflow"].errors.OpError,)
    try:
        return load_manifest(data_dir)
    except refused as error:
        raise UsageError(f"DATA_DIR {data_dir}: {error}") from None


def _plot_needs_matplotlib(plot: str | None) -> None:
    """The error of a --plot without matplotlib, said before any work."""
    if plot and importlib.util.find_spec("matplotlib") is None:
        from trainer.inspection.records import InspectionError

        raise InspectionError("--plot needs matplotlib, which is not installed: pip install '.[plot]' "
                              "(or pip install matplotlib)")


def _verify(data_dir: str, threads: int) -> None:
    from tfrecords.verification import DamagedDataError, verify_data_directory

    manifest = _manifest(data_dir)
    report = verify_data_directory(manifest, threads)
    for note in report.notes:
        print(f"note: {note}")
    for shard in report.damaged:
        print(shard.describe())
    print(report.summary(), flush=True)
    if report.damaged:
        raise DamagedDataError(f"{len(report.damaged)} damaged shard file(s) in {data_dir}, named above")
