"""The named devices a run can be planned for, and memory sizes as flags spell them.

Each row is one replica's device: its memory and the peak FLOP/s of its matrix units in bfloat16
and in float32 (what TensorFlow's float32 matmuls reach by default: TPUs multiply float32 in
bfloat16 passes, Ampere and later GPUs use TF32), with the public page the figures come from.
A replica is one TPU core on v3 (TPUStrategy's unit there) and one chip on v4 and later
(megacore); one GPU. ``cpu`` is this machine: its memory is read from the system and its peak is
a float32 matmul timed on the spot.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time

from tfrecords.errors import UsageError

GIB = 1024 ** 3
GB = 1000 ** 3
TERA = 1e12


@dataclasses.dataclass(frozen=True)
class Device:
    """One replica's device: ``memory_bytes``, ``bf16_flops`` and ``fp32_flops`` (peak FLOP/s of
    its matrix units; None where the device has no such unit), ``source`` of the figures."""

    name: str
    memory_bytes: int
    bf16_flops: float | None
    fp32_flops: float | None
    source: str
    note: str = ""

    def peak_flops(self, precision: str) -> float | None:
        """The peak FLOP/s a run in ``precision`` (a LoopConfig precision) multiplies at."""
        if precision == "mixed_float16":
            return self.bf16_flops if self.bf16_flops is not None else self.fp32_flops
        return self.bf16_flops if precision == "mixed_bfloat16" else self.fp32_flops


_TPU_DOCS = "https://cloud.google.com/tpu/docs/"
DEVICES: dict[str, Device] = {device.name: device for device in (
    Device("tpu-v3", 16 * GIB, 61.5 * TERA, 61.5 * TERA, _TPU_DOCS + "v3",
           "per core (a v3 chip: 2 cores, 32 GiB, 123 TFLOPS bf16); float32 matmuls run in bfloat16 passes"),
    Device("tpu-v4", 32 * GIB, 275 * TERA, 275 * TERA, _TPU_DOCS + "v4",
           "per chip (megacore); float32 matmuls run in bfloat16 passes"),
    Device("tpu-v5e", 16 * GIB, 197 * TERA, 197 * TERA, _TPU_DOCS + "v5e",
           "per chip; float32 matmuls run in bfloat16 passes"),
    Device("tpu-v5p", 95 * GB, 459 * TERA, 459 * TERA, _TPU_DOCS + "v5p",
           "per chip; float32 matmuls run in bfloat16 passes"),
    Device("v100-16gb", 16 * GIB, None, 15.7 * TERA,
           "https://www.nvidia.com/en-us/data-center/v100/",
           "SXM2; no bfloat16 units (mixed_float16: 125 TFLOPS on its tensor cores)"),
    Device("v100-32gb", 32 * GIB, None, 15.7 * TERA,
           "https://www.nvidia.com/en-us/data-center/v100/",
           "SXM2; no bfloat16 units (mixed_float16: 125 TFLOPS on its tensor cores)"),
    Device("a100-40gb", 40 * GIB, 312 * TERA, 156 * TERA,
           "https://www.nvidia.com/en-us/data-center/a100/", "SXM, dense; float32 as TF32"),
    Device("a100-80gb", 80 * GIB, 312 * TERA, 156 * TERA,
           "https://www.nvidia.com/en-us/data-center/a100/", "SXM, dense; float32 as TF32"),
    Device("h100-80gb", 80 * GIB, 989 * TERA, 494.5 * TERA,
           "https://www.nvidia.com/en-us/data-center/h100/", "SXM, dense; float32 as TF32"),
    Device("h200-141gb", 141 * GB, 989 * TERA, 494.5 * TERA,
           "https://www.nvidia.com/en-us/data-center/h200/", "SXM, dense; float32 as TF32"),
    Device("l4", 24 * GIB, 121 * TERA, 60 * TERA,
           "https://www.nvidia.com/en-us/data-center/l4/", "dense; float32 as TF32"),
    Device("a10g", 24 * GIB, 125 * TERA, 62.5 * TERA,
           "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
           "the A10 datasheet (A10G is AWS's A10); dense; float32 as TF32"),
)}
CPU = "cpu"
DEVICE_NAMES = (*DEVICES, CPU)


def gpu_table_row(reported: str) -> Device | None:
    """The table's row of a GPU its framework names ``reported`` (TensorFlow's device name or JAX's
    device kind, e.g. "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"): the family in the name, the
    memory size too where the family has several rows; None for a GPU the table lacks, and for a PCIe
    part (the table's rows are SXM parts, whose peaks are higher)."""
    name = reported.lower().replace(" ", "")
    if "pcie" in name:
        return None
    rows = [row for row in DEVICES.values() if not row.name.startswith("tpu")
            and row.name.split("-")[0] in name and row.fp32_flops is not None]
    sized = [row for row in rows if "-" in row.name and row.name.split("-")[1] in name]
    return (sized or rows or [None])[0]


def device_named(name: str) -> Device:
    """The device ``name`` (one of DEVICE_NAMES; ``cpu`` is this machine), or a ValueError naming
    ``--device`` and every known name."""
    key = name.strip().lower()
    if key == CPU:
        return this_cpu()
    if key not in DEVICES:
        raise UsageError(f"--device {name!r}: unknown device; choose one of {', '.join(DEVICE_NAMES)} "
                         "(or give --device-memory SIZE)")
    return DEVICES[key]


def host_memory_bytes() -> int:
    """This machine's physical memory, in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def this_cpu() -> Device:
    """This machine as a device: its physical memory and the float32 matmul peak timed now."""
    memory = host_memory_bytes()
    peak = measured_matmul_peak("float32")
    return Device(CPU, memory, measured_matmul_peak("bfloat16"), peak, "this machine: memory from the "
                  "system, peaks from a 1024 x 1024 matmul timed now")


def measured_matmul_peak(dtype_name: str, size: int = 1024, repeats: int = 5) -> float:
    """Best FLOP/s of a [size, size] x [size, size] matmul in ``dtype_name`` ("float32" or
    "bfloat16") on this machine now."""
    import tensorflow as tf

    dtype = tf.bfloat16 if dtype_name == "bfloat16" else tf.float32
    a = tf.random.stateless_normal([size, size], seed=[0, 0])  # no random state: a deterministic run needs none
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1], tf.float32)))
    matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        float(matmul(a, b))
        best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 / best


# TPU_ACCELERATOR_TYPE (set on Cloud TPU VMs, e.g. "v4-8", "v5litepod-16") -> the device table's row
TPU_GENERATIONS = (("v5litepod", "tpu-v5e"), ("v5e", "tpu-v5e"), ("v5p", "tpu-v5p"), ("v4", "tpu-v4"),
                   ("v3", "tpu-v3"))


def reported_memory(strategy) -> tuple[int | None, str]:
    """(bytes per replica, where the figure comes from) of a tf.distribute strategy's devices, (None,
    "") when they report nothing (CPUs): a TPU's by its generation (TPU_ACCELERATOR_TYPE), a GPU's
    as TensorFlow reports it."""
    import tensorflow as tf

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


_UNITS = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": GB, "tb": 1000 ** 4,
          "kib": 1024, "mib": 1024 ** 2, "gib": GIB, "tib": 1024 ** 4}
_UNIT_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_memory_size(text: str, flag: str = "--device-memory") -> int:
    """Bytes of a size such as ``16GiB``, ``80GB``, ``512MiB`` or ``1073741824B``; a UsageError
    naming ``flag`` and the units otherwise. The unit is required: a bare ``16`` meant as GiB would
    plan for 16 bytes, and ``16G`` could be either GiB or GB. The one reader of a size a user types
    (`xlnet plan`, `xlnet train`, `xlnet finetune` ``--device-memory``)."""
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS or float(match.group(1)) <= 0:
        problem = ("not a positive size" if match is None or float(match.group(1)) <= 0
                   else f"unknown unit {match.group(2)!r}" if unit else "a size needs a unit")
        raise UsageError(f"{flag} {text!r}: {problem}; expected a size such as 16GiB, 80GB or 512MiB "
                         f"(units: {_UNIT_NAMES}; GiB = 2^30 bytes, GB = 10^9)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(count: float) -> str:
    """``count`` bytes in GiB or MiB, for messages."""
    return f"{count / GIB:.2f} GiB" if abs(count) >= GIB else f"{count / 1024 ** 2:.1f} MiB"
