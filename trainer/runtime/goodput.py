"""Goodput: where a job's wall time goes, kept across its runs in ``MODEL_DIR/goodput.json``.

A job is every run on one model directory: the first, and each resume after a preemption or a
kill. Each second of a run, from the command's start (trainer/runtime/run_clock.py) to the end of
its training loop, falls in exactly one category:

* ``startup``: the command's start to the first step (importing TensorFlow, checking the data,
  building the model, restoring the checkpoint, opening the input);
* ``compile``: the first loop of steps of each run, one step that traces and compiles the
  tf.function (the step's own work is in it too: it cannot be told apart);
* ``productive``: every other loop of training steps;
* ``evaluation``, ``checkpoint``: evaluations and checkpoint saves (an asynchronous save counts
  the time the loop waits for it);
* ``lost``: productive time a killed run spent on steps after its last checkpoint, which the next
  run trains again; moved out of ``productive`` when that run resumes (the killed run's own
  measurement of those steps, plus an estimate at the job's mean step time for steps before that
  checkpoint when an older one resumes);
* ``other``: the loop's bookkeeping between those (the step log, TensorBoard, progress lines,
  this file, the profiler's start and stop).

``goodput`` is productive over total seconds. The file is rewritten after every loop of steps
(on a local disk through a temporary file and a rename, an object store publishing it whole), so
a run killed with SIGKILL keeps all but its last, unfinished loop. Only the chief writes it.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Mapping

from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.storage import StorageError, read_json

CATEGORIES = ("productive", "startup", "compile", "evaluation", "checkpoint", "lost", "other")


class GoodputRecorder:
    """One run's share of its job's goodput, added to ``goodput.json`` as the run goes.

    Args:
      model_dir: the run's model directory.
      started: when the run's command started (a time.time() value): its start-up counts from there.
      enabled: False off the chief: nothing is read or written.
    """

    def __init__(self, model_dir: ModelDirectory, started: float, enabled: bool = True):
        self.model_dir, self.enabled = model_dir, enabled
        self._mark = started  # every second before this is counted
        self._run = dict.fromkeys(CATEGORIES, 0.0)  # this run's seconds
        self._run_steps = 0  # this run's productive steps
        self._before: dict[str, Any] = empty_record()  # the job's record before this run
        self._unsaved = _window(0)

    def begin(self, step: int) -> float:
        """Ends the run's start-up; the run resumed at ``step``. Counts the run and moves the
        productive time of the steps it trains again (a killed run's work after its last checkpoint)
        to ``lost``; returns those seconds."""
        self._count("startup")
        previous = read_goodput(self.model_dir) if self.enabled else None
        before = empty_record() if previous is None else previous
        seconds = {name: float(before["seconds"].get(name, 0.0)) for name in CATEGORIES}
        steps, lost = _replayed(before.get("unsaved"), step, seconds["productive"], before.get("productive_steps", 0))
        seconds["productive"] -= lost
        seconds["lost"] += lost
        self._before = {"runs": int(before["runs"]) + 1, "seconds": seconds,
                        "productive_steps": int(before.get("productive_steps", 0)) - steps}
        self._unsaved = _window(step)
        self.record()
        return lost

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
                  "unsaved": dict(self._unsaved), "this_run_seconds": sum(self._run.values())}
        if self.enabled:
            self.model_dir.replace_json(ModelDirectory.GOODPUT, record)
        return record

    def _count(self, category: str) -> None:
        now = time.time()
        self._run[category] += now - self._mark
        self._mark = now


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


def read_goodput(model_dir: ModelDirectory) -> dict[str, Any] | None:
    """The job's record in ``model_dir``'s goodput.json, None when it has none; a StorageError
    naming a file that is not a record."""
    if not model_dir.has(ModelDirectory.GOODPUT):
        return None
    record = read_json(model_dir.join(ModelDirectory.GOODPUT))
    if not isinstance(record, dict) or not isinstance(record.get("seconds"), dict) or "runs" not in record:
        raise StorageError(f"{model_dir.join(ModelDirectory.GOODPUT)} is not a goodput record (expected "
                           '{"goodput": ..., "runs": N, "seconds": {...}})')
    return record


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
