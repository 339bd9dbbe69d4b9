"""`xlnet preprocess --runner dask`: the pipeline on a Dask cluster through Beam's DaskRunner.

* ``--dask-scheduler tcp://HOST:PORT`` runs on an existing cluster (``dask scheduler`` and
  ``dask worker`` processes, dask-kubernetes, dask-jobqueue, ...). Without it the run starts a
  local cluster of ``--workers`` worker *processes* on 127.0.0.1 and shuts it down at the end.
  Never threads: Beam's DaskRunner shares one output receiver between the partitions of a stage,
  which in one process hands every partition's results to every later stage (a Beam bug).
* Before any work, every worker must import the pipeline (Apache Beam, SentencePiece, this
  project): a worker that cannot is named, with the missing package.
* Partitions: Beam's default (128 elements each) would put every read and every shard into one
  task. The run instead splits its elements (one per input file, with the shard markers) into at
  least twice as many partitions as the cluster has workers, when there are that many elements;
  ``--dask_npartitions`` or ``--dask_partition_size`` override it.
* A scheduler that cannot be reached, or that goes away mid-run, and workers lost beyond what Dask
  retries, are one DaskError (exit 3) naming ``--dask-scheduler``.
* Before the Dask client connects, the address is checked (``check_options``: a scheme Dask speaks,
  a numeric port; a positive, finite ``--dask_connection_timeout``; positive partition options) and
  the scheduler is greeted (``check_scheduler``): something listening there that is not a Dask
  scheduler (a dashboard, a web server) is refused within ``--dask_connection_timeout`` +
  HANDSHAKE_SECONDS, having been read at most HANDSHAKE_MAX_BYTES; a Dask client would wait for ever,
  or read the other server's words as a length to allocate.
* A run that fails cancels its tasks while the scheduler is there to hear it; tasks that run on
  after a lost scheduler are fenced off by the run's staging place (pipeline/data_directory.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import re
import socket
import struct
import time
from typing import Any, Iterator

from tfrecords.errors import DataError
from tfrecords.record_config import ConfigError

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
RUNNER_NAMES = ("dask", "daskrunner", DASK_RUNNER.lower())
# Beam's Dask options (apache_beam/runners/dask/dask_runner.py) all start with this.
OPTION_PREFIX = "--dask_"
CONNECT_SECONDS = 10.0  # reaching the scheduler, unless --dask_connection_timeout says otherwise
WORKER_WAIT_SECONDS = 30.0  # an existing cluster without a worker yet
# How often the run checks that the scheduler is still there while it waits for the result.
POLL_SECONDS = 1.0
# A scheduler greets a new connection first: its handshake arrives within this long, in a frame
# of at most this many bytes (a few hundred in practice).
HANDSHAKE_SECONDS = 5.0
HANDSHAKE_MAX_BYTES = 1 << 16
# The address schemes of Dask's communication backends that reach another process.
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(?P<port>[^\s:/]*)$")
# What a worker must import to run the pipeline (the check names the first it lacks).
PIPELINE_IMPORTS = "import apache_beam, sentencepiece, numpy, pipeline.beam_pipeline"
INSTALL_HINT = ('install the project on every worker: the Dockerfile image, or pip install ".[pipeline]" '
                "(see docs/preprocessing.md)")
_LOG = logging.getLogger("xlnet.preprocess")


class DaskError(DataError):
    """The Dask cluster could not run the pipeline: unreachable, gone, or its workers lost (exit 3)."""


def is_dask(runner: str) -> bool:
    """Whether --runner names Beam's DaskRunner (dask, DaskRunner or its class path)."""
    return runner.lower() in RUNNER_NAMES


