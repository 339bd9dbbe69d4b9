"""The Task protocol: what the controller (trainer/runtime/controller.py) asks of an objective.

As the Model Garden's ``official/core/base_task.Task``, a task says what to build, what to compute
on a batch, what to save and how to evaluate; the controller owns everything objectives share (the
strategy, the optimizer, the loop of steps, checkpoints, preemption, summaries, the step log).
Three tasks implement it, each subclassing :class:`Task`:

* trainer/tasks/pretraining.py ``PretrainingTask``: permutation language modelling on the
  stream-ordered records, with the Transformer-XL memory as its state;
* trainer/tasks/sequence.py ``SequenceTask``: classification, regression, multiple choice;
* trainer/tasks/squad.py ``SquadTask``: extractive question answering;

the two fine-tuning tasks on the base they share, trainer/tasks/head_task.py ``HeadTask``.

Every hook below is either required (its default raises NotImplementedError) or optional, with a
documented default that the controller relies on; the controller calls each hook directly.

Shapes: a training batch, as ``train_dataset`` yields it per replica, has a leading
``accumulation_steps`` axis; the controller slices it into micro-batches, and ``compute`` sees one
micro-batch at a time.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol

import keras
import tensorflow as tf

from tfrecords.tensorflow_errors import error_text


@dataclasses.dataclass(frozen=True)
class StepOutputs:
    """What a task computes on one micro-batch of one replica (:meth:`Task.compute`).

    ``loss_sum`` is the loss summed over the micro-batch's units (targets, examples) and
    ``count`` their number, both float32 scalars; ``metric_sums`` maps each of the task's
    ``metric_names`` to its sum over those units; ``state`` is carried to the next micro-step.
    The controller divides the sums, all-reduced over replicas and micro-steps, by the count.
    """

    loss_sum: tf.Tensor
    count: tf.Tensor
    metric_sums: Mapping[str, tf.Tensor]
    state: Any = None


class Task(Protocol):
    """What the controller asks of an objective; a task subclasses it (see the module's docstring).

    Attributes (set by ``__init__`` or, for the models, by ``build``):
      network: the XLNet encoder (trainer/models/network.py); ``--init-checkpoint`` restores its
        weights, and checkpoints hold it as ``model`` so every reader finds it there.
      model: the trained model (the pretrainer's network, or the network with its head); its Keras
        seed-generator variables (dropout's RNG state) are checkpointed by the controller.
      metric_names: step-log name -> TensorBoard tag of each per-step training metric that
        ``compute`` sums (e.g. ``{"accuracy": "plm_accuracy"}``); empty for none.
      tokens_per_example: the tokens one example feeds the network (sequence length, times the
        options of a multiple-choice example), for the tokens/s of the console and TensorBoard.
    """

    network: keras.Model
    model: keras.Model
    metric_names: Mapping[str, str]
    tokens_per_example: int

    # ------------------------------------------------------------------------------ required
    def build(self, strategy: tf.distribute.Strategy) -> None:
        """Builds the models and any state variables; called once, under ``strategy.scope()``,
        after the controller has set the precision policy and the random seed.

        Args:
          strategy: the run's tf.distribute strategy (for per-replica state, such as the memory).
        """
        raise NotImplementedError

    def trainable_variables(self) -> list[tf.Variable]:
        """The variables the optimizer updates, in a fixed order (called once, after ``build``).

        Returns:
          The variables; gradients of every one must exist (no None gradient).
        """
        raise NotImplementedError

    def learning_rate_multipliers(self) -> Mapping[int, float] | None:
        """Per-variable learning-rate factors, such as layer-wise decay.

        Returns:
          ``trainer.runtime.optimization.variable_key(variable)`` -> factor of the trained
          variables that get one (the rest: 1), or None for one learning rate for all.
        """
        raise NotImplementedError

    def checkpoint_items(self, first_replica: int) -> dict[str, Any]:
        """What checkpoints hold besides the optimizer, the step and the dropout RNG state.

        Args:
          first_replica: the global index of this worker's first replica (per-replica state is
            saved under global replica indices, so each worker restores its own).

        Returns:
          Checkpoint name -> trackable; ``"model"`` must be the network.
        """
        raise NotImplementedError

    def train_dataset(self, strategy: tf.distribute.Strategy, start_step: int) -> tf.distribute.DistributedDataset:
        """The training input from optimizer step ``start_step`` on, distributed.

        Args:
          strategy: the run's strategy.
          start_step: the step the run starts or resumes at; a resumed run must read what an
            uninterrupted one would have read from that step.

        Returns:
          Per replica, one batch per optimizer step with a leading ``accumulation_steps`` axis
          (micro-batches), in the structure ``compute`` takes.
        """
        raise NotImplementedError

    def read_state(self) -> Any:
        """The state the first micro-step of a step starts from, on this replica (replica context,
        inside the traced step): e.g. the Transformer-XL memory. None for a stateless task."""
        raise NotImplementedError

    def write_state(self, state: Any) -> None:
        """Keeps the state the last micro-step of a step left (replica context, traced), for the
        next step's ``read_state``.

        Args:
          state: ``StepOutputs.state`` of the step's last micro-step.
        """
        raise NotImplementedError

    def compute(self, batch: Any, state: Any, training: bool) -> StepOutputs:
        """The loss and metric sums of one micro-batch on one replica (traced, replica context).

        Traced without AutoGraph (the controller's micro-steps): it may branch on Python values
        only; a choice that depends on a tensor is written as ``tf.cond`` / ``keras.ops.cond``, as
        it would have to be on JAX.

        Args:
          batch: one micro-batch of ``train_dataset`` (its leading axis sliced off).
          state: what the previous micro-step left (``read_state`` for the first).
          training: True in training (dropout on); False when a task evaluates with it.

        Returns:
          The micro-batch's :class:`StepOutputs`; the controller differentiates ``loss_sum``.
        """
        raise NotImplementedError

    def evaluate(self, controller: Any) -> dict[str, float]:
        """The task's evaluation metrics at the current weights (eagerly, between loops of steps).

        Args:
          controller: the running trainer.runtime.controller.Controller (its ``strategy``
            distributes the evaluation; not imported here, which would close an import cycle).

        Returns:
          Metric name -> value; logged, written to TensorBoard's eval writer and returned by
          ``Controller.train`` as ``eval_metrics``.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------------------ optional
    def step_details(self, step: int) -> dict[str, Any]:
        """Extra fields of the step log's row of optimizer step ``step`` (after the loss, the
        metrics, grad_norm and peak_memory_bytes).

        Args:
          step: the optimizer step (1-based) the row is for.

        Returns:
          JSON-ready field -> value; by default none (``{}``). The pretraining task adds the
          records each directory of a mixture gave.
        """
        return {}

    def step_summaries(self, step: int) -> dict[str, float]:
        """Extra TensorBoard scalars of the train writer at the end of a loop of steps.

        Args:
          step: the optimizer step the loop ended at.

        Returns:
          Tag -> value; by default none (``{}``). The pretraining task adds a mixture's shares.
        """
        return {}

    def describe_input_error(self, error: Exception) -> str:
        """Where the training input is damaged, when reading it failed (the run then stops with
        ``TrainingDataError``, exit status 3).

        Args:
          error: the ``tf.errors.DataLossError`` or ``NotFoundError`` the input raised.

        Returns:
          One sentence for the user; by default TensorFlow's error in one line
          (tfrecords/tensorflow_errors.py). The pretraining task reads its shards through to
          name the damaged file and its first bad record.
        """
        return error_text(error)
