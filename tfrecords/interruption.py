"""A command stopped by SIGINT or SIGTERM: its clean-up, one line, and the status a shell gives.

`xlnet preprocess` (its local Beam workers ended, its partial shards removed, its lock released)
and `xlnet export` (its staging directory removed) share one rule, here because pipeline/ and
trainer/ may not import each other: while a block runs, the first SIGINT or SIGTERM runs the
command's clean-up once (a second signal is ignored, so it cannot cut the clean-up short), writes
``xlnet COMMAND: interrupted by SIGTERM; WHAT`` (WHAT: what the clean-up says it left) on standard
error and ends the process with status 128 + the signal's number (130, 143). The previous handlers
come back after the block. Python runs signal handlers on the main thread only: elsewhere the block
runs without them.

The handler ends the process (``os._exit``) rather than raising: an exception raised inside
TensorFlow's C++ code or Beam's gRPC machinery, which call back into Python, comes out as another
error, with tracebacks of their own. It writes with ``os.write``: the main thread may have been
stopped inside a print, holding ``sys.stderr``.

`xlnet score`, whose loop runs TensorFlow's calls one at a time from Python, has a summary to print
for the documents done before the signal: :func:`raising_on_signals` raises :class:`Interrupted` in
its loop instead, and the command ends with the same status.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable, Iterator

INTERRUPTING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def interrupted_status(signum: int) -> int:
    """The exit status of a command the signal ``signum`` stopped: 128 + its number, as a shell gives."""
    return 128 + signum


@contextlib.contextmanager
def ending_on_signals(command: str, clean_up: Callable[[], str]) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM end the process: ``clean_up()`` runs once and says
    what it left (e.g. "nothing was published"), one line on standard error tells the signal and
    that, and the status is :func:`interrupted_status`.

    Args:
      command: the subcommand's name (``preprocess``), for the line's ``xlnet COMMAND:`` prefix.
      clean_up: removes what the command wrote, where it can; returns what is left, in words. An
        exception it raises is reported in the line instead (the process still ends).
    """
    def interrupt(signum: int, frame) -> None:
        try:
            what = clean_up()
        except Exception as error:  # noqa: BLE001 - the process must still end, saying why
            what = f"what it wrote could not all be removed ({error})"
        message = f"xlnet {command}: interrupted by {signal.Signals(signum).name}; {what}\n"
        os.write(sys.stderr.fileno(), message.encode())
        os._exit(interrupted_status(signum))

    with _first_signal_runs(interrupt):
        yield


class Interrupted(BaseException):
    """SIGINT or SIGTERM (``signum``) arrived inside :func:`raising_on_signals`. A BaseException, as
    KeyboardInterrupt is: it ends the work, it is not an error for a user to act on."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def raising_on_signals() -> Iterator[None]:
    """While the block runs, the first SIGINT or SIGTERM raises :class:`Interrupted` in it, for a
    command that has something to say about the work done before it (`xlnet score`'s summary).
    Only where no C++ code calls back into Python: Python runs the handler between two of
    TensorFlow's calls, never inside one."""

    def interrupt(signum: int, frame) -> None:
        raise Interrupted(signum)

    with _first_signal_runs(interrupt):
        yield


@contextlib.contextmanager
def _first_signal_runs(handler: Callable[[int, object], None]) -> Iterator[None]:
    """Installs ``handler`` for SIGINT and SIGTERM while the block runs; once one arrives, later ones
    are ignored (they must not cut its clean-up short). The previous handlers come back after the
    block. Off the main thread, where handlers cannot be set, the block runs without them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def first(signum: int, frame) -> None:
        for each in INTERRUPTING_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        handler(signum, frame)

    previous = {each: signal.signal(each, first) for each in INTERRUPTING_SIGNALS}
    try:
        yield
    finally:
        for each, handler_before in previous.items():
            signal.signal(each, handler_before)
