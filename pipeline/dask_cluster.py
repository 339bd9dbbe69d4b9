"""`xlnet preprocess --runner dask`: the pipeline on a Dask cluster through Beam's DaskRunner.

* ``--dask-scheduler tcp://HOST:PORT`` runs on an existing cluster (``dask scheduler`` and
  ``dask worker`` processes, dask-kubernetes, dask-jobqueue, ...). Without it the run starts a
  local cluster of ``--workers`` worker *processes* on 127.0.0.1 and shuts it down at the end.
  Never threads: Beam's DaskRunner shares one output receiver between the partitions of a stage,
  which in one process hands every partition's results to every later stage (a Beam bug).
* Before any work, every worker must import the pipeline (Apache Beam, SentencePiece, this
  project): a worker that cannot is named, with the missing package.
* Partitions: Beam's default (128 elements each) would put every read and every shard into one
  task. The run instead splits its elements (input files and shard markers) into at least twice
  as many partitions as the cluster has workers, when there are that many elements;
  ``--dask_npartitions`` or ``--dask_partition_size`` override it.
* A scheduler that cannot be reached, or that goes away mid-run, and workers lost beyond what Dask
  retries, are one DaskError (exit 3) naming ``--dask-scheduler``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
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
    """Dask's options only with the Dask runner; --dask-scheduler and --dask_client_address not both."""
    given = [flag.split("=", 1)[0] for flag in runner_options if flag.startswith(OPTION_PREFIX)]
    if not is_dask(runner) and (given or scheduler):
        raise ConfigError(f"{(given or ['--dask-scheduler'])[0]} is an option of --runner dask, not of {runner}")
    if scheduler and "--dask_client_address" in given:
        raise ConfigError("give the scheduler once: --dask-scheduler (or Beam's --dask_client_address), not both")


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
        return float(value)
    except ValueError:
        raise ConfigError(f"--dask_connection_timeout must be a number of seconds, got {value!r}") from None


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
        try:
            client = stack.enter_context(distributed.Client(scheduler, timeout=timeout))
        except (OSError, TimeoutError) as error:
            raise DaskError(f"{where}: cannot reach the Dask scheduler ({error}); start it, or check the "
                            "address") from None
        found = check_workers(client, where)
        yield DaskCluster(scheduler, found, local, client)


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
    except Exception as error:
        raise dask_failure(error, cluster) or error
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