def check_options(runner: str, runner_options: list[str], scheduler: str | None) -> None:
    """Dask's options only with the Dask runner; --dask-scheduler and --dask_client_address not both;
    the scheduler's address, the connection timeout and the partition options well formed. Raises a
    ConfigError (exit 2) naming the flag; needs neither Dask nor Beam."""
    given = [flag.split("=", 1)[0] for flag in runner_options if flag.startswith(OPTION_PREFIX)]
    if not is_dask(runner) and (given or scheduler):
        raise ConfigError(f"{(given or ['--dask-scheduler'])[0]} is an option of --runner dask, not of {runner}")
    if scheduler and "--dask_client_address" in given:
        raise ConfigError("give the scheduler once: --dask-scheduler (or Beam's --dask_client_address), not both")
    if scheduler is not None:
        host_port(scheduler, "--dask-scheduler")
    if scheduler_option(runner_options) is not None:
        host_port(scheduler_option(runner_options), "--dask_client_address")
    connection_timeout(runner_options)
    for flag in ("--dask_npartitions", "--dask_partition_size"):
        value = option_value(runner_options, flag)
        if value is not None and not (value.strip().isdigit() and int(value) >= 1):
            raise ConfigError(f"{flag} must be a whole number >= 1, got {value!r}")


def host_port(address: str, flag: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a scheduler address (``tcp://`` when it names none); a ConfigError
    naming ``flag`` when it is not one Dask can connect to."""
    scheme, separator, rest = address.partition("://")
    if not separator:
        scheme, rest = "tcp", address
    if scheme not in SCHEMES:
        raise ConfigError(f"{flag} {address!r}: {scheme + '://' if separator else 'no'} is not a protocol Dask "
                          f"speaks; give the scheduler's address, e.g. tcp://HOST:8786 ({', '.join(SCHEMES)})")
    match = _HOST_PORT.match(rest)
    if match is None:
        raise ConfigError(f"{flag} {address!r} is not a scheduler address; give {scheme}://HOST:PORT")
    port = match["port"]
    if not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ConfigError(f"{flag} {address!r}: the port must be a number from 1 to 65535, got {port!r}")
    return scheme, match["host"].strip("[]"), int(port)


@dataclasses.dataclass
class DaskCluster:
    """The cluster a run uses: its scheduler's address, its workers, and the client that checked them."""

    address: str
    workers: list[str]
    local: bool
    client: Any

    @property
    def where(self) -> str:
        """How messages name the cluster: the flag that chose it, or the local one."""
        return "the local Dask cluster" if self.local else f"--dask-scheduler {self.address}"

    def runner_options(self, runner_options: list[str], elements: int) -> list[str]:
        """Beam's Dask options for the run: its scheduler and its partitions (see the module docstring)."""
        given = {flag.split("=", 1)[0] for flag in runner_options}
        extra = [] if "--dask_client_address" in given else [f"--dask_client_address={self.address}"]
        if "--dask_connection_timeout" not in given:
            extra.append(f"--dask_connection_timeout={int(CONNECT_SECONDS)}")
        if not given & {"--dask_npartitions", "--dask_partition_size"}:
            extra.append(f"--dask_partition_size={partition_size(elements, len(self.workers))}")
        return list(runner_options) + extra


def partition_size(elements: int, workers: int) -> int:
    """Elements per partition so that there are at least 2 x ``workers`` partitions (when there are
    that many elements): from_sequence makes ceil(elements / size) of them."""
    return max(1, elements // (2 * max(1, workers)))


def option_value(runner_options: list[str], flag: str) -> str | None:
    """The value given to a Beam option among the pass-through flags (``--flag=V`` or ``--flag V``)."""
    for index, given in enumerate(runner_options):
        if given.startswith(flag + "="):
            return given.split("=", 1)[1]
        if given == flag and index + 1 < len(runner_options):
            return runner_options[index + 1]
    return None


def scheduler_option(runner_options: list[str]) -> str | None:
    """The scheduler named by Beam's own --dask_client_address, if given."""
    return option_value(runner_options, "--dask_client_address")


def connection_timeout(runner_options: list[str]) -> float:
    """Seconds to reach the scheduler: --dask_connection_timeout, else CONNECT_SECONDS."""
    value = option_value(runner_options, "--dask_connection_timeout")
    if value is None:
        return CONNECT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"--dask_connection_timeout must be a positive, finite number of seconds, got {value!r}")
    return seconds


@contextlib.contextmanager
def dask_cluster(scheduler: str | None, workers: int, timeout: float = CONNECT_SECONDS) -> Iterator[DaskCluster]:
    """The cluster at ``scheduler`` (reached within ``timeout`` seconds), or a local one of
    ``workers`` processes shut down at exit; its workers checked (check_workers). Raises DaskError
    naming --dask-scheduler."""
    try:
        import distributed
    except ImportError as error:
        raise ConfigError(f"--runner dask needs Dask: pip install \".[dask]\" ({error})") from None
    quiet_dask_logs()
    with contextlib.ExitStack() as stack:
        local = scheduler is None
        if local:
            _LOG.info("starting a local Dask cluster of %d worker process(es)", workers)
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None, silence_logs=logging.WARNING))
            scheduler = cluster.scheduler_address
        where = "the local Dask cluster" if local else f"--dask-scheduler {scheduler}"
        if not local:
            check_scheduler(scheduler, where, timeout)
        try:
            client = stack.enter_context(distributed.Client(scheduler, timeout=timeout))
        except (OSError, TimeoutError) as error:
            raise DaskError(f"{where}: cannot reach the Dask scheduler ({error}); start it, or check the "
                            "address") from None
        found = check_workers(client, where)
        yield DaskCluster(scheduler, found, local, client)


