"""Goodput: where a job's wall time goes, kept across its runs in ``MODEL_DIR/goodput.json``.

A job is every run on one model directory: the first, and each resume after a preemption or a
kill. Each second of a run, from the command's start (trainer/runtime/run_clock.py) to the end of
its training loop, falls in exactly one category:

* ``startup``: the command's start to the first step (importing TensorFlow, checking the data,
  building the model, restoring the checkpoint, opening the input);
* ``compile``: the first loop of steps of each run, one step that traces and compiles the
  tf.function (the step's own work is in it too: it cannot be told apart);
* ``productive``: every other loop of training steps;
* ``input``: the part of those loops the steps spent waiting for their input, where the engine
  tells it apart (the JAX engine, whose reader runs in a thread beside the steps:
  :meth:`GoodputRecorder.waited_for_input`); TensorFlow's input runs inside its loop of steps and
  stays in ``productive``;
* ``evaluation``, ``checkpoint``: evaluations and checkpoint saves (an asynchronous save counts
  the time the loop waits for it);
* ``lost``: productive time a killed run spent on steps after its last checkpoint, which the next
  run trains again; moved out of ``productive`` when that run resumes (the killed run's own
  measurement of those steps, plus an estimate at the job's mean step time for steps before that
  checkpoint when an older one resumes); and the time a killed run lived after the job's last
  record (the loop it was killed in, never recorded), up to the last heartbeat of its run lock
  (trainer/runtime/run_lock.py), added when the next run, which took that lock over, begins (or
  found it removed by hand: the heartbeat is kept in run.heartbeat too);
* ``other``: the loop's bookkeeping between those (the step log, TensorBoard, progress lines,
  this file, the profiler's start and stop).

``goodput`` is productive over total seconds. The file is rewritten after every loop of steps
(on a local disk through a temporary file and a rename, an object store publishing it whole), so
a run killed with SIGKILL keeps all but its last, unfinished loop, whose time up to its lock's
last heartbeat (at most ``HEARTBEAT_SECONDS`` before the kill) the next run counts as lost. Only
the chief writes it.

The file only monitors the job: one that is not a record (not JSON, a field of another type:
:func:`record_problems`, the one check of its structure) never stops a run, which sets it aside
under ``MODEL_DIR/damaged/`` with a warning and starts a new record; `xlnet goodput` names what
is wrong with it (GoodputFileError, exit status 3). This module imports no TensorFlow.
"""
from __future__ import annotations

import contextlib
import json
import math
import posixpath
import sys
import time
from typing import Any, Callable, Iterator, Mapping, Protocol

from tfrecords.errors import DataError
from tfrecords.json_documents import load_json
from tfrecords.lock_owner import owner_time
from trainer.runtime.storage import exists, read_bytes

FILE = "goodput.json"
CATEGORIES = ("productive", "startup", "compile", "input", "evaluation", "checkpoint", "lost", "other")


class RecordedDirectory(Protocol):
    """What the recorder needs of a model directory (trainer/runtime/model_dir.py ModelDirectory,
    not imported: it imports TensorFlow, and `xlnet goodput` reads a record without it)."""

    path: str

    def replace_json(self, name: str, value: Any) -> None: ...

    def set_aside_file(self, name: str) -> str: ...


