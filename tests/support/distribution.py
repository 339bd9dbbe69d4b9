"""Comparing a run on two mirrored replicas with one on a single device."""
from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf


def assert_two_replicas_step_as_one_device(make_trainer: Callable[[tf.distribute.Strategy, str], object],
                                           mirrored_strategy: tf.distribute.Strategy, steps: int = 2) -> None:
    """``make_trainer(strategy, name)`` builds a controller; its first ``steps`` steps' global loss and
    gradients on two mirrored replicas equal one device's (each step after the first runs on the
    state, such as the memory, the one before left on each replica)."""
    results = {}
    for name, strategy in (("one", tf.distribute.OneDeviceStrategy("/cpu:0")), ("two", mirrored_strategy)):
        trainer = make_trainer(strategy, name)
        iterator = iter(trainer.train_dataset())
        results[name] = [trainer.gradients(iterator) for _ in range(steps)]
    for (grads_one, loss_one), (grads_two, loss_two) in zip(results["one"], results["two"]):
        np.testing.assert_allclose(loss_two, loss_one, rtol=1e-5)
        for a, b in zip(grads_one, grads_two):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-7)
