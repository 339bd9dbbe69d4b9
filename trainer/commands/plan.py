"""`xlnet plan`: whether a configuration fits a device, with which settings, and how long it takes,
before anything is launched (trainer/planning/).

  [--preset tiny|base|large] [--config FILE] [--set key=value ...] [--init-checkpoint MODEL_DIR]
  [--task classification|regression|multiple-choice|squad [--max-seq-length N]]
  [--device NAME | --device-memory SIZE] [--replicas N] [--mfu F] [--format text|json]

Without --task it plans pretraining (the configuration `xlnet train` resolves, --set keys
``train.NAME``); with --task, fine-tuning (`xlnet finetune`'s, keys ``finetune.NAME``). Exit status
0 with the plan; 2 on bad input, or when nothing fits the device (not even a micro-batch of 1
with remat full), which the plan then says with its numbers.
"""
from __future__ import annotations

import argparse
import json

from tfrecords.errors import UsageError
from trainer.models.head_spec import TASKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet plan`."""
    from trainer.commands.training_command import add_config_arguments
    from trainer.models.config import MODEL_PRESETS
    from trainer.planning.devices import DEVICE_NAMES
    from trainer.planning.plan import DEFAULT_MFU

    parser.add_argument("--preset", choices=sorted(MODEL_PRESETS),
                        help="model and training preset (default: tiny; with --task and --init-checkpoint the "
                             "preset matching its architecture)")
    add_config_arguments(parser, "train|finetune")  # finetune with --task
    parser.add_argument("--init-checkpoint", help="model directory whose model_config.json gives the architecture")
    parser.add_argument("--task", choices=TASKS, help="plan fine-tuning for this task (default: pretraining)")
    parser.add_argument("--max-seq-length", type=int, help="with --task: pieces per example (default: the preset's)")
    parser.add_argument("--device", help=f"one replica's device: {', '.join(DEVICE_NAMES)}")
    parser.add_argument("--device-memory", metavar="SIZE",
                        help="memory per replica, e.g. 16GiB, 80GB, 512MiB (replaces the --device's)")
    parser.add_argument("--replicas", type=int, default=1, help="replicas the global batch is spread over")
    parser.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                        help="assumed model FLOPs utilisation for the step time (fraction of the device's peak)")
    parser.add_argument("--format", dest="output_format", choices=("text", "json"), default="text",
                        help="text, or one JSON object")


def needs_tensorflow(args: argparse.Namespace) -> bool:
    """Whether this plan needs TensorFlow (xlnet_cli.py imports it, quietly, only then): to time
    this machine's matmul peak (``--device cpu``) or to read ``--init-checkpoint``; a named device's
    figures and the configurations are plain Python."""
    from trainer.planning.devices import CPU

    return (args.device or "").strip().lower() == CPU or bool(args.init_checkpoint)


def check_flags(args: argparse.Namespace) -> None:
    """The configurations resolved before TensorFlow loads (xlnet_cli.py; a plan for ``--device cpu``
    imports it to time this machine), so that a bad setting is refused at once. Not with
    --init-checkpoint, whose architecture the settings apply to."""
    from trainer.commands.flag_checks import is_local_path

    if args.init_checkpoint is None and (args.config is None or is_local_path(args.config)):
        resolve(args)


def run(args: argparse.Namespace) -> int:
    """Prints the plan; 0, or a UsageError (exit 2) on bad input or when nothing fits (after the plan,
    which shows the numbers)."""
    from trainer.planning.devices import format_bytes
    from trainer.planning.plan import USABLE_FRACTION, render_text

    plan = plan_of(args)
    print(json.dumps(plan.to_dict(), indent=2) if args.output_format == "json" else render_text(plan), flush=True)
    if plan.nothing_fits:
        smallest = plan.workload.breakdown(plan.workload.batch_step, "full", accumulation_steps=2).total
        raise UsageError(f"nothing fits: even a micro-batch of {plan.workload.batch_step} with remat full needs "
                         f"{format_bytes(smallest)} per replica, more than {format_bytes(plan.budget_bytes)} "
                         f"({USABLE_FRACTION:.0%} of {format_bytes(plan.memory_bytes)}); use a device with more "
                         "memory or a smaller model")
    return 0


def plan_of(args: argparse.Namespace):
    """The Plan of the flags: configs resolved as `xlnet train` / `xlnet finetune` resolve them."""
    from trainer.planning.devices import device_named, parse_memory_size
    from trainer.planning.plan import Workload, make_plan

    if args.replicas < 1:
        raise UsageError(f"--replicas must be at least 1, got {args.replicas}")
    memory = parse_memory_size(args.device_memory) if args.device_memory else None
    device = device_named(args.device) if args.device else None
    model, config = resolve(args)
    return make_plan(Workload(model, config, args.replicas), device, memory, args.mfu)


def resolve(args: argparse.Namespace):
    """(ModelConfig, TrainConfig) without --task, (ModelConfig, FinetuneConfig) with it: through the
    same functions `xlnet train` and `xlnet finetune` resolve with (trainer/launch/)."""
    from trainer.commands.finetune import finetune_settings
    from trainer.launch.finetuning_run import finetuning_configs
    from trainer.launch.pretraining_run import pretraining_configs
    from trainer.models.config import model_preset

    base_model = None
    if args.init_checkpoint:
        from trainer.runtime.model_dir import ModelDirectory

        init = ModelDirectory(args.init_checkpoint)
        init.require("--init-checkpoint", (ModelDirectory.MODEL_CONFIG,))
        base_model = init.model_config
    if args.task is None:
        if args.max_seq_length is not None:
            raise UsageError("--max-seq-length is a fine-tuning flag: give --task too (pretraining: --set seq_len=N)")
        model, train, _ = pretraining_configs(args.preset or "tiny", args.config, args.overrides, base_model)
        return model, train
    preset = args.preset or ("tiny" if base_model is None else None)
    return finetuning_configs(finetune_settings(args), base_model, model_preset(preset or "base").vocab_size,
                              preset=preset)
