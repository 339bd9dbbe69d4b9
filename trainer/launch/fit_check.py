"""The plan's check before `xlnet train` and `xlnet finetune` build anything (trainer/planning/).

Both print the plan's one-line summary. When the device's memory is known (``--device-memory``,
a GPU's as TensorFlow reports it, a TPU's by its generation) and the predicted peak of one
replica is above 95% of it, the run stops (exit 2) naming the peak, the memory and settings that
fit; with ``auto_fit`` it takes the cheapest of those settings instead (same global batch) and
the resolved configuration it goes on with, saved in the model directory, holds them.
"""
from __future__ import annotations

import argparse
import os
from typing import Callable
from tfrecords.errors import UsageError

# TPU_ACCELERATOR_TYPE (set on Cloud TPU VMs, e.g. "v4-8", "v5litepod-16") -> the device table's row
TPU_GENERATIONS = (("v5litepod", "tpu-v5e"), ("v5e", "tpu-v5e"), ("v5p", "tpu-v5p"), ("v4", "tpu-v4"),
                   ("v3", "tpu-v3"))


class DoesNotFit(UsageError):
    """The plan predicts more memory than the device has (a usage error: exit 2)."""


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    """--device-memory, shared by `xlnet train` and `xlnet finetune`."""
    parser.add_argument("--device-memory", metavar="SIZE",
                        help="memory per replica (e.g. 16GiB, 80GB, 512MiB) the plan must fit; for devices that "
                             "report none (a CPU). Default: a GPU's as TensorFlow reports it, a TPU's by its "
                             "generation; none on a CPU (no check)")


def reported_memory(strategy) -> tuple[int | None, str]:
    """(bytes per replica, where the figure comes from) of the strategy's devices, (None, "") when
    they report nothing (CPUs)."""
    import tensorflow as tf

    from trainer.planning.devices import DEVICES

    try:
        devices = list(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError, ValueError):  # the default strategy: the first GPU if any
        devices = [device.name for device in tf.config.list_logical_devices()[-1:]]
    kind = devices[0].split("device:")[-1].split(":")[0].upper() if devices else "CPU"
    if kind == "TPU" or "TPU" in type(strategy).__name__:
        accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "")
        for prefix, name in TPU_GENERATIONS:
            if accelerator.startswith(prefix):
                return DEVICES[name].memory_bytes, f"{name}, TPU_ACCELERATOR_TYPE {accelerator}"
        return None, ""
    if kind == "GPU" and tf.config.list_physical_devices("GPU"):
        from tensorflow.python.client import device_lib

        limits = [d.memory_limit for d in device_lib.list_local_devices() if d.device_type == "GPU"]
        if limits:
            return int(min(limits)), "the GPU as TensorFlow reports it"
    return None, ""


def fit_to_device(command: str, model, config, strategy, device_memory: str | None,
                  log: Callable[[str], None] = lambda line: print(line, flush=True)):
    """``config`` checked against the device's memory (see the module docstring); returns it, or
    with ``auto_fit`` the fitting settings. Raises DoesNotFit, or ValueError for a bad flag."""
    from trainer.planning.devices import format_bytes, parse_memory_size
    from trainer.planning.plan import Workload, make_plan

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
    problem = (f"the plan predicts a peak of {format_bytes(plan.predicted_peak_bytes)} per replica, more than 95% of "
               f"the device's {format_bytes(memory)} ({source})")
    fitting = [c for c in plan.choices.values() if c is not None]
    if not fitting:
        raise DoesNotFit(f"{problem}; nothing fits, not even a micro-batch of {plan.workload.batch_step} with remat "
                         "full that keeps the global batch: use devices with more memory, more replicas or a smaller "
                         "model (`xlnet plan` shows the numbers)")
    options = "; ".join(f"{c.settings()} (micro-batch {c.micro_batch} per replica, peak "
                        f"{format_bytes(c.predicted_peak_bytes)})" for c in fitting)
    raise DoesNotFit(f"{problem}. Settings that fit, keeping the global batch {plan.workload.global_batch}: {options}; "
                     "or --set auto_fit=true to take the cheapest")
