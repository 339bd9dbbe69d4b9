"""The two kinds of error a user can act on, and their exit codes (the bottom of the import graph).

Every error that the `xlnet` command reports as a sentence derives from one of these two bases, and
`xlnet_cli.py` is the one place that turns them into an exit status and a line on standard error
(``xlnet COMMAND: error: MESSAGE``). A command's ``run()`` returns 0 or raises; it never picks a
status itself. Anything else that escapes is a bug and keeps its traceback (exit status 1).

- ``UsageError`` (exit 2): the user asked for something that cannot be done as given: a flag, a file,
  a setting or a configuration, named in the message. Fixing the command line fixes it.
- ``DataError`` (exit 3): the data or the state is wrong: damaged shards, a diverged run, no
  readable checkpoint, a corpus too short for any record. The command line was fine.
"""
from __future__ import annotations

import difflib
from typing import Callable, Iterable

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_DATA = 3


class UsageError(ValueError):
    """Bad input a user can correct: a flag, file or setting, named in the message (exit status 2).

    A ``ValueError`` so that code validating values keeps raising what Python code expects."""

    exit_code = EXIT_USAGE


class DataError(Exception):
    """A data or state problem: damaged data, a diverged run, no readable checkpoint (exit status 3)."""

    exit_code = EXIT_DATA


def exit_code(error: BaseException) -> int | None:
    """The exit status of ``error``, or None when it is not one of ours (a bug: keep the traceback)."""
    if isinstance(error, (UsageError, DataError)):
        return error.exit_code
    return None


def did_you_mean(word: str, choices: Iterable[str], spelled: Callable[[str], str] = str) -> str | None:
    """"did you mean X?" (or "X or Y", "X, Y or Z", nearest first) for the ``choices`` closest to
    ``word``, a name the user mistyped, each written as ``spelled(choice)``; None when none is
    close. The one rule for every suggestion: `--set` keys, flags, subcommands."""
    close = [spelled(choice) for choice in difflib.get_close_matches(word, list(choices), n=3)]
    if not close:
        return None
    return f"did you mean {' or '.join([', '.join(close[:-1]), close[-1]] if len(close) > 1 else close)}?"
