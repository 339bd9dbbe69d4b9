"""`xlnet train` (also `python -m trainer.task`, trainer/task.py): pretrain XLNet on a preprocessed data directory.

Same flags both ways (the Vertex AI custom-job convention):
  --data DIR [--data DIR2 ... --mixture-weights W1,W2,...] [--eval-data DIR ...] --model-dir DIR
  --preset tiny|base|large [--config FILE] [--set key=value ...]
  [--strategy auto|cpu|gpu|mirrored|multi-worker|tpu] [--tpu NAME] [--init-checkpoint DIR]

Several --data directories make a mixture (tfrecords/mixture.py): each was preprocessed on its own and
they must agree on shapes, vocabulary and casing.

The model directory (trainer/runtime/model_dir.py; local or gs://) receives model_config.json,
train_config.json (the resolved configs), spiece.model and special_ids.json (so `xlnet export`
works from it), checkpoints/, tensorboard/ and the step log. Re-running the same command
resumes from the latest checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet train`."""
    from trainer.commands.fit_check import add_fit_arguments
    from trainer.commands.training_command import add_run_arguments
    from trainer.models.config import MODEL_PRESETS

    parser.add_argument("--data", required=True, action="append",
                        help="data directory written by `xlnet preprocess` (local or gs://); give it several times "
                             "to train on a mixture, at the rates of --mixture-weights")
    parser.add_argument("--mixture-weights", metavar="W1,W2,...",
                        help="one positive weight per --data, in the same order (normalised): the share of the "
                             "records each directory gives; every batch row still reads whole streams")
    parser.add_argument("--eval-data", action="append", default=[], metavar="DIR",
                        help="a data directory only evaluated on (its valid split), e.g. a held-out domain; "
                             "repeatable")
    parser.add_argument("--model-dir", required=True,
                        help="where configs, checkpoints and summaries go (local or gs://)")
    parser.add_argument("--preset", default="tiny", choices=sorted(MODEL_PRESETS),
                        help="model + training preset")
    add_run_arguments(parser, "train")
    add_fit_arguments(parser)
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
    from tfrecords.manifest import load_manifest, manifest_location, vocabulary_path
    from tfrecords.mixture import MixtureSource, check_compatible, check_distinct, parse_weights
    from tfrecords.reader import file_sha256, validate_manifest
    from trainer.commands.training_command import read_config_file
    from trainer.commands.fit_check import fit_to_device
    from trainer.configs.overrides import resolve_configs
    from trainer.runtime.distribution import create_strategy, is_chief, make_deterministic
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.run_lock import RunLock
    from trainer.tasks.pretraining import pretraining_controller

    check_distinct(args.data)
    check_distinct(args.data + args.eval_data, "--eval-data")
    weights = parse_weights(args.mixture_weights, len(args.data))
    manifests = [load_manifest(data) for data in args.data]
    eval_manifests = [load_manifest(data) for data in args.eval_data]
    for data, manifest in zip(args.data + args.eval_data, manifests + eval_manifests):
        _check_shard_files(manifest, data)
    check_compatible(list(zip(args.data + args.eval_data, manifests + eval_manifests)))
    manifest = manifests[0]
    init = ModelDirectory(args.init_checkpoint) if args.init_checkpoint else None
    if init is not None:
        init.require("--init-checkpoint", (ModelDirectory.MODEL_CONFIG, ModelDirectory.VOCAB))
    base_model = init.model_config if init is not None else None
    model, train, explicit = resolve_configs(args.preset, read_config_file(args.config), args.overrides, base_model)
    mixture = [MixtureSource(data, m, weight) for data, m, weight in zip(args.data, manifests, weights)]
    if len(mixture) > 1:
        train = train.replace(mixture=tuple((source.name, source.weight) for source in mixture))
    if train.deterministic:
        make_deterministic()
    data_vocab_size = int(manifest.vocab["vocab_size"])
    if base_model is None and "vocab_size" not in explicit and model.vocab_size != data_vocab_size:
        model = model.replace(vocab_size=data_vocab_size)  # the preset's size is a default, the data's is a fact
    vocab_path = init.join(ModelDirectory.VOCAB) if init is not None else vocabulary_path(manifest)
    vocab_sha256 = file_sha256(vocab_path)
    for data, each in zip(args.data + args.eval_data, manifests + eval_manifests):
        validate_manifest(each, seq_len=train.seq_len, reuse_len=model.reuse_len, bi_data=model.bi_data,
                          num_predict=train.num_predict, vocab_size=model.vocab_size, vocab_sha256=vocab_sha256,
                          source=manifest_location(data)[0])
    strategy = create_strategy("tpu" if args.tpu and args.strategy == "auto" else args.strategy, args.tpu)
    train = fit_to_device("xlnet train", model, train, strategy, getattr(args, "device_memory", None))
    after_first_save = None
    if is_chief(strategy):
        if held is not None:
            held.enter_context(RunLock(ModelDirectory(args.model_dir), log=lambda line: print(line, flush=True)))
        after_first_save = _prepare_model_dir(ModelDirectory(args.model_dir), model, train, manifest.special_ids,
                                              vocab_path, uncased=bool(manifest.config.get("uncased", False)))
    eval_sources = [MixtureSource(data, m, 1.0) for data, m in zip(args.eval_data, eval_manifests)]
    return pretraining_controller(model, train, manifest=manifest, model_dir=args.model_dir, strategy=strategy,
                                  init_checkpoint=args.init_checkpoint, log=lambda line: print(line, flush=True),
                                  after_first_save=after_first_save, mixture=mixture if len(mixture) > 1 else (),
                                  eval_sources=eval_sources)


