"""`xlnet finetune`: fine-tune a model directory for classification, regression, multiple choice
or extractive question answering (squad).

  --task classification|regression|multiple-choice|squad --train FILE_OR_GLOB --eval FILE_OR_GLOB
  [--test FILE_OR_GLOB] --init-checkpoint MODEL_DIR --model-dir OUT [--max-seq-length N]
  [--preset tiny|base|large] [--config FILE] [--set key=value ...] [--strategy ...] [--tpu NAME]

The output is a model directory (trainer/runtime/model_dir.py; local or gs://) that `xlnet export` turns
into a SavedModel with a ``classify``, ``regress``, ``choose`` or ``answer`` signature. Besides
the files of any model directory it holds finetune_config.json, labels.json (classification),
eval_results.json and, with --test, predictions.jsonl (squad: predictions.json, null_odds.json
and, with --test, test_predictions.json and test_null_odds.json). Re-running the same command resumes
from the latest checkpoint.

Long documents: ``--set max_segments=N --set mem_len=M`` reads a text up to N segments of
max_seq_length through the Transformer-XL memory (classification, regression, multiple choice;
docs/finetuning.md, "Long documents").
"""
from __future__ import annotations

import argparse
import contextlib

from trainer.models.head_spec import TASKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet finetune`."""
    from trainer.commands.training_command import add_fit_arguments, add_run_arguments, field_help
    from trainer.configs.finetuning import FieldNames, FinetuneConfig
    from trainer.launch.finetuning_run import SQUAD_FLAGS
    from trainer.models.config import MODEL_PRESETS

    parser.add_argument("--task", required=True, choices=TASKS, help="what the head predicts")
    parser.add_argument("--train", required=True, help="training file or glob (local or gs://): CSV, TSV or "
                        "JSON lines with text, [text_b,] label; multiple choice: JSON lines with context, "
                        "[question,] options, label")
    parser.add_argument("--eval", required=True, help="labeled eval file or glob, scored every eval_every steps "
                                                      "and at the end (eval_results.json)")
    parser.add_argument("--test", help="file or glob to predict at the end (predictions.jsonl; squad: "
                                       "test_predictions.json); labels or answers optional")
    parser.add_argument("--init-checkpoint", help="model directory from `xlnet train` or `xlnet import-checkpoint` "
                                                  "(local or gs://); its vocabulary, casing and architecture are "
                                                  "reused. Without it: random weights of --preset (a baseline)")
    parser.add_argument("--model-dir", required=True, help="output model directory (local or gs://)")
    parser.add_argument("--max-seq-length", type=int, help="pieces per example, <sep>s and <cls> included "
                                                           "(default: the preset's)")
    parser.add_argument("--preset", choices=sorted(MODEL_PRESETS),
                        help="fine-tuning defaults (and, without --init-checkpoint, the architecture); default: "
                             "the preset whose architecture matches --init-checkpoint, else base; tiny without "
                             "--init-checkpoint")
    parser.add_argument("--vocab", help="SentencePiece model for a run without --init-checkpoint")
    parser.add_argument("--uncased", action=argparse.BooleanOptionalAction, default=None,
                        help="lower-case text (default: as the --init-checkpoint model was trained)")
    parser.add_argument("--text-field", default=FieldNames.text, help="column or key of the first text")
    parser.add_argument("--text-b-field", default=FieldNames.text_b, help="column or key of the optional second text")
    parser.add_argument("--label-field", default=FieldNames.label, help="column or key of the label")
    parser.add_argument("--format", dest="file_format", choices=("csv", "tsv", "jsonl"),
                        help="file format of --train/--eval/--test (default: from each file's extension)")
    squad = parser.add_argument_group("squad", "extractive question answering (SQuAD JSON files)")
    for name in SQUAD_FLAGS:
        squad.add_argument("--" + name.replace("_", "-"), type=int, help=field_help(FinetuneConfig, name))
    add_run_arguments(parser, "finetune")
    add_fit_arguments(parser)


def finetune_settings(args: argparse.Namespace):
    """The FinetuneSettings of the flags that resolve the configuration (`xlnet finetune`, `xlnet plan
    --task`)."""
    from trainer.launch.finetuning_run import SQUAD_FLAGS, FinetuneSettings

    squad = {name: getattr(args, name, None) for name in SQUAD_FLAGS}
    return FinetuneSettings(task=args.task, preset=args.preset, config_file=args.config,
                            overrides=tuple(args.overrides), max_seq_length=args.max_seq_length, **squad)


def finetuning_run(args: argparse.Namespace):
    """The FinetuningRun of `xlnet finetune`'s flags (where the Namespace ends)."""
    from trainer.launch.finetuning_run import FinetuningRun
    from trainer.tasks.sequence import FieldNames

    fields = FieldNames(args.text_field, args.text_b_field, args.label_field, args.file_format)
    return FinetuningRun(finetune_settings(args), train=args.train, eval=args.eval, model_dir=args.model_dir,
                         test=args.test, init_checkpoint=args.init_checkpoint, vocab=args.vocab,
                         uncased=args.uncased, fields=fields, strategy=args.strategy, tpu=args.tpu,
                         device_memory=args.device_memory)


def check_flags(args: argparse.Namespace) -> None:
    """The settings of the flags (--task, --preset, a local --config, --set, the SQuAD lengths) checked
    before TensorFlow loads (xlnet_cli.py), as the run checks them first (check_settings)."""
    from trainer.commands.flag_checks import is_local_path
    from trainer.launch.finetuning_run import check_settings

    if args.config is None or is_local_path(args.config):
        check_settings(finetune_settings(args))


def run(args: argparse.Namespace) -> int:
    """Fine-tunes; 0 when done or preempted (checkpoint saved). Bad input raises a UsageError (exit 2),
    divergence a DataError (exit 3)."""
    from trainer.commands.training_command import configure_logging, print_summary
    from trainer.launch.finetuning_run import build_finetuning, write_finetuning_outputs

    configure_logging()
    finetuning = finetuning_run(args)
    with contextlib.ExitStack() as held:
        controller = build_finetuning(finetuning, held)
        result = controller.train(evaluate_at_end=True)
        summary = write_finetuning_outputs(controller, finetuning, result)
    print_summary(summary)
    return 0
