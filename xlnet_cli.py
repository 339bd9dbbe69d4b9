"""The `xlnet` command: one subcommand per job, each implemented in its own module.

Every subcommand module exposes ``add_arguments(parser)`` and ``run(args)``, which returns 0 or
raises; ``run_subcommand`` turns the two kinds of error (tfrecords/errors.py) into exit codes.
Modules are imported only when their subcommand runs, so `xlnet vocab --help` does not
pay for importing TensorFlow.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

from tfrecords.errors import EXIT_DATA, EXIT_OK, EXIT_USAGE

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
    "score": ("trainer.commands.score", "each document's likelihood under the pretrained model, in natural order "
              "with Transformer-XL memory (JSON lines)"),
    "generate": ("trainer.commands.generate", "continue a prompt, printing tokens as they come (cached two-stream)"),
    "inspect": ("trainer.commands.inspect", "decode a data directory's records as the model sees them, its "
                "statistics (--stats), the trainer's permutations (--permutation), or verify it (--verify)"),
    "goodput": ("trainer.commands.goodput", "where a training job's wall time went (goodput, start-up, compilation, "
                "evaluation, checkpoints, work lost to kills), over all its runs"),
}
# Said under every --help; the codes themselves are tfrecords/errors.py's.
EXIT_STATUS = (f"exit status: {EXIT_OK} done (or preempted, with a checkpoint saved); {EXIT_USAGE} usage or bad "
               f"input (a flag, file or setting, named); {EXIT_DATA} a data or state problem (damaged data, a "
               "diverged run, no readable checkpoint, a corpus too short for any record)")
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
# Subcommands that run TensorFlow: imported without its C++ start-up noise (trainer/commands/tensorflow_startup.py).
TENSORFLOW_SUBCOMMANDS = ("train", "finetune", "import-checkpoint", "export", "inspect", "plan", "score", "generate",
                          "goodput")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default in --help one way, ``(default: X)``, where there is one to show and
    the help text does not already say it (a default that depends on something else)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if (action.required or action.default in (None, argparse.SUPPRESS, [], ()) or "default" in help_text
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))):
            return help_text
        return super()._get_help_string(action)


def _load(name: str):
    module_name, _ = SUBCOMMANDS[name]
    return importlib.import_module(module_name)


def main(argv: list[str] | None = None) -> int:
    from_process = argv is None  # the process runs this command: its start-up counts from the process's
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="xlnet", description=__doc__.splitlines()[0], epilog=EXIT_STATUS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv:  # no command: usage on standard error, as for any usage error
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv)  # --help exits 0; an unknown command exits 2 naming it
        return EXIT_USAGE
    return run_subcommand(argv[0], argv[1:], started=process_started() if from_process else None)


def process_started() -> float | None:
    """When this process started (a training run's goodput counts its start-up from then); None if
    the system does not say."""
    from trainer.runtime.run_clock import process_start_time

    return process_start_time()


def run_subcommand(name: str, argv: list[str], prog: str | None = None, started: float | None = None) -> int:
    """Parses ``argv`` with subcommand ``name``'s flags and runs it; ``prog`` names it in usage
    lines (``python -m trainer.task`` runs `xlnet train` under its own name).

    The one place where how a command ended becomes its exit status: 0 when ``run()`` returns; a
    UsageError (2) or DataError (3), tfrecords/errors.py, as one line ``xlnet NAME: error: MESSAGE``
    on standard error; Ctrl-C before a command handles it itself (while TensorFlow loads, say) ends
    quietly with 130; a reader that closes the pipe early (``xlnet plan | head``) ends it with
    141, as a process killed by SIGPIPE. Anything else is a bug and keeps its traceback.

    ``started``: when the command started (time.time()), the origin of a training run's goodput
    (trainer/runtime/run_clock.py); now when not given."""
    from tfrecords.errors import exit_code
    from trainer.runtime.run_clock import command_started

    try:
        with command_started(started or time.time()):
            return _run_subcommand(name, argv, prog)
    except KeyboardInterrupt:
        print(f"xlnet {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as error:  # ours are mapped below; anything else is a bug and re-raised
        code = exit_code(error)
        if code is None:
            raise
        sys.stdout.flush()
        print(f"xlnet {name}: error: {error}", file=sys.stderr, flush=True)
        return code


def _run_subcommand(name: str, argv: list[str], prog: str | None) -> int:
    from tfrecords.errors import UsageError

    if name in TENSORFLOW_SUBCOMMANDS:
        from trainer.commands.tensorflow_startup import import_tensorflow_quietly

        import_tensorflow_quietly()
    try:
        module = _load(name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "apache_beam":
            raise
        raise UsageError("needs Apache Beam, which this installation lacks; install the pipeline extra: "
                         "pip install \"xlnet-pretrain[pipeline]\" (training, import and export do not need it)") from None
    sub_parser = argparse.ArgumentParser(prog=prog or f"xlnet {name}", description=SUBCOMMANDS[name][1],
                                         epilog=EXIT_STATUS, formatter_class=HelpFormatter)
    module.add_arguments(sub_parser)
    if getattr(module, "ACCEPTS_RUNNER_OPTIONS", False):
        # e.g. `xlnet preprocess` hands unknown flags to Apache Beam (--project, --region, ...)
        args, args.runner_options = sub_parser.parse_known_args(argv)
    else:
        args = sub_parser.parse_args(argv)
    status = module.run(args)
    if status not in (None, 0):  # run() returns 0 or raises: a status is decided here only
        raise TypeError(f"xlnet {name}: run() returned {status!r}; it must return 0 or raise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
