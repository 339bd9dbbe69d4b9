"""`xlnet train` (also `python -m trainer.task`, trainer/task.py): pretrain XLNet on a preprocessed data directory.

Same flags both ways (the Vertex AI custom-job convention):
  --data DIR [--data DIR2 ... --mixture-weights W1,W2,...] [--eval-data DIR ...] --model-dir DIR
  --preset tiny|base|large [--config FILE] [--set key=value ...]
  [--strategy auto|cpu|gpu|mirrored|multi-worker|tpu] [--tpu NAME] [--init-checkpoint DIR]
  [--backend tensorflow|jax]

--backend jax runs the JAX engine (trainer/runtime/jax_engine.py): no TensorFlow needed, the same
model directory, step log, goodput and resume rules as the TensorFlow engine's.

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
import os
import sys

from tfrecords.errors import UsageError

BACKENDS = ("tensorflow", "jax")


def chosen_backend(args: argparse.Namespace) -> str:
    """The engine of the run: --backend, else KERAS_BACKEND when it names one, else TensorFlow."""
    if args.backend:
        return args.backend
    named = os.environ.get("KERAS_BACKEND", "tensorflow")
    if named not in BACKENDS:
        raise UsageError(f"KERAS_BACKEND={named}: `xlnet train` runs on {' or '.join(BACKENDS)} (--backend)")
    return named


def select_backend(backend: str) -> None:
    """Keras's backend set to ``backend`` before Keras is imported (it reads KERAS_BACKEND once)."""
    keras = sys.modules.get("keras")
    if keras is not None and keras.backend.backend() != backend:
        raise UsageError(f"--backend {backend}: Keras already runs on {keras.backend.backend()} in this process")
    os.environ["KERAS_BACKEND"] = backend


def needs_tensorflow(args: argparse.Namespace) -> bool:
    """Whether the run needs TensorFlow (xlnet_cli.py imports it, quietly, only then): not on JAX."""
    return chosen_backend(args) != "jax"


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
                                                  "weights initialise a new run, or a Hugging Face directory "
                                                  "(config.json, model.safetensors, spiece.model beside them)")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="the training engine: tensorflow (tf.distribute, the default) or jax (jit and Orbax, "
                             "no TensorFlow needed); default: KERAS_BACKEND when it names one of them")


def pretraining_run(args: argparse.Namespace):
    """The PretrainingRun of `xlnet train`'s flags (where the Namespace ends)."""
    from trainer.launch.pretraining_run import PretrainingRun

    return PretrainingRun(data=tuple(args.data), model_dir=args.model_dir, preset=args.preset,
                          mixture_weights=args.mixture_weights, eval_data=tuple(args.eval_data),
                          config_file=args.config, overrides=tuple(args.overrides),
                          init_checkpoint=args.init_checkpoint, strategy=args.strategy, tpu=args.tpu,
                          device_memory=args.device_memory, backend=chosen_backend(args))


def check_flags(args: argparse.Namespace) -> None:
    """The configuration of the flags (--preset, a local --config, --set) resolved before TensorFlow
    loads (xlnet_cli.py), so that a bad setting is refused at once. Not with --init-checkpoint, whose
    architecture the settings apply to: the run resolves them over it."""
    from trainer.commands.flag_checks import is_local_path
    from trainer.launch.pretraining_run import pretraining_configs

    from trainer.launch.pretraining_run import check_jax_run

    backend = chosen_backend(args)
    select_backend(backend)  # before anything imports Keras
    if backend == "jax":
        check_jax_run(pretraining_run(args))
    if args.init_checkpoint is None and (args.config is None or is_local_path(args.config)):
        pretraining_configs(args.preset, args.config, args.overrides)


def run(args: argparse.Namespace) -> int:
    """Trains; 0 when done or preempted (checkpoint saved). Bad input raises a UsageError (exit 2);
    divergence or damaged data (a shard missing or of another size than the manifest records) a
    DataError (exit 3)."""
    from trainer.commands.training_command import configure_logging, print_summary
    from trainer.launch.pretraining_run import build_jax_pretraining, build_pretraining

    configure_logging()
    run = pretraining_run(args)
    select_backend(run.backend)
    build = build_jax_pretraining if run.backend == "jax" else build_pretraining
    with contextlib.ExitStack() as held:
        result = build(run, held).train()
    print_summary({"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
                   "eval": dict(result.eval_metrics)})
    return 0
