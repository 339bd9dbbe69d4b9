"""`xlnet inspect DATA_DIR --verify`: read a preprocessed data directory back and check it.

Each way of looking at a data directory is one mode flag (one per run); ``--verify`` is the only
one so far. The checks live in tfrecords/verification.py, so that they need neither the trainer
nor Apache Beam.

Exit status: 0 when every shard is intact, 3 when any is damaged or missing, 2 on a usage error
or a DATA_DIR without a readable manifest.
"""
from __future__ import annotations

import argparse
import sys

from trainer.commands import EXIT_DATA, EXIT_USAGE

MODES = ("--verify",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet inspect`."""
    from tfrecords.verification import DEFAULT_THREADS

    parser.add_argument("data_dir", metavar="DATA_DIR",
                        help="data directory written by `xlnet preprocess` (local or gs://), or its manifest.json")
    modes = parser.add_argument_group("modes (one per run)").add_mutually_exclusive_group()
    modes.add_argument("--verify", action="store_true",
                       help="read every record of every shard and check it against manifest.json: CRCs, record "
                            "counts, stream layout, file sizes, token ids; names each damaged file and its first "
                            "bad record")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="shard files read at the same time")


def run(args: argparse.Namespace) -> int:
    """Runs the chosen mode; returns 0 (intact), 2 (usage, no manifest) or 3 (damaged data)."""
    if not args.verify:
        print(f"xlnet inspect: error: choose a mode; only {', '.join(MODES)} exists so far: "
              f"xlnet inspect {args.data_dir} --verify", file=sys.stderr)
        return EXIT_USAGE
    if args.threads < 1:
        print(f"xlnet inspect: error: --threads must be >= 1, got {args.threads}", file=sys.stderr)
        return EXIT_USAGE
    return _verify(args.data_dir, args.threads)


def _verify(data_dir: str, threads: int) -> int:
    import tensorflow as tf

    from tfrecords.manifest import ManifestError, load_manifest
    from tfrecords.verification import verify_data_directory

    try:
        manifest = load_manifest(data_dir)
    except (ManifestError, tf.errors.OpError) as error:  # OpError: the filesystem refused, e.g. no access
        print(f"xlnet inspect: error: DATA_DIR {data_dir}: {error}", file=sys.stderr)
        return EXIT_USAGE
    report = verify_data_directory(manifest, threads)
    for note in report.notes:
        print(f"note: {note}")
    for shard in report.damaged:
        print(shard.describe())
    print(report.summary(), flush=True)
    return EXIT_DATA if report.damaged else 0
