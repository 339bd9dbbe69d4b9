"""A run's data directories as both engines account for them: a mixture's reader, the records each
directory gave (the step log's ``records_by_source`` and ``epoch_by_source``), its share of them
(TensorBoard's ``mixture_share/LABEL``) and the evaluation of each directory's valid split.

None of it depends on the backend: the TensorFlow task (trainer/tasks/pretraining.py) and the JAX engine
(trainer/runtime/jax_engine.py) hand it their readers' class and their evaluation of one split, and it
does the rest, from the mixture's schedule (tfrecords/mixture_schedule.py), without TensorFlow.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, Sequence, TypeVar

from tfrecords.manifest import Manifest
from tfrecords.mixture_schedule import MixtureLayout, MixtureSource, by_name, records_read, shares, source_labels
from trainer.configs.training import TrainConfig

Reader = TypeVar("Reader", bound=MixtureLayout)
FIGURES = ("loss", "accuracy", "perplexity")


def perplexity(loss: float) -> float:
    """exp(loss), capped where the exponential would overflow."""
    return float(math.exp(min(loss, 50.0)))


class MixtureProgress:
    """The training directories of ``mixture`` (empty: one directory, the run's) and the ones only
    evaluated on (``eval_sources``, ``--eval-data``) of a run with ``config`` and ``bi_data``."""

    def __init__(self, config: TrainConfig, bi_data: bool, mixture: Sequence[MixtureSource] = (),
                 eval_sources: Sequence[MixtureSource] = ()):
        self.config, self.bi_data = config, bi_data
        self.mixture, self.eval_sources = tuple(mixture), tuple(eval_sources)
        names = [source.name for source in self.mixture + self.eval_sources]
        self.labels = dict(zip(names, source_labels(names)))  # TensorBoard tags and evaluation keys
        # The rows' schedule, read without reading a record: what the step log counts
        self._schedule = self.reader(MixtureLayout).schedule() if self.mixture else None

    def reader(self, kind: type[Reader], start_step: int = 0) -> Reader:
        """The mixture's reader of class ``kind`` (tfrecords.mixture.MixtureReader, or
        tfrecords.numpy_reader.NumpyMixtureReader without TensorFlow: the same arguments) from optimizer
        step ``start_step`` on."""
        config = self.config
        return kind(self.mixture, config.train_batch_size, config.seq_len, self.bi_data, seed=config.seed,
                    accumulation_steps=config.accumulation_steps, start_step=start_step,
                    resample_masks=config.resample_masks)

    def step_details(self, step: int) -> dict[str, Any]:
        """What a mixture adds to the step log's row of optimizer step ``step``: the records each
        directory gave so far (cumulative, keyed as the command line named it) and its epoch."""
        if self._schedule is None:
            return {}
        records, epochs = self._records_read(step)
        return {"records_by_source": by_name(self.mixture, records), "epoch_by_source": by_name(self.mixture, epochs)}

    @functools.lru_cache(maxsize=1)  # the step log and TensorBoard ask for the loop's last step in turn
    def _records_read(self, step: int) -> tuple[list[int], list[int]]:
        return records_read(self._schedule, step, self.config.accumulation_steps, self.bi_data)

    def step_summaries(self, step: int) -> dict[str, float]:
        """TensorBoard scalars of a mixture at ``step``: each directory's share of the records so far."""
        if self._schedule is None:
            return {}
        records, _ = self._records_read(step)
        return {f"mixture_share/{self.labels[source.name]}": share
                for source, share in zip(self.mixture, shares(records))}

    def evaluate(self, evaluate_split: Callable[[Manifest], Mapping[str, float]], manifest: Manifest
                 ) -> dict[str, float]:
        """Loss, accuracy and perplexity of the run, by ``evaluate_split`` (an engine's evaluation of one
        directory's valid split, as a run on it alone would; ``manifest``: the run's directory).

        With a mixture or ``--eval-data``, each directory's figures are labelled ("loss/LABEL",
        "accuracy/LABEL", "perplexity/LABEL"), and the unlabelled ones are the training directories'
        mixed by their weights (with only ``--eval-data``: the run's own directory's)."""
        if not self.mixture and not self.eval_sources:
            return dict(evaluate_split(manifest))
        results = {}
        for source in self.mixture + self.eval_sources:
            figures = evaluate_split(source.manifest)
            results.update({f"{name}/{self.labels[source.name]}": value for name, value in figures.items()})
        if self.mixture:
            mixed = {name: sum(source.weight * results[f"{name}/{self.labels[source.name]}"] for source in self.mixture)
                     for name in ("loss", "accuracy")}
        else:
            mixed = dict(evaluate_split(manifest))
        mixed["perplexity"] = perplexity(mixed["loss"])
        return {**{name: mixed[name] for name in FIGURES}, **results}
