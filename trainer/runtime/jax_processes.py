"""Several processes of one JAX run (``jax.distributed``, set up by Keras's variables).

A run spans processes when Keras's variables say so, on every process before it starts:
``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (the coordinator's ``host:port`` first; the others may
follow, comma-separated), ``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``
(0 is the chief, which writes the model directory). On a Cloud TPU pod slice JAX finds the
coordinator and each host's index itself: ``KERAS_DISTRIBUTION_NUM_PROCESSES`` alone is enough.
Without any of them the run is one process, as before.

Each process then feeds its own devices: the global batch is laid over every device of every
process (process-major, as ``jax.devices()`` orders them), and each process reads the streams of
its devices' rows (tfrecords/numpy_reader.py ``host_batches``), so a run of N processes steps
through the batches of one process with all the devices. On CPUs the processes exchange through
Gloo (JAX's CPU collectives).

TensorFlow-free: the JAX engine's (trainer/runtime/jax_engine.py) only.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any, Mapping, NamedTuple, Optional

import numpy as np

from tfrecords.errors import UsageError
from trainer.runtime.training_stops import PEER_GONE

JOB_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
NUM_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"
INITIALIZATION_TIMEOUT_S = 300  # how long a process waits for the others to start (JAX's default)
SHUTDOWN_TIMEOUT_S = 60  # how long a process that ends waits for the others to end too (JAX's: 300)


class ProcessSettings(NamedTuple):
    """What the environment says of a run's processes (None: for JAX to find, on a Cloud TPU pod)."""

    coordinator: Optional[str]
    count: Optional[int]
    index: Optional[int]


def requested_processes(environ: Optional[Mapping[str, str]] = None) -> Optional[ProcessSettings]:
    """The processes the environment asks for (None: one process, nothing set), each variable
    checked: a bad value is a UsageError naming it."""
    environ = os.environ if environ is None else environ
    if not any(environ.get(name) for name in (JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID)):
        return None
    count = _integer(environ, NUM_PROCESSES, minimum=1)
    addresses = [address.strip() for address in environ.get(JOB_ADDRESSES, "").split(",") if address.strip()]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"{JOB_ADDRESSES}={environ[JOB_ADDRESSES]!r}: each address is host:port "
                             f"(the coordinator's first), not {address!r}")
    if count is not None and len(addresses) > 1 and len(addresses) != count:
        raise UsageError(f"{JOB_ADDRESSES} names {len(addresses)} processes, {NUM_PROCESSES} says {count}")
    index = _integer(environ, PROCESS_ID, minimum=0)
    if index is not None and count is not None and index >= count:
        raise UsageError(f"{PROCESS_ID}={index} is not below {NUM_PROCESSES}={count}")
    if (addresses or index is not None) and (count is None or index is None or not addresses):
        raise UsageError(f"set {JOB_ADDRESSES}, {NUM_PROCESSES} and {PROCESS_ID} together (on a Cloud TPU pod "
                         f"slice, {NUM_PROCESSES} alone: JAX finds the coordinator and each host's index)")
    return ProcessSettings(addresses[0] if addresses else None, count, index)


def _integer(environ: dict, name: str, minimum: int) -> Optional[int]:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise UsageError(f"{name}={text!r} is not an integer of at least {minimum}")
    return value


def start_processes() -> int:
    """Joins the run's processes when the environment asks for several (before JAX starts its
    devices); returns how many there are (1 without the variables)."""
    import jax

    settings = requested_processes()
    if settings is None:
        return 1
    if not jax.distributed.is_initialized():
        # CPU devices exchange through Gloo; without it a multi-process CPU run has no collectives.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(settings.coordinator, settings.count, settings.index,
                                   initialization_timeout=INITIALIZATION_TIMEOUT_S,
                                   shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S)
    return jax.process_count()


def any_process(mine: bool) -> bool:
    """Whether any process passed True (a collective: every process must call it at the same point)."""
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() == 1:
        return mine
    return bool(np.asarray(multihost_utils.process_allgather(np.array([mine]))).any())


def wait_for_every_process(name: str) -> None:
    """Returns once every process has reached the point called ``name`` (a no-op with one)."""
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def lost_process(error: BaseException, index: int, count: int) -> Optional[str]:
    """Which process of a run of ``count`` the failed collective ``error`` says is gone, as process
    ``index`` can tell: of two, the other ("process 1"); "another process" when there are more (Gloo
    and NCCL name an address, not a process); None when ``error`` is not a lost peer or the run is one
    process."""
    if count < 2 or not PEER_GONE.search(str(error)):
        return None
    return f"process {1 - index}" if count == 2 else "another process"


def end_without_the_lost(status: int) -> None:
    """Once a process of the run is gone, JAX's own exit step (``jax.distributed``'s shutdown) waits
    SHUTDOWN_TIMEOUT_S at a barrier for it and then aborts this process with a page of C++ log: this
    registers an exit step that runs before it (the last registered runs first), flushes what was
    written and ends the process with ``status``, the error's own exit status."""

    def leave() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can be told
                pass
        os._exit(status)

    atexit.register(leave)


def local_rows(value: Any) -> np.ndarray:
    """This process's copy of a replicated array (the whole value: every process holds one)."""
    return np.asarray(value.addressable_data(0)) if hasattr(value, "addressable_data") else np.asarray(value)
