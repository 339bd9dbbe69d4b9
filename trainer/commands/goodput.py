"""`xlnet goodput MODEL_DIR`: where a training job's wall time went, from its goodput.json.

The record `xlnet train` and `xlnet finetune` keep across every run on a model directory
(trainer/runtime/goodput.py): goodput, runs, and the seconds of start-up, compilation, productive
steps, evaluation, checkpoints, work lost to kills and the rest. Local or gs://; it may be read
while the job runs (the file is rewritten after every loop of steps). A local directory is read
without importing TensorFlow; a gs:// one imports it for its file system.
"""
from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet goodput`."""
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="model directory of `xlnet train` or `xlnet finetune` "
                                                               "(local or gs://)")
    parser.add_argument("--format", default="text", choices=("text", "json"),
                        help="text (a line per category, largest first), or goodput.json's JSON")


def run(args: argparse.Namespace) -> int:
    """Prints the breakdown; a directory without goodput.json is a UsageError (exit 2) naming it, a
    goodput.json that is not a record a DataError (exit 3) saying what is wrong. A local directory
    is read without TensorFlow; a gs:// one needs TensorFlow's file system, imported quietly."""
    from tfrecords.errors import UsageError
    from trainer.runtime.goodput import FILE, describe, read_goodput
    from trainer.runtime.storage import failures_named

    directory = args.model_dir.rstrip("/") or "/"
    if "://" in directory:
        from trainer.commands.tensorflow_startup import import_tensorflow_quietly

        import_tensorflow_quietly()
    with failures_named(directory, "read", "MODEL_DIR"):
        record = read_goodput(directory)
    if record is None:
        raise UsageError(f"MODEL_DIR {directory} has no {FILE}: no run of `xlnet train` or "
                         "`xlnet finetune` has written it there")
    print(json.dumps(record, indent=2, sort_keys=True) if args.format == "json" else describe(record, directory),
          flush=True)
    return 0
