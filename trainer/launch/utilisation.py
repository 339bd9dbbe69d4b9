"""What a run's model FLOPs utilisation (MFU) is measured with (trainer/runtime/throughput.py).

The model FLOPs of one optimizer step come from the plan's one FLOPs rule (trainer/planning/flops.py
through planning.plan.Workload) for the configuration that runs: its global batch, sequence
length, memory and head, without what remat recomputes. The peak is the device table's
(trainer/planning/devices.py) for a TPU (by TPU_ACCELERATOR_TYPE) or a GPU (by the name TensorFlow
reports), in the run's precision; on a CPU, or a device the table lacks, a matmul is timed
(``measured_matmul_peak``, once per process) with the thread settings the run uses. A CPU's
figure is its host's (the replicas of one host share its cores); a device's is multiplied by the
replicas.
"""
from __future__ import annotations

import functools
import os

from trainer.runtime.throughput import StepFlops


def run_step_flops(model, config, strategy, options: int = 1) -> StepFlops:
    """The StepFlops of a run of ``model`` (ModelConfig) with ``config`` (TrainConfig or
    FinetuneConfig) under ``strategy``; ``options``: rows per multiple-choice example."""
    from trainer.planning.plan import Workload

    replicas = strategy.num_replicas_in_sync
    per_replica, _ = Workload(model, config, replicas, options=options).step_flops()
    peak, source = peak_flops(strategy, config.precision)
    return StepFlops(per_replica * replicas, peak, source)


def jax_step_flops(model, config) -> StepFlops:
    """The StepFlops of a JAX engine's run of ``model`` with ``config`` over the devices of every
    process (each process's peak taken to be this one's)."""
    import jax

    from trainer.planning.plan import Workload

    replicas = jax.device_count()
    per_replica, _ = Workload(model, config, replicas).step_flops()
    peak, source = jax_peak_flops(config.precision)
    return StepFlops(per_replica * replicas, peak * jax.process_count(), source)


def jax_peak_flops(precision: str) -> tuple[float, str]:
    """(peak FLOP/s of this process's JAX devices in ``precision``, where the figure comes from): the
    device table's for a TPU or a GPU it has, else a matmul timed on JAX (a CPU's figure is its host's)."""
    import jax

    from trainer.planning.devices import DEVICES, TPU_GENERATIONS, gpu_table_row

    devices = jax.local_devices()
    platform = devices[0].platform.upper()
    if platform == "TPU":
        accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "")
        for prefix, name in TPU_GENERATIONS:
            if accelerator.startswith(prefix):
                return _table(DEVICES[name], precision, len(devices))
    if platform == "GPU":
        device = gpu_table_row(devices[0].device_kind)
        if device is not None:
            return _table(device, precision, len(devices))
    dtype = "bfloat16" if precision == "mixed_bfloat16" else "float32"
    measured = _jax_matmul_peak(dtype)
    if platform == "CPU":
        return measured, f"measured_matmul_peak ({dtype}, this CPU)"
    return measured * len(devices), f"measured_matmul_peak ({dtype}, this {platform})"


@functools.lru_cache(maxsize=None)
def _jax_matmul_peak(dtype: str, size: int = 1024, repeats: int = 5) -> float:
    """Best FLOP/s of a [size, size] matmul in ``dtype`` on JAX's first device, timed once per process."""
    import time

    import jax
    import jax.numpy as jnp

    a = jnp.asarray(jax.random.normal(jax.random.key(0), (size, size)), dtype)
    matmul = jax.jit(lambda x, y: jnp.sum((x @ y)[:1, :1].astype(jnp.float32)))
    matmul(a, a.T).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, a.T).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 / best


def peak_flops(strategy, precision: str) -> tuple[float, str]:
    """(peak FLOP/s of all of ``strategy``'s replicas in ``precision``, where the figure comes from)."""
    import tensorflow as tf

    from trainer.planning.devices import DEVICES, TPU_GENERATIONS, gpu_table_row
    from trainer.runtime.distribution import worker_info

    replicas = strategy.num_replicas_in_sync
    kind = _device_kind(strategy)
    if kind == "TPU":
        accelerator = os.environ.get("TPU_ACCELERATOR_TYPE", "")
        for prefix, name in TPU_GENERATIONS:
            if accelerator.startswith(prefix):
                return _table(DEVICES[name], precision, replicas)
    if kind == "GPU":
        gpus = tf.config.list_physical_devices("GPU")
        reported = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "") if gpus else ""
        device = gpu_table_row(reported)
        if device is not None:
            return _table(device, precision, replicas)
    dtype = "bfloat16" if precision == "mixed_bfloat16" else "float32"
    measured = _measured_once(dtype)
    if kind == "CPU":  # every replica of a host runs on the same cores
        _, workers = worker_info(strategy)
        return measured * workers, f"measured_matmul_peak ({dtype}, this CPU)"
    return measured * replicas, f"measured_matmul_peak ({dtype}, this {kind or 'device'})"


@functools.lru_cache(maxsize=None)
def _measured_once(dtype: str) -> float:
    """measured_matmul_peak of ``dtype``, timed once per process (every run of a process shares
    its CPU and thread settings; a test process starts many runs)."""
    from trainer.planning.devices import measured_matmul_peak

    return measured_matmul_peak(dtype)


def _table(device, precision: str, replicas: int) -> tuple[float, str]:
    return device.peak_flops(precision) * replicas, f"{device.name} (device table, {precision})"


def _device_kind(strategy) -> str:
    """"TPU", "GPU" or "CPU": what ``strategy``'s replicas run on."""
    import tensorflow as tf

    if "TPU" in type(strategy).__name__:
        return "TPU"
    try:
        devices = list(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError, ValueError):  # the default strategy: its default device
        devices = [device.name for device in tf.config.list_logical_devices()[-1:]]
    return devices[0].split("device:")[-1].split(":")[0].upper() if devices else "CPU"
