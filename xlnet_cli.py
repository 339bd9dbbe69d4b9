"""The `xlnet` command: one subcommand per job, each implemented in its own module.

Every subcommand module exposes ``add_arguments(parser)`` and ``run(args)``, which returns 0 or
raises; ``run_subcommand`` turns the two kinds of error (tfrecords/errors.py) into exit codes.
Modules are imported only when their subcommand runs, and TensorFlow only once the flags parse and
the command needs it, so no `--help` pays for importing TensorFlow. A flag argparse cannot use is
one line too, the mistyped flag named first with the nearest real ones.

A native crash (a segmentation fault in a library) prints Python's stack (faulthandler) and then
one line naming the command: install_crash_report.
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
import time

from tfrecords.errors import EXIT_DATA, EXIT_OK, EXIT_USAGE, UsageError, did_you_mean

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
EXIT_STATUS = (f"exit status: {EXIT_OK} done (or preempted: re-running resumes); {EXIT_USAGE} usage or bad "
               f"input (a flag, file or setting, named); {EXIT_DATA} a data or state problem (damaged data, a "
               "diverged run, no readable checkpoint, a lost worker, a corpus too short for any record)")
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
# Subcommands that run TensorFlow: imported without its C++ start-up noise (trainer/commands/tensorflow_startup.py),
# after the flags parse, unless the module's needs_tensorflow(args) says this run does without.
# What the tensorflow extra installs (setup.py): a command that imports one of them where it is missing says
# which extra to install.
TENSORFLOW_MODULES = ("tensorflow", "tensorflow_text", "tensorboard")
TENSORFLOW_SUBCOMMANDS = ("train", "finetune", "import-checkpoint", "export", "inspect", "plan", "score", "generate")
# The flags of each TensorFlow subcommand that name a file or directory it reads (DATA_FLAGS: a data
# directory, which must hold its manifest): a local one that is not there is a usage error before TensorFlow
# loads (trainer/commands/flag_checks.py), after the settings a module's check_flags(args) refuses (--config
# read among them); so a
# usage error returns in a second, not after TensorFlow's import.
INPUT_FLAGS: dict[str, tuple[str, ...]] = {
    "train": ("--init-checkpoint",),
    "finetune": ("--train", "--eval", "--test", "--init-checkpoint", "--vocab"),
    "import-checkpoint": ("--huggingface", "--config", "--spm"),
    "export": ("--model-dir",),
    "plan": ("--init-checkpoint",),
    "score": ("--model-dir", "--input"),
    "generate": ("--model-dir", "--prompts"),
}
DATA_FLAGS: dict[str, tuple[str, ...]] = {"train": ("--data", "--eval-data"), "inspect": ("DATA_DIR",)}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default in --help one way, ``(default: X)``, where there is one to show and
    the help text does not already say it (a default that depends on something else)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if (action.required or action.default in (None, argparse.SUPPRESS, [], ()) or "default" in help_text
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))):
            return help_text
        return super()._get_help_string(action)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are UsageErrors, so that they end as every other usage error
    does, one line ``xlnet NAME: error: MESSAGE`` (exit 2), without the usage block (--help shows it)."""

    def error(self, message: str):
        raise UsageError(message)


def unrecognized_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The flags in ``argv`` (before a ``--``) that ``parser`` defines no option for, as typed
    (``--promt``, without an ``=VALUE``); a unique prefix of an option, which argparse accepts, counts
    as known, and a negative number or a token with a space is a value, as argparse reads it."""
    options = option_strings(parser)
    unknown = []
    for token in argv:
        if token == "--":
            break
        if not token.startswith("-") or token == "-" or " " in token or _is_number(token):
            continue  # as argparse reads them: a value ("-5", "- a list item"), not a flag
        flag = token.split("=", 1)[0]
        if flag.startswith("--"):
            known = any(option.startswith(flag) for option in options)
        else:  # -x, or -xVALUE
            known = flag[:2] in options
        if not known:
            unknown.append(flag)
    return unknown


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string ``parser`` defines (``--prompt``, ``-h``)."""
    return [option for action in parser._actions for option in action.option_strings]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def unrecognized_error(parser: argparse.ArgumentParser, flags: list[str]) -> UsageError:
    """The UsageError naming the first of ``flags`` parser does not know, with the nearest of its
    flags (tfrecords/errors.py's did_you_mean, the rule `--set` suggests with), and any others."""
    options = [option for option in option_strings(parser) if option.startswith("--")]
    first, others = flags[0], flags[1:]
    suggestion = did_you_mean(first, options)
    more = f"; also unrecognized: {' '.join(others)}" if others else ""
    return UsageError(f"unrecognized argument {first}{f' ({suggestion})' if suggestion else ''}{more}; "
                      "--help lists the flags")


