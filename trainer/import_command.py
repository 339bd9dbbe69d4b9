"""`xlnet import-checkpoint`: an original TF1 XLNet release -> a model directory (trainer/model_dir.py).

Writes OUTPUT/model_config.json, OUTPUT/spiece.model, OUTPUT/special_ids.json and
OUTPUT/checkpoints/ (tf.train.CheckpointManager with tf.train.Checkpoint(model=network)), which
`xlnet train --init-checkpoint` and `xlnet export` read. Every path may be local or gs://.
"""
from __future__ import annotations

import argparse
import sys

from trainer.config import ModelConfig

DEFAULTS = ModelConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet import-checkpoint`."""
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint prefix of the release, e.g. xlnet_cased_L-24_H-1024_A-16/xlnet_model.ckpt")
    parser.add_argument("--config", required=True, help="the release's xlnet_config.json (local or gs://)")
    parser.add_argument("--spm", required=True, help="the release's spiece.model (local or gs://)")
    parser.add_argument("--output", required=True, help="model directory to create (local or gs://)")
    parser.add_argument("--mem-len", type=int, default=DEFAULTS.mem_len,
                        help="Transformer-XL memory length for further training (not in xlnet_config.json)")
    parser.add_argument("--reuse-len", type=int, default=DEFAULTS.reuse_len,
                        help="positions of each segment cached as memory (not in xlnet_config.json)")
    parser.add_argument("--bi-data", action=argparse.BooleanOptionalAction, default=DEFAULTS.bi_data,
                        help="bidirectional data pipeline for further pretraining")
    parser.add_argument("--clamp-len", type=int, default=DEFAULTS.clamp_len,
                        help="clip relative distances to this length (-1: no clipping)")
    parser.add_argument("--dropout", type=float, default=DEFAULTS.dropout, help="dropout rate")
    parser.add_argument("--dropatt", type=float, default=DEFAULTS.dropatt, help="attention dropout rate")


def import_to_model_dir(checkpoint: str, config_path: str, spm_path: str, output: str, **overrides) -> str:
    """Converts the release and writes the model directory (local or gs://); returns the checkpoint written."""
    import tensorflow as tf

    from tfrecords.vocabulary import parse_vocab
    from trainer.checkpoint_import import CheckpointImportError, import_original, read_original_config
    from trainer.model_dir import ModelDirectory
    from trainer.storage import read_bytes

    target = ModelDirectory(output)
    if target.latest_checkpoint() is not None:
        raise CheckpointImportError(f"--output {output}: already holds checkpoints; choose a new directory")
    config = read_original_config(config_path, **overrides)
    vocab = parse_vocab(read_bytes(spm_path), spm_path, source=f"--spm {spm_path!r}")
    if vocab.vocab_size != config.vocab_size:
        raise CheckpointImportError(f"--spm {spm_path} has {vocab.vocab_size} pieces but --config {config_path} "
                                    f"has n_token {config.vocab_size}: they are not from the same release")
    network = import_original(checkpoint, config_path, **overrides)
    target.write_model_files(config, vocab.special_ids.to_dict(), spm_path)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=network), target.checkpoints, max_to_keep=1)
    return manager.save(checkpoint_number=0)


def run(args: argparse.Namespace) -> int:
    """Imports and prints where the model directory went; returns 2 with a message on bad input."""
    from tfrecords.vocabulary import VocabError
    from trainer.checkpoint_import import CheckpointImportError
    from trainer.storage import StorageError

    overrides = dict(mem_len=args.mem_len, reuse_len=args.reuse_len, bi_data=args.bi_data, clamp_len=args.clamp_len,
                     dropout=args.dropout, dropatt=args.dropatt)
    try:
        written = import_to_model_dir(args.checkpoint, args.config, args.spm, args.output, **overrides)
    except (CheckpointImportError, VocabError, StorageError) as error:
        print(f"xlnet import-checkpoint: error: {error}", file=sys.stderr)
        return 2
    print(f"imported {args.checkpoint} into {args.output} (checkpoint {written})", flush=True)
    return 0
