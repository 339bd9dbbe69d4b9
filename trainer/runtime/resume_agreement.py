"""The workers of one run resuming from the same step.

Every worker of a multi-worker run keeps its own checkpoints (they hold its replicas' memory), and
each writes its own at the same steps. A worker killed while it wrote one (a SIGKILL, a lost VM) is
left a checkpoint behind the others. Resumed from their own newest checkpoints, the workers would
start from different steps: they would read other batches than an uninterrupted run, their
all-reduces would mix gradients of different steps, and the first to reach ``train_steps`` would
leave the others waiting in their collectives. So before restoring, the workers agree (one
all-gather) on the newest step they all have, and each restores its checkpoint of that step; a
worker's newer ones leave its checkpoint list and are written again by the resumed run. After the
restore, a second all-gather checks that every worker restored that step (a damaged checkpoint can
make one fall back further); if not, the run stops with exit status 3 naming the steps.
"""
from __future__ import annotations

import posixpath
import re
from typing import Callable

import tensorflow as tf

from tfrecords.errors import DataError
from trainer.runtime import checkpoint_history

_STEP = re.compile(r"^ckpt-(\d+)$")


class WorkersDisagreeError(DataError):
    """The workers of a run restored checkpoints of different steps (exit status 3)."""


def checkpoint_step(prefix: str) -> int:
    """The step of checkpoint ``prefix`` (``.../ckpt-N``), as the controller's CheckpointManager names them."""
    match = _STEP.match(posixpath.basename(prefix))
    if not match:
        raise ValueError(f"{prefix} is not a checkpoint the controller wrote (ckpt-STEP)")
    return int(match.group(1))


def workers_steps(strategy: tf.distribute.Strategy, step: int) -> list[int]:
    """Every replica's ``step`` (each worker's, repeated for its replicas), by one all-gather."""
    gather = tf.function(lambda value: strategy.gather(strategy.run(lambda: tf.identity(value)), axis=0))
    return [int(each) for each in gather(tf.constant([step], tf.int64)).numpy()]


def agreed_history(history: checkpoint_history.History, strategy: tf.distribute.Strategy, num_workers: int,
                   warn: Callable[[str], None]) -> checkpoint_history.History:
    """``history`` (one worker's checkpoints) cut to the newest step every worker has a checkpoint of,
    with its state file rewritten when cut; ``history`` itself with one worker."""
    if num_workers == 1:
        return history
    latest = checkpoint_step(history.latest) if history.latest else 0
    agreed = min(workers_steps(strategy, latest))
    if agreed == latest:
        return history
    warn(f"warning: another worker's newest checkpoint is of step {agreed} (killed while writing a later one?): "
         f"resuming from it; {history.latest} and any newer checkpoint of this worker are written again")
    return history_up_to(history, agreed)


def history_up_to(history: checkpoint_history.History, step: int) -> checkpoint_history.History:
    """``history`` without its checkpoints after ``step``, written as the directory's state file. Their
    files stay until the resumed run writes them again: checkpoint_history.read_history leaves
    checkpoints newer than the listed latest out."""
    cut = checkpoint_history.History(history.directory,
                                     tuple(prefix for prefix in history.prefixes if checkpoint_step(prefix) <= step))
    checkpoint_history.write_history(cut)
    return cut


def check_same_step(strategy: tf.distribute.Strategy, num_workers: int, step: int, checkpoints: str) -> None:
    """Raises WorkersDisagreeError unless every worker restored ``step`` (nothing with one worker)."""
    if num_workers == 1:
        return
    steps = workers_steps(strategy, step)
    if len(set(steps)) > 1:
        raise WorkersDisagreeError(
            f"the workers restored checkpoints of different steps ({', '.join(map(str, steps))} by replica; this "
            f"worker's are under {checkpoints}): a damaged checkpoint left one without the step the others have. "
            "Remove the newer checkpoints (the ckpt-N.* files and their entry in checkpoints/checkpoint) from the "
            "workers that have them, so that every worker's newest is the same step, and start the run again")
