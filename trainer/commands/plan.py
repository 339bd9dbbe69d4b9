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
import sys

from trainer.commands import EXIT_USAGE
from trainer.models.heads import TASKS


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


def run(args: argparse.Namespace) -> int:
    """Prints the plan; 0, or EXIT_USAGE on bad input or when nothing fits."""
    from trainer.planning.devices import format_bytes
    from trainer.planning.plan import render_text

    try:
        plan = plan_of(args)
    except (ValueError, FileNotFoundError) as error:
        print(f"xlnet plan: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(plan.to_dict(), indent=2) if args.output_format == "json" else render_text(plan))
    if plan.nothing_fits:
        smallest = plan.workload.breakdown(plan.workload.batch_step, "full", accumulation_steps=2).total
        print(f"xlnet plan: error: nothing fits: even a micro-batch of {plan.workload.batch_step} with remat full "
              f"needs {format_bytes(smallest)} per replica, more than {format_bytes(plan.budget_bytes)} "
              f"(95% of {format_bytes(plan.memory_bytes)}); use a device with more memory or a smaller model",
              file=sys.stderr)
        return EXIT_USAGE
    return 0


def plan_of(args: argparse.Namespace):
    """The Plan of the flags: configs resolved as `xlnet train` / `xlnet finetune` resolve them."""
    from trainer.planning.devices import device_named, parse_memory_size
    from trainer.planning.plan import Workload, make_plan

    if args.replicas < 1:
        raise ValueError(f"--replicas must be at least 1, got {args.replicas}")
    memory = parse_memory_size(args.device_memory) if args.device_memory else None
    device = device_named(args.device) if args.device else None
    model, config = resolve(args)
    return make_plan(Workload(model, config, args.replicas), device, memory, args.mfu)


def resolve(args: argparse.Namespace):
    """(ModelConfig, TrainConfig) without --task, (ModelConfig, FinetuneConfig) with it."""
    from trainer.commands.training_command import read_config_file
    from trainer.configs.overrides import resolve_configs
    from trainer.models.config import model_preset

    base_model = None
    if args.init_checkpoint:
        from trainer.runtime.model_dir import ModelDirectory

        init = ModelDirectory(args.init_checkpoint)
        init.require("--init-checkpoint", (ModelDirectory.MODEL_CONFIG,))
        base_model = init.model_config
    if args.task is None:
        if args.max_seq_length is not None:
            raise ValueError("--max-seq-length is a fine-tuning flag: give --task too (pretraining: --set seq_len=N)")
        model, train, _ = resolve_configs(args.preset or "tiny", read_config_file(args.config), args.overrides,
                                          base_model)
        return model, train
    from trainer.commands.finetune import SQUAD_FLAGS, _resolve_configs

    flags = argparse.Namespace(**vars(args), **{name: None for name in SQUAD_FLAGS if not hasattr(args, name)})
    preset = args.preset or ("tiny" if base_model is None else None)
    vocab_size = model_preset(preset or "base").vocab_size
    return _resolve_configs(flags, {"model": base_model, "vocab_size": vocab_size}, preset=preset)