def check_scheduler(address: str, where: str, timeout: float) -> None:
    """Refuses, as a DaskError (exit 3), an address where no Dask scheduler answers: nothing listening
    within ``timeout`` seconds, or a server that does not greet as Dask does within HANDSHAKE_SECONDS
    (reading at most HANDSHAKE_MAX_BYTES), or a Dask process that is not a scheduler (a worker)."""
    scheme, host, port = host_port(address, "--dask-scheduler")
    if scheme == "tcp":
        try:
            connection = socket.create_connection((host, port), timeout=timeout)
        except OSError as error:
            raise DaskError(f"{where}: cannot reach the Dask scheduler ({error}); start it, or check the "
                            "address") from None
        with connection:
            problem = dask_greeting_problem(connection)
        if problem:
            raise DaskError(f"{where} is not a Dask scheduler: {problem}; give the address `dask scheduler` "
                            "prints (tcp://HOST:8786 by default), not its dashboard's or another server's")
    try:
        kind = asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout + HANDSHAKE_SECONDS))
    except (OSError, asyncio.TimeoutError) as error:
        raise DaskError(f"{where}: the Dask scheduler did not say who it is within {timeout + HANDSHAKE_SECONDS:.0f} s "
                        f"({type(error).__name__}); check the address") from None
    if kind != "Scheduler":
        raise DaskError(f"{where} is a Dask {kind or 'process'}, not a scheduler; give the scheduler's address")


async def _identity(address: str, timeout: float) -> str | None:
    """The type a Dask server says it is ("Scheduler", "Worker", ...)."""
    from distributed.core import rpc

    async with rpc(address, timeout=timeout) as remote:
        identity = await remote.identity()
    return identity.get("type") if isinstance(identity, dict) else None


def dask_greeting_problem(connection: socket.socket) -> str | None:
    """What is wrong with the first message on a new connection, as a Dask scheduler would send it
    (a length, then that many bytes of msgpack naming its protocol's settings); None when it is one."""
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    head = _received(connection, 8, deadline)
    if head is None:
        return f"it sent nothing within {HANDSHAKE_SECONDS:.0f} s of the connection (a Dask scheduler speaks first)"
    (length,) = struct.unpack("<Q", head)
    if not 0 < length <= HANDSHAKE_MAX_BYTES:
        return f"its first bytes {head!r} are not Dask's protocol"
    body = _received(connection, length, deadline)
    try:
        from distributed.protocol import loads
        from distributed.protocol.utils import unpack_frames

        message = loads(unpack_frames(body), deserialize=False) if body is not None else None
    except Exception:  # another protocol's bytes: what, does not matter
        message = None
    if not (isinstance(message, dict) and "compression" in message):
        return f"its first {length + 8} bytes are not a Dask handshake"
    return None