def parse_flags(parser: argparse.ArgumentParser, argv: list[str], runner_options: bool = False) -> argparse.Namespace:
    """``argv`` parsed by ``parser`` (a CommandParser); a UsageError (one line) on any problem,
    a misspelled flag named first. With ``runner_options`` (`xlnet preprocess`), the flags the parser
    does not define are handed on as ``args.runner_options`` (Apache Beam's), unless the parse
    failed: then one close to a flag of ours is named as the likely cause."""
    flags = argv[:argv.index("--")] if "--" in argv else argv
    unknown = [] if {"-h", "--help"} & set(flags) else unrecognized_flags(parser, argv)  # --help first
    if unknown and not runner_options:
        raise unrecognized_error(parser, unknown)
    try:
        args, extras = parser.parse_known_args(argv)
    except UsageError:
        typos = [flag for flag in unknown if did_you_mean(flag, option_strings(parser))]
        if typos:
            raise unrecognized_error(parser, typos) from None
        raise
    if runner_options:
        args.runner_options = extras
    elif extras:
        raise UsageError(f"unrecognized arguments: {' '.join(extras)}")
    return args


_crash_pipe = None  # install_crash_report's end of the pipe to the crash reader


def install_crash_report(command: str) -> None:
    """Makes a native crash of this process (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, in
    TensorFlow say) print Python's stack of every thread (faulthandler), then one line naming
    ``command`` and what to do, on standard error.

    After a segmentation fault no Python runs in the crashed process, and faulthandler's own
    signal-safe writer prints only the stack; so faulthandler writes into a pipe whose reader, a
    process forked now (before any thread or TensorFlow exists), passes the stack on and adds the
    line. When the command ends any other way the pipe closes with nothing in it and the reader ends
    silently. The exit status stays the signal's (crash_line): for a segmentation fault -11 from
    Python's subprocess, 139 from a shell."""
    read_end, write_end = os.pipe()
    sys.stderr.flush()
    if os.fork() == 0:
        _report_crash(read_end, write_end, command)
    os.close(read_end)
    global _crash_pipe  # kept open (and referenced) for the process's life; its end is the reader's EOF
    _crash_pipe = os.fdopen(write_end, "wb", buffering=0)
    faulthandler.enable(file=_crash_pipe, all_threads=True)


def _report_crash(read_end: int, write_end: int, command: str) -> None:
    """The crash reader (install_crash_report's forked process): copies what faulthandler wrote to
    standard error and adds the line naming the command; never returns."""
    try:
        os.close(write_end)
        for signal_number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(signal_number, signal.SIG_IGN)  # a Ctrl-C or a kill of the group is the command's
        os.closerange(0, 2)  # holds no one's stdin or stdout open (`xlnet plan | head` ends when xlnet does)
        os.closerange(3, read_end)
        os.closerange(read_end + 1, 1 << 16)
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        report = b"".join(chunks)
        if report:
            os.write(2, report + crash_line(command, report.decode("utf-8", "replace")).encode())
    finally:
        os._exit(0)


# faulthandler's names of the signals it reports ("Fatal Python error: Segmentation fault")
FAULTS = {"Segmentation fault": signal.SIGSEGV, "Aborted": signal.SIGABRT, "Bus error": signal.SIGBUS,
          "Floating point exception": signal.SIGFPE, "Illegal instruction": signal.SIGILL}
RESUMING_COMMANDS = ("train", "finetune")


def crash_line(command: str, report: str) -> str:
    """The line after faulthandler's ``report`` of a native crash of `xlnet COMMAND`: the fault,
    the exit status it ends with, and what to do."""
    fault = report.strip().splitlines()[0].removeprefix("Fatal Python error: ").strip() if report.strip() else ""
    number = FAULTS.get(fault)
    status = f"; exit status {128 + number} in a shell, {-number} from Python's subprocess" if number else ""
    again = ("run the same command again: it resumes from the last checkpoint" if command in RESUMING_COMMANDS
             else "run the same command again")
    processes = _processes_of_the_run()
    if command in RESUMING_COMMANDS and processes > 1:
        # JAX's coordination client aborts every process this way once one is lost (process 0 above all)
        again = (f"run the same command again on ALL {processes} processes of the run (JAX ends them this way when "
                 "one of them is lost): it resumes from the last checkpoint")
    return f"xlnet {command}: crashed in native code ({fault or 'a fatal error'}, the Python stack above){status}; {again}\n"


