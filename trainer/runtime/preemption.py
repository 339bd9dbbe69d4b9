"""Preemption: SIGTERM and SIGINT noted while steps run, and all workers agreeing to stop.

A signal handler only records the signal; the controller asks :meth:`Preemption.stopping` at each
loop boundary, saves a checkpoint and returns ``stopped="preempted"`` (exit status 0: re-running
the command resumes). With several workers they decide together, one all-reduce per loop of steps:
a worker that went on alone would wait forever in the next step's collectives, so a signal
reaching any worker stops them all at the same step.
"""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator

import tensorflow as tf

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preemption:
    """The stop signals of one run's training loop.

    Args:
      strategy: the run's tf.distribute strategy (its collectives carry the agreement).
      num_workers: the run's worker count; with 1, no collective is run.
    """

    def __init__(self, strategy: tf.distribute.Strategy, num_workers: int):
        self.strategy, self.num_workers = strategy, num_workers
        self.signal: int | None = None  # the signal this worker received, if any
        self._signals_anywhere = tf.function(self._signals_anywhere_fn)

    @contextlib.contextmanager
    def handlers(self) -> Iterator[None]:
        """SIGTERM and SIGINT are noted (not acted upon) while the block runs; the previous
        handlers come back afterwards."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stopping(self) -> bool:
        """Whether to stop at this loop boundary: a signal reached this worker or, with several
        workers, any of them. Workers decide together (one all-reduce per loop of steps): a worker
        that went on alone would wait forever in the next step's collectives."""
        if self.num_workers == 1:
            return self.signal is not None
        return bool(self._signals_anywhere(tf.constant(float(self.signal is not None))).numpy() > 0)

    def cause(self) -> str:
        """Why the run stopped, for the log line."""
        return f"received signal {self.signal}" if self.signal else "another worker was signalled"

    def _on_signal(self, signum, frame) -> None:
        del frame
        self.signal = signum  # acted upon after the running loop of steps

    def _signals_anywhere_fn(self, signalled: tf.Tensor) -> tf.Tensor:
        per_replica = self.strategy.run(lambda: tf.identity(signalled))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
