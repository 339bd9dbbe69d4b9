"""Child processes in tests: start one, wait on a condition while it runs, signal it, collect its output.

The one way tests run a command they must interrupt (a signal mid-run, a kill to resume from):

* ``start(args)``: ``python ARGS...`` from the repository root, unbuffered, TensorFlow's C++ logs at
  warnings and up, stdout and stderr merged into one text pipe (each can be overridden).
* ``start_as_two_workers(args)``: the same command as worker 0 (chief) and worker 1 of one
  TF_CONFIG cluster on 127.0.0.1; ``start_as_workers(args, count)`` as ``count`` workers.
* ``wait_for(condition, *processes)``: polls ``condition`` until it holds and returns its value; if a
  child exits first, or at the deadline, kills them all and fails with their output.
* ``output_of(*processes)``: each child's output once it exits; all are killed if one overruns.
* ``signal_and_wait(process, signum)``: sends the signal, then reaps the child (its output returned).
* ``stopped(process)``: a context that kills the child at exit if it still runs.
* ``exited_pid()``: the pid of a process that has exited and been reaped.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from support.bundled_data import REPO

# JAX runs share one compilation cache (a JAX engine's run loads a program another compiled), kept
# out of the home directory the engine would use by default.
ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
               "JAX_COMPILATION_CACHE_DIR": os.path.join(tempfile.gettempdir(), f"xlnet-tests-jax-{os.getuid()}")}


def start(args: Sequence[str], *, env: dict[str, str] | None = None, stdout: Any = subprocess.PIPE,
          stderr: Any = subprocess.STDOUT, **popen: Any) -> subprocess.Popen:
    """``python *args`` in the repository root; ``env`` adds to (or, with a None value, removes from)
    the environment of this process and ``ENVIRONMENT``."""
    environment = {**os.environ, **ENVIRONMENT}
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.Popen([sys.executable, *args], cwd=popen.pop("cwd", REPO), env=environment, stdout=stdout,
                            stderr=stderr, text=True, **popen)


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports of 127.0.0.1 free right now."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_as_workers(args: Sequence[str], count: int, **kwargs: Any) -> list[subprocess.Popen]:
    """``python *args`` as workers 0 (chief) to ``count - 1`` of one TF_CONFIG cluster on 127.0.0.1."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(count)]
    configs = [{"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}} for index in range(count)]
    env = kwargs.pop("env", {})
    return [start(args, env={**env, "TF_CONFIG": json.dumps(config)}, **kwargs) for config in configs]


def start_as_two_workers(args: Sequence[str], **kwargs: Any) -> list[subprocess.Popen]:
    """``python *args`` as worker 0 (chief) and worker 1 of one TF_CONFIG cluster on 127.0.0.1."""
    return start_as_workers(args, 2, **kwargs)


def _output(process: subprocess.Popen) -> str:
    """Whatever the (exited or killed) child wrote to its pipes."""
    out, err = process.communicate()
    return "".join(text for text in (out, err) if text)


def wait_for(condition: Callable[[], Any], *processes: subprocess.Popen, timeout: float = 240.0,
             interval: float = 0.2, what: str = "the expected point") -> Any:
    """Polls ``condition`` every ``interval`` seconds while the processes run; returns its first true
    value. If one exits first, or at the deadline, every one is killed and the test fails with
    their output."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        exited = [process for process in processes if process.poll() is not None]
        if exited or time.monotonic() > deadline:
            for process in processes:
                process.kill()
            outputs = "\n".join(_output(process)[-3000:] for process in processes)
            if exited:
                raise AssertionError(f"a process exited ({exited[0].returncode}) before {what}:\n{outputs}")
            raise AssertionError(f"the process did not reach {what} in {timeout:g} s:\n{outputs}")
        time.sleep(interval)


def output_of(*processes: subprocess.Popen, timeout: float = 300.0) -> list[str]:
    """Each process's output (stdout, then stderr if piped apart) once it exits; if one takes longer
    than ``timeout``, every one is killed and the timeout raised."""
    outputs = []
    for process in processes:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
                other.communicate()
            raise
        outputs.append("".join(text for text in (out, err) if text))
    return outputs


def signal_and_wait(process: subprocess.Popen, signum: int = signal.SIGKILL, timeout: float = 240.0) -> str:
    """Sends ``signum`` to the process and waits for it to exit; its output."""
    process.send_signal(signum)
    return output_of(process, timeout=timeout)[0]


@contextlib.contextmanager
def stopped(process: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The process, killed (and reaped) on leaving the block if it still runs."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def exited_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def cli_loads_tensorflow(argv: Sequence[str]) -> bool:
    """Whether ``xlnet_cli.main(argv)``, run in a fresh interpreter, imports TensorFlow; the command
    must succeed (exit status 0)."""
    code = f"import sys, xlnet_cli\nassert xlnet_cli.main({list(argv)!r}) == 0\nprint('tensorflow' in sys.modules)\n"
    finished = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    return finished.stdout.splitlines()[-1] == "True"
