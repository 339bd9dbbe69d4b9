"""`xlnet goodput MODEL_DIR`: where a training job's wall time went, from its goodput.json.

The record `xlnet train` and `xlnet finetune` keep across every run on a model directory
(trainer/runtime/goodput.py): goodput, runs, and the seconds of start-up, compilation, productive
steps, evaluation, checkpoints, work lost to kills and the rest. Local or gs://; it may be read
while the job runs (the file is rewritten after every loop of steps).
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
    """Prints the breakdown; a directory without goodput.json is a UsageError (exit 2) naming it."""
    from tfrecords.errors import UsageError
    from trainer.runtime.goodput import describe, read_goodput
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.storage import failures_named

    directory = ModelDirectory(args.model_dir)
    with failures_named(directory.path, "read", "MODEL_DIR"):
        record = read_goodput(directory)
    if record is None:
        raise UsageError(f"MODEL_DIR {directory.path} has no {ModelDirectory.GOODPUT}: no run of `xlnet train` or "
                         "`xlnet finetune` has written it there")
    print(json.dumps(record, indent=2, sort_keys=True) if args.format == "json" else describe(record, directory.path),
          flush=True)
    return 0
