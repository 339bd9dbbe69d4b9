"""Why a training run stops before its last step, as errors the commands map to exit status 3.

Written without TensorFlow or JAX: both engines' loops raise them (trainer/runtime/controller.py on
TensorFlow, the JAX engine's checkpoints in trainer/runtime/orbax_checkpoints.py), and the command
line maps them once (xlnet_cli.py, through tfrecords/errors.py's DataError).
"""
from __future__ import annotations

import re

from tfrecords.errors import DataError

# What the collectives of either engine say when a peer is gone: TensorFlow's coordination service
# ("unhealthy (stopped sending heartbeats)") and gRPC channels, Gloo's TCP pairs (JAX on CPUs:
# "Connection reset by peer"), NCCL's "remote process exited".
PEER_GONE = re.compile(r"unhealthy|stopped sending heartbeats|connection reset|connection closed|socket closed|"
                       r"connection refused|failed to connect|connect failed|broken pipe|end of file|"
                       r"remote process exited", re.IGNORECASE)


class TrainingStopped(DataError):
    """A run that cannot go on because of its data or its state (the commands exit with status 3);
    the checkpoints saved so far are kept."""


class TrainingDivergedError(TrainingStopped):
    """The loss became NaN or Inf; training stopped without saving over the last good checkpoint."""


class UnreadableCheckpointError(TrainingStopped):
    """No checkpoint of the model directory can be read (each was set aside to checkpoints/damaged/)."""


class TrainingDataError(TrainingStopped):
    """The training input could not be read (a damaged or vanished file)."""


class WorkerLostError(TrainingStopped):
    """A worker of a multi-worker run is gone (killed, its machine or network down): the others
    cannot go on without it, and a restart of all of them resumes from the last checkpoint."""


class CheckpointSaveError(TrainingStopped):
    """A checkpoint could not be written (a full disk); its temporary files are removed and the run
    resumes from the checkpoint before it."""


def checkpoint_save_stopped(checkpoint: str, said: str, removed: list[str], free_under: str,
                            kept: str | None) -> CheckpointSaveError:
    """What a full disk during the write of ``checkpoint`` tells, on either engine: what the storage
    said (``said``, one line), the partial files ``removed`` (names), where to free space and the
    checkpoint (``kept``, or none) the same command resumes from."""
    return CheckpointSaveError(
        f"cannot save checkpoint {checkpoint}: no space left on the device ({said}); "
        + (f"its partial files were removed ({', '.join(removed)}). " if removed else "")
        + f"Free space under {free_under} and run the same command again: the run resumes from "
        + (kept if kept else "its start, no checkpoint having been saved"))


def peer_lost_stopped(who: str, count: int, members: str, me: str, latest: str | None) -> WorkerLostError:
    """What a run that lost one of its parts tells, on either engine: ``who`` is gone ("worker 0
    (10.0.0.2:2222)", "process 1") of the ``count`` ``members`` ("workers in TF_CONFIG", "processes of
    this run"), ``me`` cannot go on ("this worker (1)"); every one must be restarted, and from which
    checkpoint (``latest``, or none) they resume."""
    resume = (f"they resume from the last checkpoint all of them saved ({latest} here)" if latest else
              "no checkpoint was saved yet, so they start again at step 1")
    return WorkerLostError(
        f"{who} of the {count} {members} stopped answering (killed, or its machine or network went down) and "
        f"{me} cannot train without it. Restart ALL {members.split()[0]} with the same command: {resume}")
