"""The `xlnet` command: one subcommand per job, each implemented in its own module.

Every subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their subcommand runs, so `xlnet vocab --help` does not
pay for importing TensorFlow.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "vocab": ("pipeline.vocab_command", "train a SentencePiece vocabulary with XLNet's special symbols"),
    "preprocess": ("pipeline.preprocess_command", "turn a text corpus into XLNet TFRecord shards (Apache Beam)"),
    "train": ("trainer.commands.train", "pretrain XLNet on preprocessed records (tf.distribute)"),
    "finetune": ("trainer.commands.finetune",
                 "fine-tune a model for classification, regression, multiple choice or extractive QA (squad)"),
    "import-checkpoint": ("trainer.commands.import_checkpoint",
                          "convert an original TF1 release or a Hugging Face XLNet directory into a model directory"),
    "export": ("trainer.commands.export",
               "export a model directory as a serving SavedModel (or for Hugging Face, or in the TF1 layout)"),
    "plan": ("trainer.commands.plan",
             "predict a configuration's memory and step time on a device, and the settings that fit it"),
    "inspect": ("trainer.commands.inspect", "decode a data directory's records as the model sees them, its "
                "statistics (--stats), the trainer's permutations (--permutation), or verify it (--verify)"),
}
# Said under every subcommand's --help; trainer/commands/__init__.py names the codes for the code.
EXIT_STATUS = ("exit status: 0 done (or preempted, with a checkpoint saved); 2 usage or bad input (a flag, file "
               "or setting, named); 3 a data or state problem (damaged data, a diverged run, no readable "
               "checkpoint, a corpus too short for any record)")
# Subcommands that run TensorFlow: imported without its C++ start-up noise (trainer/commands/tensorflow_startup.py).
TENSORFLOW_SUBCOMMANDS = ("train", "finetune", "import-checkpoint", "export", "inspect", "plan")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows every flag's default in --help, except where there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.required or action.default is None or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


def _load(name: str):
    module_name, _ = SUBCOMMANDS[name]
    return importlib.import_module(module_name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="xlnet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    return run_subcommand(argv[0], argv[1:])


def run_subcommand(name: str, argv: list[str], prog: str | None = None) -> int:
    """Parses ``argv`` with subcommand ``name``'s flags and runs it; ``prog`` names it in usage
    lines (``python -m trainer.task`` runs `xlnet train` under its own name). Ctrl-C before a
    command handles it itself (while TensorFlow loads, say) ends quietly with status 130."""
    try:
        return _run_subcommand(name, argv, prog)
    except KeyboardInterrupt:
        print(f"xlnet {name}: interrupted", file=sys.stderr)
        return 130


def _run_subcommand(name: str, argv: list[str], prog: str | None) -> int:
    if name in TENSORFLOW_SUBCOMMANDS:
        from trainer.commands.tensorflow_startup import import_tensorflow_quietly

        import_tensorflow_quietly()
    try:
        module = _load(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "apache_beam":
            raise
        print(f"xlnet {name}: error: needs Apache Beam, which this installation lacks; install the pipeline "
              "extra: pip install \"xlnet-pretrain[pipeline]\" (training, import and export do not need it)",
              file=sys.stderr)
        return 2
    sub_parser = argparse.ArgumentParser(prog=prog or f"xlnet {name}", description=SUBCOMMANDS[name][1],
                                         epilog=EXIT_STATUS, formatter_class=HelpFormatter)
    module.add_arguments(sub_parser)
    if getattr(module, "ACCEPTS_RUNNER_OPTIONS", False):
        # e.g. `xlnet preprocess` hands unknown flags to Apache Beam (--project, --region, ...)
        args, args.runner_options = sub_parser.parse_known_args(argv)
    else:
        args = sub_parser.parse_args(argv)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
