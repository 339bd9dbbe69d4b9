"""Preemption: SIGTERM and SIGINT noted while steps run, all workers agreeing to stop, and a bound
on how long a signal waits for the running loop of steps.

A signal handler only records the signal; the controller asks :meth:`Preemption.stopping` at each
loop boundary, saves a checkpoint and returns ``stopped="preempted"`` (exit status 0: re-running
the command resumes). With several workers they decide together, one all-reduce per loop of steps:
a worker that went on alone would wait forever in the next step's collectives, so a signal
reaching any worker stops them all at the same step.

A loop of steps runs inside one TensorFlow call, which Python cannot interrupt (a Python signal
handler itself runs only once that call returns). A loop that does not end within
``grace_seconds`` of the signal (a step too large for the machine, a loop of many slow steps) is
given up: a watcher thread, woken by the signal through :func:`signal.set_wakeup_fd`, waits for
any checkpoint write in flight, releases the model directory's run lock
(trainer/runtime/run_lock.py), logs one line saying what is saved and exits the process with status
0 (:data:`EXIT_GAVE_UP`), as a preempted run does: re-running the command resumes from the last
checkpoint. The steps themselves are unchanged: nothing of a given-up loop is kept.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from typing import Callable, Iterator

from tfrecords.errors import EXIT_OK
from trainer.runtime import run_lock

SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_GAVE_UP = EXIT_OK  # the status of a preempted run: re-running the command resumes


class Preemption:
    """The stop signals of one run's training loop.

    Args:
      agree: with several workers, whether any of them was signalled, given whether this one was
        (a collective of the engine's: an all-reduce of tf.distribute, a gather of jax.distributed);
        None with one worker: no collective is run.
      grace_seconds: how long a signal waits for the running loop of steps to end before the run
        gives it up (``preemption_grace_seconds``).
      give_up: called on the watcher thread when it does, with the signal: waits for what must
        finish (a checkpoint write in flight) and returns the one line to log, saying what is saved.
      log: where that line goes.
    """

    def __init__(self, agree: Callable[[bool], bool] | None = None, grace_seconds: float = 20.0,
                 give_up: Callable[[int], str] | None = None, log: Callable[[str], None] = print):
        self._agree = agree
        self.grace_seconds, self._give_up, self._log = grace_seconds, give_up, log
        self.signal: int | None = None  # the signal this worker received, if any
        self._state = threading.Condition()
        self._loops_ended = 0  # loops of steps that returned (guarded by _state)
        self._in_loop = False
        self._giving_up = False

    @contextlib.contextmanager
    def handlers(self) -> Iterator[None]:
        """SIGTERM and SIGINT are noted (not acted upon) while the block runs, and a loop of steps
        that outlasts them by ``grace_seconds`` is given up; the previous handlers come back
        afterwards."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        woken, wakeup = socket.socketpair()
        wakeup.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)
        watcher = threading.Thread(target=self._watch, args=(woken,), name="preemption-watcher", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            signal.set_wakeup_fd(previous_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            wakeup.close()  # the watcher reads the end of its socket and returns
            watcher.join()
            woken.close()

    @contextlib.contextmanager
    def running_loop(self) -> Iterator[None]:
        """Marks the block as a loop of steps, which a signal waits for at most ``grace_seconds``."""
        with self._state:
            self._in_loop = True
        try:
            yield
        finally:
            with self._state:
                while self._giving_up:  # the watcher is ending the process: never go on past it
                    self._state.wait()
                self._in_loop = False
                self._loops_ended += 1
                self._state.notify_all()

    def stopping(self) -> bool:
        """Whether to stop at this loop boundary: a signal reached this worker or, with several
        workers, any of them. Workers decide together (one all-reduce per loop of steps): a worker
        that went on alone would wait forever in the next step's collectives."""
        if self._agree is None:
            return self.signal is not None
        return self._agree(self.signal is not None)

    def cause(self) -> str:
        """Why the run stopped, for the log line."""
        return f"received signal {self.signal}" if self.signal else "another worker was signalled"

    def _on_signal(self, signum, frame) -> None:
        del frame
        self.signal = signum  # acted upon after the running loop of steps

    def _watch(self, woken: socket.socket) -> None:
        """The watcher thread: for each signal (the wakeup byte the C-level handler writes even while
        the main thread is inside TensorFlow), waits for the loop running then to end."""
        while True:
            try:
                received = woken.recv(16)
            except OSError:
                return
            if not received:  # the handlers were removed
                return
            signum = received[-1]
            if signum not in SIGNALS:
                continue
            with self._state:
                if not self._in_loop:  # the main thread runs Python: the next boundary acts on it
                    continue
                running = self._loops_ended
                if self._state.wait_for(lambda: self._loops_ended != running, timeout=self.grace_seconds):
                    continue
                self._giving_up = True
            self._leave(signum)

    def _leave(self, signum: int) -> None:
        """Gives the running loop up: what must finish finishes, the run lock is released, one line
        says what is saved, and the process exits with :data:`EXIT_GAVE_UP`."""
        try:
            line = (self._give_up(signum) if self._give_up else
                    f"received signal {signum}: the running loop of steps did not end within {self.grace_seconds:g} s "
                    "(preemption_grace_seconds), so it was given up")
            run_lock.release_held_locks()
            self._log(line)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_GAVE_UP)  # the main thread is inside a compiled loop: nothing else can stop it
