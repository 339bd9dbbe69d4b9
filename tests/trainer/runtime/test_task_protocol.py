"""The Task protocol (trainer/runtime/task_protocol.py): every task subclasses it, the optional hooks
have their documented defaults, and a required hook left out fails by name."""
from __future__ import annotations

import pytest
import tensorflow as tf

from trainer.runtime.task_protocol import Task
from trainer.tasks.head_task import HeadTask
from trainer.tasks.pretraining import PretrainingTask
from trainer.tasks.sequence import SequenceTask
from trainer.tasks.squad import SquadTask

REQUIRED = ("build", "trainable_variables", "learning_rate_multipliers", "checkpoint_items", "train_dataset",
            "read_state", "write_state", "compute", "evaluate")


class Partial(Task):
    """A task that implements nothing: the defaults only."""


def test_every_task_is_a_task_and_implements_every_required_hook():
    assert HeadTask in SequenceTask.__mro__ and HeadTask in SquadTask.__mro__
    for task in (PretrainingTask, SequenceTask, SquadTask):
        assert Task in task.__mro__  # subclassed, so the defaults of the optional hooks are inherited
        assert [hook for hook in REQUIRED if getattr(task, hook) is getattr(Task, hook)] == [], task


def test_the_optional_hooks_default_to_nothing_added_and_tensorflow_s_error():
    task = Partial()
    assert task.step_details(3) == {} and task.step_summaries(3) == {}
    error = tf.errors.NotFoundError(None, None, "train-00000.tfrecord; No such file [Op:IteratorGetNext]")
    assert task.describe_input_error(error) == "NotFoundError: train-00000.tfrecord; No such file"


def test_a_required_hook_left_out_raises():
    with pytest.raises(NotImplementedError):
        Partial().trainable_variables()