def _check_shard_files(manifest, data: str) -> None:
    """Every shard the manifest lists is there with its recorded size, before anything is built: a
    truncated or missing shard would otherwise surface only when the reader reaches it, hours in.
    Raises DamagedDataError; no record is read (`xlnet inspect --verify` reads them all)."""
    from tfrecords.verification import check_shard_files

    if not check_shard_files(manifest):
        print(f"xlnet train: note: {data}'s manifest records no shard sizes (written before they were "
              f"recorded): only checked that every shard exists; `xlnet inspect {data} --verify` checks "
              "every record", file=sys.stderr, flush=True)


def _prepare_model_dir(model_dir, model, train, special_ids: dict, vocab_path: str, uncased: bool):
    """Writes the resolved configs, spiece.model and special_ids.json into the model directory.

    An existing model directory must hold the same architecture: resuming with another one
    would silently restore mismatched weights. Changed training settings are allowed and printed;
    train_config.json then changes only once the run has saved a checkpoint with them (a run that
    fails before leaves the settings of its checkpoints): the returned function, for the controller.
    """
    from trainer.commands.training_command import settings_replacement

    model_dir.check_same_model(model)
    _check_same_mixture(model_dir, train)
    model_dir.write_model_files(model, special_ids, vocab_path, uncased=uncased)
    return settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train)


def _check_same_mixture(model_dir, train) -> None:
    """Refuses to resume a run on another mixture: the reader replays the saved mixture's schedule to
    find where each row stopped, so other directories or weights would read other batches."""
    if not model_dir.has(model_dir.TRAIN_CONFIG):
        return
    from trainer.runtime.storage import read_json

    saved_mixture = read_json(model_dir.join(model_dir.TRAIN_CONFIG)).get("mixture", ())
    saved = tuple((str(name), float(weight)) for name, weight in saved_mixture)
    if saved == train.mixture:
        return

    def shown(mixture) -> str:
        return ", ".join(f"{name} ({weight:.4g})" for name, weight in mixture) or "one --data directory"

    raise ValueError(f"{model_dir.join(model_dir.TRAIN_CONFIG)} trained on {shown(saved)}; this command gives "
                     f"{shown(train.mixture)}. A resumed run must read the same mixture (same --data directories "
                     "in the same order, same --mixture-weights); to train on another one, start a new model "
                     "directory with --init-checkpoint")
