"""A profiler window: training steps START..END traced by the engine's profiler (TensorFlow's
tf.profiler.experimental, JAX's jax.profiler).

``--set profile_steps=START:END`` (LoopConfig.profile_steps) traces those steps, both included, into
``MODEL_DIR/tensorboard/train``: the trace lands in ``plugins/profile/<timestamp>/<host>.xplane.pb``
there, where TensorBoard's profile plugin finds it as the ``train`` run. Off by default: without
the setting the profiler is never started.

The controller runs steps in loops of up to ``steps_per_loop`` inside one tf.function, and the
profiler can only start and stop between loops. So a window makes loops end where it begins and
ends (:meth:`ProfileWindow.boundaries`): the trace holds exactly steps START..END, and the loops
around it are shorter. A run resumed inside the window traces from its first step to END (that
first loop also traces and compiles the step function); a window that ended before the run began
traces nothing. Only the chief traces.
"""
from __future__ import annotations

from typing import Callable, NamedTuple


class Tracer(NamedTuple):
    """An engine's profiler: ``start(logdir)`` and ``stop()``."""

    start: Callable[[str], None]
    stop: Callable[[], None]


def tensorflow_tracer() -> Tracer:
    import tensorflow as tf

    return Tracer(tf.profiler.experimental.start, tf.profiler.experimental.stop)


def jax_tracer() -> Tracer:
    import jax

    return Tracer(jax.profiler.start_trace, jax.profiler.stop_trace)


class ProfileWindow:
    """Starts and stops the engine's profiler around the loops of steps ``window`` covers.

    Args:
      window: (START, END), the first and last step traced (1-based), or None for none.
      logdir: where the trace goes (its ``plugins/profile/`` subdirectory).
      enabled: False off the chief: nothing is traced.
      tracer: the profiler to start and stop (TensorFlow's by default).
    """

    def __init__(self, window: tuple[int, int] | None, logdir: str, enabled: bool = True,
                 tracer: Callable[[], Tracer] = tensorflow_tracer):
        self.window = window if enabled else None
        self._tracer = tracer
        self.logdir = logdir
        self.active = False

    def boundaries(self) -> tuple[int, ...]:
        """Steps after which a loop must end so that the window starts and stops between loops."""
        return () if self.window is None else (self.window[0] - 1, self.window[1])

    def before_loop(self, step: int) -> None:
        """Starts tracing when the loop after ``step`` (the last step done) runs a step of the window."""
        if self.window is not None and not self.active and self.window[0] <= step + 1 <= self.window[1]:
            self._tracer().start(self.logdir)
            self.active = True

    def after_loop(self, step: int) -> None:
        """Stops tracing once ``step``, the last step done, is the window's last (or past it)."""
        if self.active and step >= self.window[1]:
            self.stop()

    def stop(self) -> None:
        """Stops tracing, writing the trace (a run that ends inside its window: preempted)."""
        if self.active:
            self._tracer().stop()
            self.active = False
