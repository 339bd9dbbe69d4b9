"""The plan of a configuration on a device: predicted memory, the largest micro-batch per remat
mode, settings that keep the global batch, step time.

Batch sizes follow LoopConfig: ``train_batch_size`` is the global micro-batch (over replicas),
``accumulation_steps`` micro-steps make one step, so the global batch is their product. A
replica's micro-batch is ``train_batch_size / replicas``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from tfrecords.errors import UsageError
from trainer.configs.training import REMAT_MODES, LoopConfig, TrainConfig
from trainer.models.config import ModelConfig
from trainer.planning.devices import Device, format_bytes
from trainer.planning.flops import (
    earlier_segments_flops,
    model_flops_per_step,
    recomputed_flops_per_step,
    segment_memory_length,
)
from trainer.planning.memory import MemoryBreakdown, StepShape, memory_breakdown

# Share of the device's memory a plan may fill: the rest is the runtime's own (kernels' scratch
# space, the allocator's fragmentation), and a run predicted above it stops before building.
USABLE_FRACTION = 0.95
DEFAULT_MFU = 0.4
# Multiple choice encodes every option as a row; a plan made before the data is read assumes RACE's 4.
DEFAULT_OPTIONS = 4
# No search goes past this many rows per replica.
MAX_SEARCHED_BATCH = 1 << 16


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a run trains, as far as memory and time go: the model, the loop's settings
    (TrainConfig for pretraining, FinetuneConfig for fine-tuning) and the replicas."""

    model: ModelConfig
    config: LoopConfig
    replicas: int = 1
    options: int = DEFAULT_OPTIONS  # rows per example for multiple choice

    @property
    def pretraining(self) -> bool:
        return isinstance(self.config, TrainConfig)

    @property
    def rows_per_example(self) -> int:
        return self.options if getattr(self.config, "task", None) == "multiple-choice" else 1

    @property
    def seq_len(self) -> int:
        return self.config.seq_len if self.pretraining else self.config.max_seq_length

    @property
    def segments(self) -> int:
        """Segments of ``seq_len`` read per text: fine-tuning's ``max_segments`` (long documents), else 1."""
        return 1 if self.pretraining else self.config.max_segments

    @property
    def mem_len(self) -> int:
        """The model's memory length: pretraining's, or the memory a long document's segments read
        (0 when fine-tuning reads one segment: the run's model config has none then)."""
        return self.model.mem_len if self.pretraining or self.segments > 1 else 0

    @property
    def batch_step(self) -> int:
        """Per-replica micro-batches must be a multiple of this (bi_data: forward and backward halves)."""
        return 2 if self.pretraining and self.model.bi_data else 1

    @property
    def micro_batch(self) -> int:
        """Examples per replica per micro-step, as configured."""
        return max(1, self.config.train_batch_size // self.replicas)

    @property
    def global_batch(self) -> int:
        return self.config.train_batch_size * self.config.accumulation_steps

    def shape(self, micro_batch: int | None = None, remat: str | None = None) -> StepShape:
        """The StepShape of one replica with ``micro_batch`` examples (default: as configured)."""
        config, model = self.config, self.model
        batch = micro_batch if micro_batch is not None else self.micro_batch
        if self.pretraining:
            return StepShape(batch=batch, seq_len=config.seq_len, num_predict=config.num_predict,
                             mem_len=model.mem_len, eval_batch=max(1, config.eval_batch_size // self.replicas),
                             head="lm", precision=config.precision, accumulation_steps=config.accumulation_steps)
        head = "squad" if config.task == "squad" else "sequence"
        # Long documents: the last segment, the one a step keeps activations of, reads the memory
        # of the segments before it.
        memory = segment_memory_length(self.segments - 1, config.max_seq_length, self.mem_len)
        return StepShape(batch=batch * self.rows_per_example, seq_len=config.max_seq_length, head=head,
                         precision=config.precision, accumulation_steps=config.accumulation_steps,
                         mem_len=memory, segments=self.segments)

    def breakdown(self, micro_batch: int | None = None, remat: str | None = None,
                  accumulation_steps: int | None = None) -> MemoryBreakdown:
        shape = self.shape(micro_batch)
        if accumulation_steps is not None:
            shape = shape.replace(accumulation_steps=accumulation_steps)
        return memory_breakdown(self.model, shape, remat or self.config.remat)

    def step_flops(self, remat: str | None = None) -> tuple[float, float]:
        """(model FLOPs, FLOPs the device computes including remat's recomputation) of one step of one
        replica: ``global_batch / replicas`` examples. Long documents: the last segment's forward and
        backward passes, and the forward passes of the segments before it."""
        model, shape = self.model, self.shape(1)
        rows = self.global_batch // self.replicas * self.rows_per_example
        dims = dict(n_layer=model.n_layer, d_model=model.n_head * model.d_head, d_inner=model.d_inner,
                    seq_len=shape.seq_len, mem_len=shape.mem_len, num_predict=shape.num_predict, batch=rows,
                    vocab=model.vocab_size, bi_data=self.pretraining and model.bi_data, head=shape.head)
        flops = model_flops_per_step(**dims) + earlier_segments_flops(self.segments, **dict(dims, mem_len=self.mem_len))
        return flops, flops + recomputed_flops_per_step(**dims, remat=remat or self.config.remat)


@dataclasses.dataclass(frozen=True)
class FitChoice:
    """Settings that fit: ``remat``, the per-replica ``micro_batch``, and the ``train_batch_size`` and
    ``accumulation_steps`` that keep the global batch; their predicted peak."""

    remat: str
    micro_batch: int
    train_batch_size: int
    accumulation_steps: int
    predicted_peak_bytes: int

    def settings(self) -> str:
        return (f"--set remat={self.remat} --set train_batch_size={self.train_batch_size} "
                f"--set accumulation_steps={self.accumulation_steps}")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The plan of ``workload`` on ``device`` (or a bare memory budget); see :func:`make_plan`."""

    workload: Workload
    device: Device | None
    memory_bytes: int | None
    mfu: float
    breakdown: MemoryBreakdown
    max_micro_batch: dict[str, int]
    choices: dict[str, FitChoice | None]
    model_flops: float
    step_flops: dict[str, float]
    peak_flops: float | None

    @property
    def budget_bytes(self) -> int | None:
        return None if self.memory_bytes is None else int(self.memory_bytes * USABLE_FRACTION)

    @property
    def predicted_peak_bytes(self) -> int:
        return self.breakdown.total

    @property
    def fits(self) -> bool | None:
        """Whether the configuration as given fits (None: no memory to compare with)."""
        return None if self.budget_bytes is None else self.predicted_peak_bytes <= self.budget_bytes

    @property
    def nothing_fits(self) -> bool:
        return self.budget_bytes is not None and not any(self.max_micro_batch.values())

    def step_seconds(self, remat: str | None = None) -> float | None:
        if not self.peak_flops:
            return None
        return self.step_flops[remat or self.workload.config.remat] / (self.peak_flops * self.mfu)

    def cheapest(self) -> FitChoice | None:
        """The cheapest fitting settings: the least recomputation (remat none, then attention, then
        full), then the fewest micro-steps; the configured remat mode with its micro-batch when that fits."""
        config = self.workload.config
        if self.fits:
            return FitChoice(config.remat, self.workload.micro_batch, config.train_batch_size,
                             config.accumulation_steps, self.predicted_peak_bytes)
        fitting = [choice for choice in (self.choices[mode] for mode in REMAT_MODES) if choice is not None]
        return fitting[0] if fitting else None

    def to_dict(self) -> dict[str, Any]:
        workload, config = self.workload, self.workload.config
        seconds = {mode: self.step_seconds(mode) for mode in REMAT_MODES}
        tokens = workload.global_batch * workload.seq_len * workload.rows_per_example * workload.segments
        step = self.step_seconds()
        return {
            "model": {"n_layer": workload.model.n_layer, "d_model": workload.model.d_model,
                      "vocab_size": workload.model.vocab_size},
            "run": "pretraining" if workload.pretraining else f"finetune:{config.task}",
            "seq_len": workload.seq_len, "max_segments": workload.segments, "mem_len": workload.mem_len,
            "precision": config.precision, "remat": config.remat,
            "replicas": workload.replicas, "micro_batch_per_replica": workload.micro_batch,
            "train_batch_size": config.train_batch_size, "accumulation_steps": config.accumulation_steps,
            "global_batch": workload.global_batch,
            "device": self.device.name if self.device else None, "device_memory_bytes": self.memory_bytes,
            "budget_bytes": self.budget_bytes, "predicted_peak_bytes": self.predicted_peak_bytes, "fits": self.fits,
            "breakdown": self.breakdown.to_dict(), "max_micro_batch": dict(self.max_micro_batch),
            "fitting_settings": {mode: dataclasses.asdict(choice) if choice else None
                                 for mode, choice in self.choices.items()},
            "mfu": self.mfu, "peak_flops": self.peak_flops, "model_flops_per_step": self.model_flops,
            "step_seconds": step, "step_seconds_by_remat": seconds,
            "tokens_per_second": tokens / step if step else None,
            "wall_seconds": step * config.train_steps if step else None, "train_steps": config.train_steps,
        }

    def summary(self) -> str:
        """One line: the predicted peak against the device, the largest micro-batches, the step time."""
        workload, config = self.workload, self.workload.config
        segments = (f" x {workload.segments} segments with memory {workload.mem_len}" if workload.segments > 1
                    else "")
        line = (f"plan: {workload.model.n_layer}x{workload.model.d_model}, seq {workload.seq_len}{segments}, "
                f"micro-batch {workload.micro_batch}/replica x {workload.replicas} x {config.accumulation_steps} "
                f"accumulation, remat {config.remat}, {config.precision}: predicted peak "
                f"{format_bytes(self.predicted_peak_bytes)}")
        if self.memory_bytes is not None:
            line += (f" of {format_bytes(self.memory_bytes)} ({100 * self.predicted_peak_bytes / self.memory_bytes:.0f}%"
                     f"{', fits' if self.fits else ', does not fit'}); largest micro-batch "
                     + ", ".join(f"{mode} {self.max_micro_batch[mode]}" for mode in REMAT_MODES))
        step = self.step_seconds()
        if step:
            line += f"; step ~{step:.3g} s at MFU {self.mfu:g}"
        return line


def largest_micro_batch(workload: Workload, remat: str, budget: int) -> int:
    """The largest per-replica micro-batch whose predicted peak is within ``budget`` under ``remat``
    (with accumulation, so the accumulator counts), 0 when not even the smallest fits."""
    step = workload.batch_step

    def fits(batch: int) -> bool:
        return workload.breakdown(batch, remat, accumulation_steps=2).total <= budget

    if not fits(step):
        return 0
    low, high = step, 2 * step
    while high <= MAX_SEARCHED_BATCH and fits(high):
        low, high = high, 2 * high
    while high - low > step:  # fits(low), not fits(high)
        middle = (low + high) // 2 // step * step
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def fitting_settings(workload: Workload, remat: str, max_batch: int) -> FitChoice | None:
    """The largest micro-batch up to ``max_batch`` that divides the global batch over the replicas,
    with the train_batch_size and accumulation_steps that keep the global batch; None if none does."""
    per_replica_total, remainder = divmod(workload.global_batch, workload.replicas)
    if remainder or max_batch < 1:
        return None
    step = workload.batch_step
    for batch in range(min(max_batch, per_replica_total), 0, -1):
        if batch % step == 0 and per_replica_total % batch == 0:
            accumulation = per_replica_total // batch
            peak = workload.breakdown(batch, remat, accumulation_steps=accumulation).total
            return FitChoice(remat, batch, batch * workload.replicas, accumulation, peak)
    return None


def make_plan(workload: Workload, device: Device | None = None, memory_bytes: int | None = None,
              mfu: float = DEFAULT_MFU) -> Plan:
    """The plan of ``workload``: on ``device``, whose memory ``memory_bytes`` replaces when given (a
    device that reports nothing, or a budget of one's own)."""
    if not 0 < mfu <= 1:
        raise UsageError(f"--mfu must be in (0, 1], got {mfu}")
    if workload.replicas < 1:
        raise UsageError(f"--replicas must be at least 1, got {workload.replicas}")
    memory = memory_bytes if memory_bytes is not None else (device.memory_bytes if device else None)
    budget = None if memory is None else int(memory * USABLE_FRACTION)
    max_batch, choices = {}, {}
    for mode in REMAT_MODES:
        max_batch[mode] = largest_micro_batch(workload, mode, budget) if budget is not None else 0
        choices[mode] = fitting_settings(workload, mode, max_batch[mode]) if budget is not None else None
    model_flops, _ = workload.step_flops()
    step_flops = {mode: workload.step_flops(mode)[1] for mode in REMAT_MODES}
    peak = device.peak_flops(workload.config.precision) if device else None
    return Plan(workload, device, memory, mfu, workload.breakdown(), max_batch, choices, model_flops, step_flops, peak)


def render_text(plan: Plan) -> str:
    """`xlnet plan`'s text output."""
    data, lines = plan.to_dict(), []
    workload = plan.workload
    lines.append(plan.summary())
    lines.append("")
    lines.append(f"memory of one replica ({data['run']}, remat {data['remat']}, peak in the {plan.breakdown.phase} phase):")
    b = plan.breakdown
    rows = [("weights", b.weights), ("gradients (accumulator)", b.gradients), ("optimizer slots (AdamW m, v)",
            b.optimizer_slots), (f"activations ({workload.model.n_layer} layers and the rest)", b.activations),
            ("Transformer-XL memory state", b.memory_state), ("input batch and masks", b.input_batch),
            ("largest transient", b.transient)]
    if workload.segments > 1:
        rows.append((f"earlier segments ({workload.segments - 1}, forward only)", b.earlier_segments))
    rows += [("update phase (variables in flight)", b.update_phase), ("total (predicted peak)", b.total)]
    lines += [f"  {name:<40} {format_bytes(value):>12}" for name, value in rows]
    lines.append("  activations per layer: " + ", ".join(f"{mode} {format_bytes(value)}"
                                                       for mode, value in b.activations_per_layer.items()))
    lines.append("")
    if plan.memory_bytes is None:
        lines.append("no device memory given (--device or --device-memory): no fitting settings")
    else:
        device = plan.device.name if plan.device else "--device-memory"
        lines.append(f"on {device} ({format_bytes(plan.memory_bytes)}, {USABLE_FRACTION:.0%} usable), keeping the "
                     f"global batch {workload.global_batch}:")
        for mode in REMAT_MODES:
            choice = plan.choices[mode]
            fit = (f"train_batch_size {choice.train_batch_size}, accumulation_steps {choice.accumulation_steps} "
                   f"(peak {format_bytes(choice.predicted_peak_bytes)})" if choice else "no setting keeps the global batch")
            lines.append(f"  remat {mode:<9} largest micro-batch/replica {plan.max_micro_batch[mode]:>5}; {fit}")
    lines.append("")
    if plan.peak_flops:
        lines.append(f"time (model FLOPs {plan.model_flops:.3g}/step/replica, peak {plan.peak_flops / 1e12:.3g} TFLOP/s, "
                     f"assumed MFU {plan.mfu:g}, change with --mfu):")
        for mode in REMAT_MODES:
            seconds = plan.step_seconds(mode)
            lines.append(f"  remat {mode:<9} step {seconds:.3g} s")
        lines.append(f"  as configured: {data['tokens_per_second']:.4g} tokens/s, {data['train_steps']} steps in "
                     f"{_clock(data['wall_seconds'])}")
    else:
        lines.append("no peak FLOP/s for this device and precision (--device NAME gives one): no step time")
    return "\n".join(lines)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}d {clock}" if days else clock


def largest_fitting(needed_of: Callable[[int], int], budget: int, limit: int = 1 << 40) -> int:
    """The largest positive value (at most ``limit``) whose ``needed_of(value)`` bytes are within
    ``budget``, 0 when not even 1 is; ``needed_of`` grows with its value."""
    if needed_of(1) > budget:
        return 0
    low, high = 1, 2
    while high <= limit and needed_of(high) <= budget:
        low, high = high, 2 * high
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if needed_of(middle) <= budget else (low, middle)
    return low


def refuse_beyond_memory(setting: str, value: int, needed_of: Callable[[int], int], memory: tuple[int, str],
                         what: str, none_fits: str, why: str = "", detail: str = "") -> None:
    """The one bound on a setting that sizes memory (a cache's or a memory's positions): a UsageError
    naming ``setting`` when ``needed_of(value)`` bytes exceed USABLE_FRACTION of ``memory`` ((bytes,
    what they are)), with the largest value that fits, checked before anything is allocated.
    ``what``: what needs the bytes (``detail``: of what they are made), ``none_fits``: the remedy
    when not even 1 fits, ``why``: how ``value`` came about when ``setting`` did not set it."""
    total, source = memory
    budget = int(total * USABLE_FRACTION)
    needed = needed_of(value)
    if needed <= budget:
        return
    largest = largest_fitting(needed_of, budget)
    remedy = f"the largest that fits is {setting} {largest}" if largest else none_fits
    raise UsageError(f"{setting} {value}{why}: {what} needs about {format_bytes(needed)}{detail}, more than "
                     f"{USABLE_FRACTION:.0%} of {source} ({format_bytes(total)}); {remedy}")
