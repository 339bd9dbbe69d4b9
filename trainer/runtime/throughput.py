"""Model FLOPs utilisation (MFU) of a loop of training steps.

MFU is the model's FLOPs per second over the peak FLOP/s of the run's devices. The model's FLOPs
of one step come from the one FLOPs rule (trainer/planning/flops.py) for the configuration that
runs, without what remat recomputes (recomputation is not useful work); the peak from the device
table (trainer/planning/devices.py) or, on a CPU, from a matmul timed at start-up. The launch
code (trainer/launch/utilisation.py) works both out; the controller only divides, by the one rule
here (utilisation), which every benchmark's MFU follows too.

An MFU is never above 1. A peak is the most the device can reach, so a rate above it shows the
peak was too low: a matmul timed while other work shared the machine. The peak is then raised to
the rate itself (the device did reach it), and the MFU is 1.0 with the peak it divided by
reported beside it, where one is reported (the benchmarks' JSON lines); never a ratio above 1
read as an efficiency.
"""
from __future__ import annotations

import dataclasses

# The step-log fields a clock measures: two runs differ in them even under deterministic=true.
CLOCK_FIELDS = frozenset({"model_flops_per_sec", "mfu"})


@dataclasses.dataclass(frozen=True)
class StepFlops:
    """What a run's MFU is measured with.

    Attributes:
      model_flops: model FLOPs of one optimizer step over every replica and micro-step.
      peak_flops: the peak FLOP/s of every replica together.
      peak_source: where the peak comes from, e.g. ``tpu-v4 (device table, bf16)`` or
        ``measured_matmul_peak (float32, this CPU)``; written in every step-log row.
    """

    model_flops: float
    peak_flops: float
    peak_source: str

    def rates(self, steps: int, seconds: float) -> dict[str, float]:
        """``model_flops_per_sec`` and ``mfu`` (a fraction) of ``steps`` steps run in ``seconds``."""
        per_sec = steps * self.model_flops / seconds if seconds > 0 else 0.0
        return {"model_flops_per_sec": per_sec, "mfu": utilisation(per_sec, self.peak_flops)[0]}


def utilisation(flops_per_sec: float, peak_flops: float) -> tuple[float, float]:
    """(MFU, the peak FLOP/s it divides by) of a rate of ``flops_per_sec`` on a device whose
    peak is ``peak_flops``: the peak raised to the rate where the rate is above it (the device
    reached it; the peak was timed low), so the MFU is never above 1; (0.0, 0.0) for an unknown
    (zero) peak."""
    if peak_flops <= 0:
        return 0.0, 0.0
    peak = max(peak_flops, flops_per_sec)
    return flops_per_sec / peak, peak
