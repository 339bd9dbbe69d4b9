"""A real Dask cluster on 127.0.0.1 for tests: one ``dask scheduler`` and N ``dask worker`` processes.

``DaskTestCluster(workers)`` starts them (from the repository root, so the workers import this
checkout's pipeline as users' workers import the installed project), waits until every worker has
joined (bounded), and tears them down by PID. Workers run without a nanny, one thread each: a
worker's PID is then the process that runs its tasks, so a test can kill it mid-run and the run's
report (host:pid per read and shard) names it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

from support.processes import free_ports, start

START_SECONDS = 60.0
# Tasks that have no worker to run on fail after this long (Dask's own setting), so a cluster
# that lost every worker ends a run instead of keeping it waiting.
NO_WORKERS_TIMEOUT = "5s"


class DaskTestCluster:
    """A scheduler and ``workers`` worker processes; ``address`` is the scheduler's tcp:// address."""

    def __init__(self, workers: int, env: dict[str, str] | None = None):
        (port,) = free_ports(1)
        self.address = f"tcp://127.0.0.1:{port}"
        self.env = {"DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": NO_WORKERS_TIMEOUT, **(env or {})}
        self.scheduler = start(["-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
                                "--no-dashboard"], env=self.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        self.workers: list[subprocess.Popen] = []
        try:
            for index in range(workers):
                self.add_worker(f"w{index}")
            if workers:
                self.wait_for_workers(workers)
        except BaseException:
            self.stop()
            raise

    def add_worker(self, name: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Starts one more worker process (``env`` adds to its environment)."""
        worker = start(["-m", "distributed.cli.dask_worker", self.address, "--name", name, "--nthreads", "1",
                        "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", "--death-timeout", "60"],
                       env={**self.env, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.workers.append(worker)
        return worker

    def worker_pids(self) -> list[int]:
        return [worker.pid for worker in self.workers if worker.poll() is None]

    def wait_for_workers(self, count: int) -> None:
        """Until ``count`` workers have joined the scheduler (bounded by START_SECONDS)."""
        import distributed

        with distributed.Client(self.address, timeout=START_SECONDS) as client:
            client.wait_for_workers(count, timeout=START_SECONDS)

    def kill(self, process: subprocess.Popen) -> None:
        """SIGKILL one of the cluster's processes and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        """Kills every process of the cluster, by PID."""
        for process in [*self.workers, self.scheduler]:
            if process.poll() is None:
                self.kill(process)

    def __enter__(self) -> "DaskTestCluster":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


@contextlib.contextmanager
def dask_cluster(workers: int, env: dict[str, str] | None = None) -> Iterator[DaskTestCluster]:
    """A DaskTestCluster for the block."""
    with DaskTestCluster(workers, env) as cluster:
        yield cluster


class HeldFifo:
    """A FIFO whose reader is blocked in its read: ``pid`` is that reader, ``feed`` lets it go."""

    def __init__(self, path: str, writer: int, pid: int):
        self.path, self.pid, self._writer = path, pid, writer

    def feed(self, data: bytes) -> None:
        """Writes ``data`` and closes the writer end: the reader gets the bytes, then an end of file."""
        if self._writer < 0:
            raise AssertionError(f"{self.path} was fed already")
        os.set_blocking(self._writer, True)
        try:
            os.write(self._writer, data)
        finally:
            self.close()

    def close(self) -> None:
        if self._writer >= 0:
            os.close(self._writer)
            self._writer = -1


@contextlib.contextmanager
def blocked_reader(path: str, pids: list[int], timeout: float = 60.0) -> Iterator[HeldFifo]:
    """The FIFO at ``path`` held with its reader blocked: waits (bounded) until one of ``pids`` has it
    open for reading, then yields a HeldFifo naming that process. The writer end stays open, with
    nothing written, until the block ends or ``feed`` is called: the reader stays blocked in its read
    (closing the writer would hand it an end of file). A reader that is not among ``pids`` makes it
    fail, naming who holds the FIFO."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until a reader has it open
        except OSError:
            time.sleep(0.05)
            continue
        held = None
        try:
            while time.time() < deadline:
                found = [pid for pid in pids if holds_open(pid, path)]
                if found:
                    held = HeldFifo(path, writer, found[0])
                    yield held
                    return
                time.sleep(0.05)
        finally:
            if held is not None:
                held.close()
            else:
                os.close(writer)
        raise AssertionError(f"none of {pids} opened {path} within {timeout:.0f} s; held by {holders(path)}")
    raise AssertionError(f"no process opened {path} within {timeout:.0f} s")


def feed_fifo(path: str, data: bytes, timeout: float = 60.0) -> None:
    """Writes ``data`` into the FIFO once a reader opens it (bounded), closes it (an end of file), and
    waits until no process has it open any more: a reader still draining the pipe must not meet the
    next writer (it would wait for that writer's end of file, not its own)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
            continue
        os.set_blocking(writer, True)
        try:
            os.write(writer, data)
        finally:
            os.close(writer)
        while holders(path):
            if time.time() >= deadline:
                raise AssertionError(f"{path}: still open by {holders(path)} {timeout:.0f} s after it was fed")
            time.sleep(0.05)
        return
    raise AssertionError(f"no process opened {path} within {timeout:.0f} s")


def holders(path: str) -> list[int]:
    """The processes that have ``path`` open."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and holds_open(int(name), path)]


def holds_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (its file descriptors change as we look)."""
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for descriptor in descriptors:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{descriptor}") == path:
                return True
    return False
