"""The plan's check before `xlnet train` and `xlnet finetune` build anything (trainer/planning/).

Both print the plan's one-line summary. When the device's memory is known (``--device-memory``,
a GPU's as TensorFlow reports it, a TPU's by its generation) and the predicted peak of one
replica is above the usable fraction of it (``planning.plan.USABLE_FRACTION``), the run stops
(exit 2) naming the peak, the memory and settings that fit; with ``auto_fit`` it takes the cheapest
of those settings instead (same global batch) and the resolved configuration it goes on with, saved
in the model directory, holds them.
"""
from __future__ import annotations

from typing import Callable

from tfrecords.errors import UsageError
from trainer.launch.run_setup import console_log


class DoesNotFit(UsageError):
    """The plan predicts more memory than the device has (a usage error: exit 2)."""


def fit_to_device(command: str, model, config, strategy, device_memory: str | None,
                  log: Callable[[str], None] = console_log):
    """``config`` checked against the device's memory (see the module docstring); returns it, or
    with ``auto_fit`` the fitting settings. Raises DoesNotFit, or UsageError for a bad size."""
    from trainer.planning.devices import format_bytes, parse_memory_size, reported_memory
    from trainer.planning.plan import USABLE_FRACTION, Workload, make_plan

    memory, source = (parse_memory_size(device_memory), "--device-memory") if device_memory else \
        reported_memory(strategy)
    plan = make_plan(Workload(model, config, strategy.num_replicas_in_sync), memory_bytes=memory)
    log(f"{command}: {plan.summary()}")
    if plan.fits is None or plan.fits:
        return config
    choice = plan.cheapest()
    if config.auto_fit and choice is not None:
        log(f"{command}: auto_fit: remat {choice.remat}, train_batch_size {choice.train_batch_size}, "
            f"accumulation_steps {choice.accumulation_steps} (micro-batch {choice.micro_batch} per replica, global "
            f"batch {plan.workload.global_batch} kept; predicted peak {format_bytes(choice.predicted_peak_bytes)})")
        return config.replace(remat=choice.remat, train_batch_size=choice.train_batch_size,
                              accumulation_steps=choice.accumulation_steps)
    problem = (f"the plan predicts a peak of {format_bytes(plan.predicted_peak_bytes)} per replica, more than "
               f"{USABLE_FRACTION:.0%} of the device's {format_bytes(memory)} ({source})")
    fitting = [c for c in plan.choices.values() if c is not None]
    if not fitting:
        raise DoesNotFit(f"{problem}; nothing fits, not even a micro-batch of {plan.workload.batch_step} with remat "
                         "full that keeps the global batch: use devices with more memory, more replicas or a smaller "
                         "model (`xlnet plan` shows the numbers)")
    options = "; ".join(f"{c.settings()} (micro-batch {c.micro_batch} per replica, peak "
                        f"{format_bytes(c.predicted_peak_bytes)})" for c in fitting)
    raise DoesNotFit(f"{problem}. Settings that fit, keeping the global batch {plan.workload.global_batch}: {options}; "
                     "or --set auto_fit=true to take the cheapest")
