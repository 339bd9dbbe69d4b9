"""`xlnet import-checkpoint`: an original TF1 XLNet release (--checkpoint, --config, --spm) or a
Hugging Face transformers XLNet directory (--huggingface) -> a model directory (trainer/runtime/model_dir.py).

Writes OUTPUT/model_config.json, OUTPUT/spiece.model, OUTPUT/special_ids.json and
OUTPUT/checkpoints/ (tf.train.CheckpointManager with tf.train.Checkpoint(model=network)), which
`xlnet train --init-checkpoint` and `xlnet export` read. A Hugging Face model with a fine-tuning
head (XLNetForSequenceClassification, XLNetForMultipleChoice, XLNetForQuestionAnswering) becomes
a fine-tuned model directory: its checkpoint also holds ``head`` and finetune_config.json (and
labels.json) say which (trainer/models/head_spec.py's HeadSpec). So does an original checkpoint written by
run_squad.py: its head (start_logits, end_logits, answer_class; trainer/conversion/tf1_format.py's names)
makes a --task squad model directory with run_squad.py's beam widths (start_n_top 5, end_n_top 5).
Every path may be local or gs://.
"""
from __future__ import annotations

import argparse

from tfrecords.errors import UsageError
from trainer.models.config import ModelConfig

DEFAULTS = ModelConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet import-checkpoint`."""
    parser.add_argument("--huggingface", default=None, metavar="DIR",
                        help="a Hugging Face XLNet model directory (config.json, model.safetensors or its sharded "
                             "index, spiece.model; local or gs://), instead of --checkpoint/--config/--spm")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint prefix of the original release, e.g. "
                             "xlnet_cased_L-24_H-1024_A-16/xlnet_model.ckpt")
    parser.add_argument("--config", default=None, help="the release's xlnet_config.json (local or gs://)")
    parser.add_argument("--spm", default=None, help="the release's spiece.model (local or gs://)")
    parser.add_argument("--output", required=True, help="model directory to create (local or gs://)")
    # None = not given: the value the source records (a Hugging Face export of ours records all
    # of them), else the ModelConfig default shown.
    parser.add_argument("--mem-len", type=int, default=None,
                        help=f"Transformer-XL memory length for further training (default: {DEFAULTS.mem_len})")
    parser.add_argument("--reuse-len", type=int, default=None,
                        help=f"positions of each segment cached as memory (default: {DEFAULTS.reuse_len})")
    parser.add_argument("--bi-data", action=argparse.BooleanOptionalAction, default=None,
                        help=f"bidirectional data pipeline for further pretraining (default: {DEFAULTS.bi_data})")
    parser.add_argument("--clamp-len", type=int, default=None,
                        help=f"clip relative distances to this length (-1: no clipping; default: config.json's "
                             f"clamp_len, else {DEFAULTS.clamp_len})")
    parser.add_argument("--dropout", type=float, default=None,
                        help=f"dropout rate (default: config.json's dropout, else {DEFAULTS.dropout})")
    parser.add_argument("--dropatt", type=float, default=None,
                        help=f"attention dropout rate (default: the dropout of a Hugging Face config.json, "
                             f"else {DEFAULTS.dropatt})")


def check_flags(args: argparse.Namespace) -> None:
    """One source, whole: --huggingface alone, or all of --checkpoint, --config and --spm; checked
    before TensorFlow loads (xlnet_cli.py) and again by the import."""
    original = {"--checkpoint": args.checkpoint, "--config": args.config, "--spm": args.spm}
    given = [flag for flag, value in original.items() if value is not None]
    if args.huggingface is not None and given:
        raise UsageError(f"--huggingface reads one directory; drop {', '.join(given)}")
    if args.huggingface is None and len(given) < len(original):
        missing = [flag for flag in original if flag not in given]
        raise UsageError(f"an original release needs {', '.join(missing)} as well (or pass --huggingface DIR)")


def run(args: argparse.Namespace) -> int:
    """Imports and prints where the model directory went; bad input raises a UsageError (exit 2)."""
    from trainer.conversion.format_import import import_huggingface_to_model_dir, import_to_model_dir
    from trainer.runtime.model_dir import ModelDirectory

    check_flags(args)
    flags = dict(mem_len=args.mem_len, reuse_len=args.reuse_len, bi_data=args.bi_data, clamp_len=args.clamp_len,
                 dropout=args.dropout, dropatt=args.dropatt)
    if args.huggingface is not None:
        source = args.huggingface
        written = import_huggingface_to_model_dir(source, args.output, **flags)
    else:
        source = args.checkpoint
        overrides = {name: value for name, value in flags.items() if value is not None}
        written = import_to_model_dir(args.checkpoint, args.config, args.spm, args.output, **overrides)
    head = ModelDirectory(args.output).head_spec
    if head is not None and args.huggingface is None:
        print(f"imported the squad head of {source} (run_squad.py's start_logits, end_logits, answer_class; "
              f"beam widths start_n_top {head.start_n_top}, end_n_top {head.end_n_top}): a fine-tuned --task squad "
              "model directory", flush=True)
    print(f"imported {source} into {args.output} (checkpoint {written})", flush=True)
    return 0