class GoodputFileError(DataError):
    """A goodput.json that is not a goodput record (exit status 3); the message names the file and
    what is wrong with it, ``problem`` the latter alone."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path} is not a goodput record: {problem}. It only monitors the job: remove it, or let "
                         "the next `xlnet train` or `xlnet finetune` set it aside under damaged/ and start a new one")
        self.path, self.problem = path, problem


class GoodputRecorder:
    """One run's share of its job's goodput, added to ``goodput.json`` as the run goes.

    Args:
      model_dir: the run's model directory.
      started: when the run's command started (a time.time() value): its start-up counts from there.
      enabled: False off the chief: nothing is read or written.
    """

    def __init__(self, model_dir: RecordedDirectory, started: float, enabled: bool = True):
        self.model_dir, self.enabled = model_dir, enabled
        self._mark = started  # every second before this is counted
        self._run = dict.fromkeys(CATEGORIES, 0.0)  # this run's seconds
        self._run_steps = 0  # this run's productive steps
        self._before: dict[str, Any] = empty_record()  # the job's record before this run
        self._unsaved = _window(0)

    def begin(self, step: int, killed_run: Mapping[str, Any] | None = None) -> float:
        """Ends the run's start-up; the run resumed at ``step``. Counts the run, moves the productive
        time of the steps it trains again (a killed run's work after its last checkpoint) to
        ``lost``, and adds to ``lost`` the time a killed run lived after the job's last record (the
        loop it was killed in), up to its run lock's last heartbeat (``killed_run``: the record of
        the lock this run took over, run_lock.taken_over_from; None when it took over none); returns
        the seconds lost. A goodput.json that is not a record is set aside with a warning, and a new
        record starts."""
        self._count("startup")
        before = self._previous() if self.enabled else empty_record()
        seconds = {name: float(before["seconds"].get(name, 0.0)) for name in CATEGORIES}
        steps, lost = _replayed(before.get("unsaved"), step, seconds["productive"], before.get("productive_steps", 0))
        unrecorded = unrecorded_seconds(before.get("written_at"), killed_run) if self.enabled else 0.0
        seconds["productive"] -= lost
        seconds["lost"] += lost + unrecorded
        self._before = {"runs": int(before["runs"]) + 1, "seconds": seconds,
                        "productive_steps": int(before.get("productive_steps", 0)) - steps}
        self._unsaved = _window(step)
        self.record()
        return lost + unrecorded

    @contextlib.contextmanager
    def timed(self, category: str, steps: int = 0) -> Iterator[None]:
        """Counts the block's time as ``category`` (the time since the last count as ``other``);
        ``steps``: the training steps the block runs, if it completes."""
        self._count("other")
        began = self._mark
        yield
        self._count(category)
        if steps:
            self._unsaved["last_step"] += steps
            if category == "productive":
                self._run_steps += steps
                self._unsaved["productive_steps"] += steps
                self._unsaved["productive_seconds"] += self._mark - began

    def waited_for_input(self, seconds: float) -> None:
        """Moves ``seconds`` of the productive loop just timed, the time its steps waited for input,
        to ``input``."""
        seconds = min(max(seconds, 0.0), self._run["productive"])
        self._run["productive"] -= seconds
        self._run["input"] += seconds
        self._unsaved["productive_seconds"] = max(self._unsaved["productive_seconds"] - seconds, 0.0)

    def saved(self, step: int) -> None:
        """The checkpoint of ``step`` is saved: no step up to it will be trained again."""
        self._unsaved = _window(step)

    def record(self) -> dict[str, Any]:
        """The job's record as of now (this run included), written to goodput.json on the chief."""
        self._count("other")
        seconds = {name: self._before["seconds"][name] + self._run[name] for name in CATEGORIES}
        total = sum(seconds.values())
        record = {"goodput": seconds["productive"] / total if total > 0 else 0.0, "runs": self._before["runs"],
                  "total_seconds": total, "seconds": seconds,
                  "productive_steps": self._before["productive_steps"] + self._run_steps,
                  "unsaved": dict(self._unsaved), "this_run_seconds": sum(self._run.values()),
                  "written_at": self._mark}
        if self.enabled:
            self.model_dir.replace_json(FILE, record)
        return record

    def _previous(self) -> dict[str, Any]:
        """The job's record before this run; a damaged one set aside (it only monitors the job:
        training goes on with a new record), with a warning on standard error."""
        try:
            previous = read_goodput(self.model_dir.path)
        except GoodputFileError as error:
            moved = self.model_dir.set_aside_file(FILE)
            print(f"warning: {error.path} is not a goodput record ({error.problem}); set aside as {moved}, "
                  "a new record starts with this run", file=sys.stderr, flush=True)
            return empty_record()
        return empty_record() if previous is None else previous

    def _count(self, category: str) -> None:
        now = time.time()
        self._run[category] += now - self._mark
        self._mark = now


def unrecorded_seconds(written_at: Any, killed_run: Mapping[str, Any] | None) -> float:
    """The seconds a killed run lived after the job's last record (written at ``written_at``, a
    time.time() value): from that record, or from the run's start when it began later, to the last
    heartbeat of its run lock (``killed_run``: that lock's record). 0 when a time is unknown or the
    heartbeat is older (the run died before a beat could follow the record)."""
    heartbeat, started = owner_time(killed_run, "heartbeat"), owner_time(killed_run, "started")
    recorded = owner_time({"written_at": written_at}, "written_at")
    if heartbeat is None or recorded is None or heartbeat > time.time():  # a clock set wrong: nothing to trust
        return 0.0
    return max(0.0, heartbeat - max(recorded, started if started is not None else recorded))


def empty_record() -> dict[str, Any]:
    """The record of a job that has run nothing yet."""
    return {"goodput": 0.0, "runs": 0, "total_seconds": 0.0, "seconds": dict.fromkeys(CATEGORIES, 0.0),
            "productive_steps": 0, "unsaved": None}


def _window(step: int) -> dict[str, float]:
    """The work since the checkpoint of ``step``: none yet."""
    return {"checkpoint_step": step, "last_step": step, "productive_steps": 0, "productive_seconds": 0.0}


