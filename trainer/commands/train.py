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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet train`."""
    from trainer.commands.training_command import add_fit_arguments, add_run_arguments
    from trainer.launch.pretraining_run import PretrainingRun
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
    parser.add_argument("--preset", default=PretrainingRun.preset, choices=sorted(MODEL_PRESETS),
                        help="model + training preset")
    add_run_arguments(parser, "train")
    add_fit_arguments(parser)
    parser.add_argument("--init-checkpoint", help="model directory (e.g. from `xlnet import-checkpoint`) whose "
                                                  "weights initialise a new run")


def pretraining_run(args: argparse.Namespace):
    """The PretrainingRun of `xlnet train`'s flags (where the Namespace ends)."""
    from trainer.launch.pretraining_run import PretrainingRun

    return PretrainingRun(data=tuple(args.data), model_dir=args.model_dir, preset=args.preset,
                          mixture_weights=args.mixture_weights, eval_data=tuple(args.eval_data),
                          config_file=args.config, overrides=tuple(args.overrides),
                          init_checkpoint=args.init_checkpoint, strategy=args.strategy, tpu=args.tpu,
                          device_memory=args.device_memory)


def check_flags(args: argparse.Namespace) -> None:
    """The configuration of the flags (--preset, a local --config, --set) resolved before TensorFlow
    loads (xlnet_cli.py), so that a bad setting is refused at once. Not with --init-checkpoint, whose
    architecture the settings apply to: the run resolves them over it."""
    from trainer.commands.flag_checks import is_local_path
    from trainer.launch.pretraining_run import pretraining_configs

    if args.init_checkpoint is None and (args.config is None or is_local_path(args.config)):
        pretraining_configs(args.preset, args.config, args.overrides)


def run(args: argparse.Namespace) -> int:
    """Trains; 0 when done or preempted (checkpoint saved). Bad input raises a UsageError (exit 2);
    divergence or damaged data (a shard missing or of another size than the manifest records) a
    DataError (exit 3)."""
    from trainer.commands.training_command import configure_logging, print_summary
    from trainer.launch.pretraining_run import build_pretraining

    configure_logging()
    with contextlib.ExitStack() as held:
        result = build_pretraining(pretraining_run(args), held).train()
    print_summary({"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
                   "eval": dict(result.eval_metrics)})
    return 0
