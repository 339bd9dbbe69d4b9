"""`xlnet import-checkpoint`: an original TF1 XLNet release (--checkpoint, --config, --spm) or a
Hugging Face transformers XLNet directory (--huggingface) -> a model directory (trainer/runtime/model_dir.py).

Writes OUTPUT/model_config.json, OUTPUT/spiece.model, OUTPUT/special_ids.json and
OUTPUT/checkpoints/ (tf.train.CheckpointManager with tf.train.Checkpoint(model=network)), which
`xlnet train --init-checkpoint` and `xlnet export` read. A Hugging Face model with a fine-tuning
head (XLNetForSequenceClassification, XLNetForMultipleChoice, XLNetForQuestionAnswering) becomes
a fine-tuned model directory: its checkpoint also holds ``head`` and finetune_config.json (and
labels.json) say which (trainer/models/heads.py's HeadSpec). So does an original checkpoint written by
run_squad.py: its head (start_logits, end_logits, answer_class; trainer/conversion/tf1_format.py's names)
makes a --task squad model directory with run_squad.py's beam widths (start_n_top 5, end_n_top 5).
Every path may be local or gs://.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Optional

from trainer.models.config import ModelConfig

if TYPE_CHECKING:  # imported where used: `xlnet --help` should not load TensorFlow
    from trainer.models.network import XLNetNetwork
    from trainer.models.question_answering import XLNetForQuestionAnswering

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
                        help=f"Transformer-XL memory length for further training (default {DEFAULTS.mem_len})")
    parser.add_argument("--reuse-len", type=int, default=None,
                        help=f"positions of each segment cached as memory (default {DEFAULTS.reuse_len})")
    parser.add_argument("--bi-data", action=argparse.BooleanOptionalAction, default=None,
                        help=f"bidirectional data pipeline for further pretraining (default {DEFAULTS.bi_data})")
    parser.add_argument("--clamp-len", type=int, default=None,
                        help=f"clip relative distances to this length (-1: no clipping; default: config.json's "
                             f"clamp_len, else {DEFAULTS.clamp_len})")
    parser.add_argument("--dropout", type=float, default=None,
                        help=f"dropout rate (default: config.json's dropout, else {DEFAULTS.dropout})")
    parser.add_argument("--dropatt", type=float, default=None,
                        help=f"attention dropout rate (default: the dropout of a Hugging Face config.json, "
                             f"else {DEFAULTS.dropatt})")


def new_model_directory(output: str):
    """The --output ModelDirectory, refused when it already holds checkpoints."""
    from trainer.conversion.tf1_checkpoint import CheckpointImportError
    from trainer.runtime.model_dir import ModelDirectory

    target = ModelDirectory(output)
    if target.latest_checkpoint() is not None:
        raise CheckpointImportError(f"--output {output}: already holds checkpoints; choose a new directory")
    return target


def save_checkpoint(target, **objects) -> str:
    """The one checkpoint of an imported model directory (``model=network``, plus ``head`` when
    fine-tuned); returns its prefix."""
    import tensorflow as tf

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), target.checkpoints, max_to_keep=1)
    return manager.save(checkpoint_number=0)


def load_release_weights(network: XLNetNetwork, checkpoint: str) -> Optional[XLNetForQuestionAnswering]:
    """Assigns the original checkpoint's encoder to ``network`` and, when the checkpoint holds
    run_squad.py's head, that head to a squad head built over ``network``; returns the head or None.
    Every variable, the head's included, is checked by name and shape before any is assigned."""
    from trainer.conversion.tf1_checkpoint import (
        assign_checked_weights,
        original_variable_map,
        read_original_checkpoint,
    )
    from trainer.conversion.tf1_format import build_question_answering_head, question_answering_variable_map

    source = f"checkpoint {checkpoint}"
    weights = read_original_checkpoint(checkpoint)
    head = build_question_answering_head(network, weights, source)
    targets = original_variable_map(network)
    if head is not None:
        targets.update(question_answering_variable_map(head))
    assign_checked_weights(targets, weights, source)
    return head


