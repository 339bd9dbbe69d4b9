"""Preemption (trainer/runtime/preemption.py): a signal is noted, not acted upon, while the handlers
are installed, and the previous handlers come back. The whole path (a signalled run saves and
stops; one signalled worker stops them all) is tested with the pretraining task and in
test_distribution.py."""
from __future__ import annotations

import os
import signal

import tensorflow as tf

from trainer.runtime.preemption import Preemption


def test_a_signal_is_noted_and_the_previous_handler_comes_back():
    preemption = Preemption(tf.distribute.get_strategy(), num_workers=1)
    previous = signal.getsignal(signal.SIGTERM)
    with preemption.handlers():
        assert not preemption.stopping()
        os.kill(os.getpid(), signal.SIGTERM)  # noted: the process goes on
        assert preemption.stopping()
    assert signal.getsignal(signal.SIGTERM) is previous
    assert preemption.cause() == f"received signal {int(signal.SIGTERM)}"


def test_without_a_signal_here_another_worker_was_signalled():
    assert Preemption(tf.distribute.get_strategy(), num_workers=1).cause() == "another worker was signalled"