def _processes_of_the_run() -> int:
    """How many processes the environment says a JAX run spans (1 when it says none, or nonsense)."""
    from trainer.runtime.jax_processes import NUM_PROCESSES

    count = os.environ.get(NUM_PROCESSES, "1")
    return int(count) if count.isdigit() else 1


def _load(name: str):
    module_name, _ = SUBCOMMANDS[name]
    return importlib.import_module(module_name)


def main(argv: list[str] | None = None) -> int:
    """The `xlnet` command: ``argv`` (default: the process's arguments) is a subcommand and its
    flags. Run as the process's command (no ``argv``), a native crash is reported
    (install_crash_report)."""
    from_process = argv is None  # the process runs this command: its start-up counts from the process's
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="xlnet", description=__doc__.splitlines()[0], epilog=EXIT_STATUS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv:  # no command: usage on standard error, as for any usage error
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if argv[0] in ("-h", "--help"):
        parser.parse_args(argv)  # prints the usage and the commands; exits 0
    if argv[0] not in SUBCOMMANDS:
        suggestion = did_you_mean(argv[0], SUBCOMMANDS)
        print(f"xlnet: error: unknown command {argv[0]!r}{f' ({suggestion})' if suggestion else ''}; "
              f"xlnet --help lists them", file=sys.stderr)
        return EXIT_USAGE
    if from_process:
        install_crash_report(argv[0])
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
    # The pipeline's commands import Apache Beam once their flags are checked: missing, it is
    # named wherever it is first imported.
    try:
        return _parsed_and_run(name, argv, prog)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing == "apache_beam":
            raise UsageError("needs Apache Beam, which this installation lacks; install the pipeline extra: "
                             "pip install \"xlnet-pretrain[pipeline]\" (training, import and export do not need it)"
                             ) from None
        if missing in TENSORFLOW_MODULES:
            raise UsageError(f"needs TensorFlow ({missing} is not installed); install the tensorflow extra: "
                             "pip install \"xlnet-pretrain[tensorflow]\" (preprocessing does not need it)") from None
        raise


def _parsed_and_run(name: str, argv: list[str], prog: str | None) -> int:
    module = _load(name)
    sub_parser = CommandParser(prog=prog or f"xlnet {name}", description=SUBCOMMANDS[name][1],
                               epilog=EXIT_STATUS, formatter_class=HelpFormatter)
    module.add_arguments(sub_parser)
    # e.g. `xlnet preprocess` hands unknown flags to Apache Beam (--project, --region, ...)
    args = parse_flags(sub_parser, argv, runner_options=getattr(module, "ACCEPTS_RUNNER_OPTIONS", False))
    if name in TENSORFLOW_SUBCOMMANDS:
        check_before_tensorflow(name, module, sub_parser, args)
    if name in TENSORFLOW_SUBCOMMANDS and getattr(module, "needs_tensorflow", lambda _: True)(args):
        from trainer.commands.tensorflow_startup import import_tensorflow_quietly

        import_tensorflow_quietly()
    status = module.run(args)
    if status not in (None, 0):  # run() returns 0 or raises: a status is decided here only
        raise TypeError(f"xlnet {name}: run() returned {status!r}; it must return 0 or raise")
    return 0


def check_before_tensorflow(name: str, module, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What can be checked of TensorFlow subcommand ``name``'s flags without TensorFlow: its module's
    ``check_flags(args)``, where it has one (the settings, before any file, as the commands check them),
    then its local inputs (INPUT_FLAGS, DATA_FLAGS)."""
    from trainer.commands.flag_checks import check_local_data_directories, check_local_inputs

    getattr(module, "check_flags", lambda _: None)(args)
    check_local_inputs(parser, args, INPUT_FLAGS.get(name, ()))
    check_local_data_directories(parser, args, DATA_FLAGS.get(name, ()))


if __name__ == "__main__":
    sys.exit(main())