def import_to_model_dir(checkpoint: str, config_path: str, spm_path: str, output: str, **overrides) -> str:
    """Converts the release and writes the model directory (local or gs://), a fine-tuned squad
    one when the checkpoint holds run_squad.py's head; returns the checkpoint written. Nothing is
    written before every variable is checked."""
    from tfrecords.vocabulary import parse_vocab
    from trainer.conversion.tf1_checkpoint import CheckpointImportError, read_original_config
    from trainer.conversion.tf1_format import RUN_SQUAD_HEAD
    from trainer.models.network import build_network
    from trainer.runtime.storage import read_bytes

    target = new_model_directory(output)
    config = read_original_config(config_path, **overrides)
    vocab = parse_vocab(read_bytes(spm_path), spm_path, source=f"--spm {spm_path!r}")
    if vocab.vocab_size != config.vocab_size:
        raise CheckpointImportError(f"--spm {spm_path} has {vocab.vocab_size} pieces but --config {config_path} "
                                    f"has n_token {config.vocab_size}: they are not from the same release")
    network = build_network(config)
    head = load_release_weights(network, checkpoint)
    target.write_model_files(config, vocab.special_ids.to_dict(), spm_path)
    if head is None:
        return save_checkpoint(target, model=network)
    target.write_head_files(RUN_SQUAD_HEAD)
    print(f"imported the squad head of {checkpoint} (run_squad.py's start_logits, end_logits, answer_class; "
          f"beam widths start_n_top {RUN_SQUAD_HEAD.start_n_top}, end_n_top {RUN_SQUAD_HEAD.end_n_top}): "
          "a fine-tuned --task squad model directory", flush=True)
    return save_checkpoint(target, model=network, head=head)


def import_huggingface_to_model_dir(source: str, output: str, **overrides) -> str:
    """Converts a Hugging Face XLNet directory and writes the model directory (local or gs://),
    with the fine-tuning head files when the source has a head; returns the checkpoint written.
    Every tensor is checked before anything is assigned or written."""
    import posixpath

    from trainer.conversion.huggingface_format import VOCAB, read_huggingface_directory
    from trainer.models.network import build_network

    target = new_model_directory(output)
    model = read_huggingface_directory(source, **overrides)
    network = build_network(model.config)
    head = None if model.head is None else model.head.build(network)
    model.load_into(network, head)
    target.write_model_files(model.config, model.special_ids, posixpath.join(source.rstrip("/"), VOCAB),
                             uncased=model.uncased)
    if head is None:
        return save_checkpoint(target, model=network)
    target.write_head_files(model.head)
    return save_checkpoint(target, model=network, head=head)


def run(args: argparse.Namespace) -> int:
    """Imports and prints where the model directory went; returns 2 with a message on bad input."""
    from tfrecords.vocabulary import VocabError
    from trainer.conversion.huggingface_format import HuggingFaceFormatError
    from trainer.conversion.tf1_checkpoint import CheckpointImportError
    from trainer.runtime.storage import StorageError

    original = {"--checkpoint": args.checkpoint, "--config": args.config, "--spm": args.spm}
    given = [flag for flag, value in original.items() if value is not None]
    if args.huggingface is not None and given:
        print(f"xlnet import-checkpoint: error: --huggingface reads one directory; drop {', '.join(given)}",
              file=sys.stderr)
        return 2
    if args.huggingface is None and len(given) < len(original):
        missing = [flag for flag in original if flag not in given]
        print(f"xlnet import-checkpoint: error: an original release needs {', '.join(missing)} as well "
              "(or pass --huggingface DIR)", file=sys.stderr)
        return 2
    flags = dict(mem_len=args.mem_len, reuse_len=args.reuse_len, bi_data=args.bi_data, clamp_len=args.clamp_len,
                 dropout=args.dropout, dropatt=args.dropatt)
    try:
        if args.huggingface is not None:
            source = args.huggingface
            written = import_huggingface_to_model_dir(source, args.output, **flags)
        else:
            source = args.checkpoint
            overrides = {name: value for name, value in flags.items() if value is not None}
            written = import_to_model_dir(args.checkpoint, args.config, args.spm, args.output, **overrides)
    except (CheckpointImportError, HuggingFaceFormatError, VocabError, StorageError) as error:
        print(f"xlnet import-checkpoint: error: {error}", file=sys.stderr)
        return 2
    print(f"imported {source} into {args.output} (checkpoint {written})", flush=True)
    return 0
