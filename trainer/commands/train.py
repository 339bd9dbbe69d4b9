"""`xlnet train` (also `python -m trainer.task`, trainer/task.py): pretrain XLNet on a preprocessed data directory.

Same flags both ways (the Vertex AI custom-job convention):
  --data DIR --model-dir DIR --preset tiny|base|large [--config FILE] [--set key=value ...]
  [--strategy auto|cpu|gpu|mirrored|multi-worker|tpu] [--tpu NAME] [--init-checkpoint DIR]

The model directory (trainer/runtime/model_dir.py; local or gs://) receives model_config.json,
train_config.json (the resolved configs), spiece.model and special_ids.json (so `xlnet export`
works from it), checkpoints/, tensorboard/ and the step log. Re-running the same command
resumes from the latest checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import posixpath
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet train`."""
    from trainer.commands.training_command import add_run_arguments
    from trainer.models.config import MODEL_PRESETS

    parser.add_argument("--data", required=True, help="data directory written by `xlnet preprocess` (local or gs://)")
    parser.add_argument("--model-dir", required=True,
                        help="where configs, checkpoints and summaries go (local or gs://)")
    parser.add_argument("--preset", default="tiny", choices=sorted(MODEL_PRESETS),
                        help="model + training preset")
    add_run_arguments(parser, "train")
    parser.add_argument("--init-checkpoint", help="model directory (e.g. from `xlnet import-checkpoint`) whose "
                                                  "weights initialise a new run")


def run(args: argparse.Namespace) -> int:
    """Trains; returns 0 when done or preempted (checkpoint saved), 2 on bad input, 3 on divergence or
    damaged data (a shard missing or of another size than the manifest records)."""
    from tfrecords.manifest import ManifestError
    from tfrecords.verification import DamagedDataError
    from trainer.commands.training_command import configure_logging, run_training

    configure_logging()

    def train() -> dict:
        with contextlib.ExitStack() as held:
            result = _build_trainer(args, held).train()
        return {"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
                "eval": dict(result.eval_metrics)}

    return run_training("xlnet train", train, (ValueError, ManifestError, FileNotFoundError), (DamagedDataError,))


def _build_trainer(args: argparse.Namespace, held: contextlib.ExitStack | None = None):
    """The pretraining controller of ``args``; with ``held``, the chief first takes the model
    directory's run lock (trainer/runtime/run_lock.py), released when ``held`` closes."""
    from tfrecords.manifest import load_manifest, manifest_location
    from tfrecords.reader import file_sha256, validate_manifest
    from trainer.commands.training_command import read_config_file
    from trainer.configs.overrides import resolve_configs
    from trainer.runtime.distribution import create_strategy, is_chief, make_deterministic
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.run_lock import RunLock
    from trainer.tasks.pretraining import pretraining_controller

    manifest = load_manifest(args.data)
    _check_shard_files(manifest, args.data)
    init = ModelDirectory(args.init_checkpoint) if args.init_checkpoint else None
    if init is not None:
        init.require("--init-checkpoint", (ModelDirectory.MODEL_CONFIG, ModelDirectory.VOCAB))
    base_model = init.model_config if init is not None else None
    model, train, explicit = resolve_configs(args.preset, read_config_file(args.config), args.overrides, base_model)
    if train.deterministic:
        make_deterministic()
    data_vocab_size = int(manifest.vocab["vocab_size"])
    if base_model is None and "vocab_size" not in explicit and model.vocab_size != data_vocab_size:
        model = model.replace(vocab_size=data_vocab_size)  # the preset's size is a default, the data's is a fact
    vocab_path = init.join(ModelDirectory.VOCAB) if init is not None else _vocab_path(manifest)
    validate_manifest(manifest, seq_len=train.seq_len, reuse_len=model.reuse_len, bi_data=model.bi_data,
                      num_predict=train.num_predict, vocab_size=model.vocab_size,
                      vocab_sha256=file_sha256(vocab_path), source=manifest_location(args.data)[0])
    strategy = create_strategy("tpu" if args.tpu and args.strategy == "auto" else args.strategy, args.tpu)
    after_first_save = None
    if is_chief(strategy):
        if held is not None:
            held.enter_context(RunLock(ModelDirectory(args.model_dir), log=lambda line: print(line, flush=True)))
        after_first_save = _prepare_model_dir(ModelDirectory(args.model_dir), model, train, manifest.special_ids,
                                              vocab_path, uncased=bool(manifest.config.get("uncased", False)))
    return pretraining_controller(model, train, manifest=manifest, model_dir=args.model_dir, strategy=strategy,
                                  init_checkpoint=args.init_checkpoint, log=lambda line: print(line, flush=True),
                                  after_first_save=after_first_save)


def _check_shard_files(manifest, data: str) -> None:
    """Every shard the manifest lists is there with its recorded size, before anything is built: a
    truncated or missing shard would otherwise surface only when the reader reaches it, hours in.
    Raises DamagedDataError; no record is read (`xlnet inspect --verify` reads them all)."""
    from tfrecords.verification import check_shard_files

    if not check_shard_files(manifest):
        print(f"xlnet train: note: {data}'s manifest records no shard sizes (written before they were "
              f"recorded): only checked that every shard exists; `xlnet inspect {data} --verify` checks "
              "every record", file=sys.stderr, flush=True)


def _vocab_path(manifest) -> str:
    """The SentencePiece model the data names: where the manifest says, or next to manifest.json."""
    import tensorflow as tf

    named = str(manifest.vocab.get("path", ""))
    candidates = [named, manifest.resolve(named), manifest.resolve(posixpath.basename(named) or "spiece.model")]
    for candidate in candidates:
        if candidate and tf.io.gfile.exists(candidate) and not tf.io.gfile.isdir(candidate):
            return candidate
    raise ValueError(f"the manifest's vocabulary {named!r} was not found (tried {', '.join(candidates)}); "
                     "put the SentencePiece model there or next to manifest.json")


def _prepare_model_dir(model_dir, model, train, special_ids: dict, vocab_path: str, uncased: bool):
    """Writes the resolved configs, spiece.model and special_ids.json into the model directory.

    An existing model directory must hold the same architecture: resuming with another one
    would silently restore mismatched weights. Changed training settings are allowed and printed;
    train_config.json then changes only once the run has saved a checkpoint with them (a run that
    fails before leaves the settings of its checkpoints): the returned function, for the controller.
    """
    from trainer.commands.training_command import settings_replacement

    model_dir.check_same_model(model)
    model_dir.write_model_files(model, special_ids, vocab_path, uncased=uncased)
    return settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train)