def _replayed(unsaved: Mapping[str, float] | None, resumed_at: int, productive: float,
              productive_steps: int) -> tuple[int, float]:
    """(productive steps, seconds) of the work after the last checkpoint of a killed run (``unsaved``)
    that a run resuming at ``resumed_at`` trains again. Steps before that checkpoint (an older one
    resumed: the newer was damaged) are estimated at the job's mean productive step time."""
    if not unsaved or unsaved["last_step"] <= resumed_at:
        return 0, 0.0
    earlier = max(0, int(unsaved["checkpoint_step"]) - resumed_at)
    per_step = productive / productive_steps if productive_steps > 0 else 0.0
    steps = int(unsaved["productive_steps"]) + earlier
    return steps, min(productive, float(unsaved["productive_seconds"]) + earlier * per_step)


def read_goodput(directory: str) -> dict[str, Any] | None:
    """The job's record in the model directory ``directory`` (local or gs://), None when it has no
    goodput.json; GoodputFileError names a file that is not a record and says what is wrong."""
    path = posixpath.join(directory, FILE)
    if not exists(path):
        return None
    values = load_json(read_bytes(path), path, lambda message: GoodputFileError(path, message.removeprefix(f"{path} is ")),
                       what="JSON")  # deep nesting included: one line, as for every JSON file we read
    problems = record_problems(values)
    if problems:
        raise GoodputFileError(path, "; ".join(problems))
    return values


def record_problems(values: Any) -> list[str]:
    """What makes ``values`` (goodput.json's JSON value) not a goodput record, one phrase per field:
    a required field missing, any field of another type (bool is not a number, numbers are finite).
    Empty when it is a record. The one check of the file's structure: every reader goes through it."""
    if not isinstance(values, dict):
        return [f'expected an object {{"goodput": ..., "runs": N, "seconds": {{...}}}}, got {_shown(values)}']
    problems = [f"{name} is missing" for name in _REQUIRED if name not in values]
    problems += _field_problems(values, _FIELDS, "")
    seconds = values.get("seconds")
    if isinstance(seconds, dict):
        problems += [f"seconds.{name} is not a category (one of {', '.join(CATEGORIES)})"
                     for name in seconds if name not in CATEGORIES]
        problems += _field_problems(seconds, dict.fromkeys(CATEGORIES, _SECONDS), "seconds.")
    unsaved = values.get("unsaved")
    if isinstance(unsaved, dict):
        problems += [f"unsaved.{name} is missing" for name in _UNSAVED if name not in unsaved]
        problems += _field_problems(unsaved, _UNSAVED, "unsaved.")
    return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# field -> (the check of its value, what it should be)
_SECONDS = (_is_number, "a number of seconds")
_STEP = (_is_integer, "a step (an integer)")
_FIELDS = {
    "goodput": (_is_number, "a fraction (a number)"),
    "runs": (lambda value: _is_integer(value) and value >= 0, "a count of runs (an integer >= 0)"),
    "total_seconds": _SECONDS,
    "seconds": (lambda value: isinstance(value, dict), "an object of category -> seconds"),
    "productive_steps": (_is_integer, "a count of steps (an integer)"),
    "unsaved": (lambda value: value is None or isinstance(value, dict), "null or an object"),
    "this_run_seconds": _SECONDS,
    "written_at": (_is_number, "a time (seconds since the epoch)"),
}
_REQUIRED = ("goodput", "runs", "total_seconds", "seconds")
_UNSAVED = {"checkpoint_step": _STEP, "last_step": _STEP, "productive_steps": (_is_integer, "a count of steps"),
            "productive_seconds": _SECONDS}


def _field_problems(values: Mapping[str, Any], fields: Mapping[str, tuple[Callable[[Any], bool], str]],
                    prefix: str) -> list[str]:
    return [f"{prefix}{name} is {_shown(values[name])}, not {expected}"
            for name, (check, expected) in fields.items() if name in values and not check(values[name])]


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def describe(record: Mapping[str, Any], where: str) -> str:
    """The breakdown of a job's ``record`` as lines of text: goodput, runs, wall time, then each
    category's seconds and share of the total, largest first."""
    total = float(record["total_seconds"])
    runs = int(record["runs"])
    lines = [f"goodput of {where}: {record['goodput']:.1%} of {_clock(total)} over {runs} run{'s' * (runs != 1)}"]
    seconds = record["seconds"]
    for name in sorted(seconds, key=lambda key: (-seconds[key], key)):
        share = seconds[name] / total if total > 0 else 0.0
        lines.append(f"  {name:<11}{seconds[name]:>12.1f} s {share:>7.1%}")
    return "\n".join(lines)


def log_breakdown(record: Mapping[str, Any], where: str, log: Callable[[str], None]) -> None:
    """Logs :func:`describe`'s lines, one call each."""
    for line in describe(record, where).splitlines():
        log(line)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