def _received(connection: socket.socket, size: int, deadline: float) -> bytes | None:
    """Exactly ``size`` bytes from ``connection`` before ``deadline``, or None (silence, or closed)."""
    data = b""
    while len(data) < size:
        connection.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = connection.recv(size - len(data))
        except OSError:  # socket.timeout included
            return None
        if not chunk:
            return None
        data += chunk
    return data


def quiet_dask_logs() -> None:
    """Dask's client logs a lost scheduler or worker with tracebacks, over and over while it tries to
    reconnect; the run reports a cluster failure itself, in one line (DaskError)."""
    import distributed  # noqa: F401 (configures its loggers on import: set them after)

    for name in list(logging.root.manager.loggerDict):
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def check_workers(client, where: str) -> list[str]:
    """The workers' addresses, once every one has imported the pipeline; DaskError naming the first
    that cannot, and the package it lacks, or when there is no worker within WORKER_WAIT_SECONDS."""
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_SECONDS)
        results = client.run(exec, PIPELINE_IMPORTS, on_error="return")
    except (OSError, TimeoutError) as error:
        raise DaskError(f"{where}: no Dask worker joined within {WORKER_WAIT_SECONDS:.0f} s ({error}); start "
                        "`dask worker` processes") from None
    for address, outcome in sorted(results.items()):
        if isinstance(outcome, BaseException):
            missing = getattr(outcome, "name", None)
            what = f"lacks the package {missing!r}" if missing else f"cannot import the pipeline ({outcome})"
            raise DaskError(f"{where}: worker {address} {what}; {INSTALL_HINT}")
    return sorted(results)


def wait_for_run(result, cluster: DaskCluster) -> None:
    """Waits for a DaskRunner result while checking that the cluster is still there. Raises
    DaskError when the scheduler goes away or Dask gives up on a task whose workers kept dying
    (it re-runs a lost worker's tasks elsewhere by itself); any other error is the pipeline's."""
    import distributed

    futures = result.futures if isinstance(result.futures, list) else [result.futures]
    without_workers = None  # since when the cluster has had no worker
    try:
        while True:
            try:
                distributed.wait(futures, timeout=POLL_SECONDS)
                break
            except TimeoutError:  # still running: is the cluster still there?
                if result.client.status not in ("running", "connecting"):
                    raise DaskError(f"{cluster.where}: the Dask scheduler went away mid-run (its client is "
                                    f"{result.client.status}); nothing was published") from None
                if result.client.status == "running" and not result.client.scheduler_info().get("workers"):
                    without_workers = without_workers or time.monotonic()
                    if time.monotonic() - without_workers > WORKER_WAIT_SECONDS:
                        raise DaskError(f"{cluster.where}: every Dask worker is gone and none joined within "
                                        f"{WORKER_WAIT_SECONDS:.0f} s; nothing was published") from None
                else:
                    without_workers = None
        for future in futures:
            future.result()
    except BaseException as error:
        if result.client.status == "running":  # stop its tasks while a scheduler is there to hear it
            with contextlib.suppress(Exception):
                result.client.cancel(futures, force=True)
        if isinstance(error, Exception):
            raise dask_failure(error, cluster) or error
        raise
    finally:
        with contextlib.suppress(Exception):
            result.client.close(timeout=5)


def dask_failure(error: BaseException, cluster: DaskCluster) -> DaskError | None:
    """The one sentence for a cluster failure (a lost scheduler, no worker left, workers that kept
    dying), or None when ``error`` is the pipeline's own."""
    import concurrent.futures

    from distributed.comm.core import CommClosedError

    name = type(error).__name__
    if isinstance(error, DaskError):
        return error
    if isinstance(error, (CommClosedError, concurrent.futures.CancelledError)):
        return DaskError(f"{cluster.where}: lost the connection to the Dask scheduler mid-run ({name}); nothing "
                         "was published")
    if name in ("NoWorkerError", "NoValidWorkerError"):
        return DaskError(f"{cluster.where}: no Dask worker was left to run the pipeline's tasks ({name}); nothing "
                         "was published")
    if name == "KilledWorker":
        return DaskError(f"{cluster.where}: Dask workers kept dying while running a task ({name}); nothing was "
                         "published")
    return None
