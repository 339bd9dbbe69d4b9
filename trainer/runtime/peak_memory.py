"""The allocator's peak memory of this worker's replica devices, per window (a loop of steps).

The controller resets the peak before each loop of steps and reads it after: the figure is the
largest peak over the devices of this worker's replicas, in bytes, and goes to the step log's
rows of the loop (``peak_memory_bytes``) and to TensorBoard. A device without allocator statistics
reports nothing: the figure is then None, null in the step log and absent from TensorBoard, never 0.
TensorFlow's CPU allocator keeps statistics only as the BFC allocator, which the commands turn on for
every x86 CPU before TensorFlow starts (trainer/commands/tensorflow_startup.py,
allocator_statistics_on); a CPU allocator without them (TF_CPU_ALLOCATOR_USE_BFC=false) gives None.
"""
from __future__ import annotations

import tensorflow as tf


class PeakMemory:
    """The peak memory of ``strategy``'s local replica devices, reset and read per window.

    Args:
      strategy: the run's tf.distribute strategy (its worker devices are this worker's replicas).
    """

    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy

    def devices(self) -> tuple[str, ...]:
        """The devices of this worker's replicas."""
        try:
            return tuple(self.strategy.extended.worker_devices)
        except RuntimeError:  # the default strategy: TensorFlow's default device, a GPU when there is one
            gpus = tf.config.list_logical_devices("GPU")
            return (gpus[0].name if gpus else "/device:CPU:0",)

    def reset(self) -> None:
        """Starts a window: every device's peak is set back to its current use."""
        for device in self.devices():
            try:
                tf.config.experimental.reset_memory_stats(device)
            except (ValueError, tf.errors.OpError):
                pass  # a device without allocator statistics: its peak is simply not reported

    def peak(self) -> int | None:
        """The largest allocator peak over this worker's replica devices since the last reset, or
        None when no device reports one (a figure of 0 would read as "used no memory"). A peak of 0
        is no report either: seen on the CPU for a model so small that its allocations bypass the
        counted allocator."""
        peaks = []
        for device in self.devices():
            try:
                peaks.append(int(tf.config.experimental.get_memory_info(device)["peak"]))
            except (ValueError, tf.errors.OpError):
                continue
        return max(peaks, default=0) or None
