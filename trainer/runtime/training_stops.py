"""Why a training run stops before its last step, as errors the commands map to exit status 3.

Written without TensorFlow or JAX: both engines' loops raise them (trainer/runtime/controller.py on
TensorFlow, the JAX engine's checkpoints in trainer/runtime/orbax_checkpoints.py), and the command
line maps them once (xlnet_cli.py, through tfrecords/errors.py's DataError).
"""
from __future__ import annotations

from tfrecords.errors import DataError


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
