"""The model directory: its file names and every read and write of it (trainer/runtime/file_system.py:
tf.io.gfile where TensorFlow runs, Python or etils.epath where it does not).

Written by `xlnet train` and `xlnet import-checkpoint`; read by `xlnet train --init-checkpoint`,
by a resumed run and by `xlnet export`. Layout::

    MODEL_DIR/model_config.json        the architecture (trainer/models/config.py ModelConfig)
              train_config.json        how it was trained (trainer/configs/training.py), `xlnet train` only
              spiece.model             the SentencePiece vocabulary
              special_ids.json         XLNet's special ids in that vocabulary
              text_normalization.json  {"uncased": bool}: how the training text was normalised
                                       (from the data's manifest; an imported release does not say)
              checkpoints/             tf.train.CheckpointManager checkpoints, listed in checkpoints/checkpoint
                                       (trainer/runtime/checkpoint_history.py; damaged/: ones that could
                                       not be read on a resume, set aside)
              tensorboard/{train,eval} summaries (read back and rewritten by trainer/runtime/event_files.py)
              train_steps.jsonl        one JSON line per optimizer step: step, loss, accuracy, grad_norm
              run.lock                 the run writing the directory (trainer/runtime/run_lock.py)
              run.heartbeat            that run's last heartbeat, left by a killed run for the next run's goodput
              goodput.json             where the job's wall time went, over its runs (trainer/runtime/goodput.py)
              damaged/                 a goodput.json that was not a record, set aside by the next run
              train_config.step-N.json the settings a resume at step N replaced (finetune_config too)
              finetune_config.json     how it was fine-tuned (trainer/configs/finetuning.py), `xlnet finetune` only
              labels.json              the classification labels, index = class id (`xlnet finetune`)
              eval_results.json        the fine-tuned model's metrics on the eval file
              predictions.jsonl        one JSON line per --test example
              predictions.json         squad: the eval answers in the official format (null_odds.json: 2.0)
              workers/worker-N/        multi-worker runs: worker N's own checkpoints and step log

Every path is a plain string joined with posixpath, never a pathlib.Path: ``gs://bucket/m``
must stay ``gs://bucket/m`` so that TensorFlow's filesystems (local, gs://, ...) resolve it.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import posixpath
from typing import Any, Iterable, Mapping

from tfrecords.errors import DataError
from trainer.models.config import ModelConfig
from trainer.models.head_spec import HeadSpec
from trainer.runtime import checkpoint_history, event_files, file_system, goodput
from trainer.runtime.storage import StorageError, read_bytes, read_json, write_bytes, write_json
from trainer.runtime.throughput import CLOCK_FIELDS

# Step-log fields the machine measures rather than the computation defines: the clock's (throughput, MFU)
# and the allocator's peak, which moves by an allocation's rounding with, say, the length of the model
# directory's path (two deterministic runs in one process, one in "clean-model" and one in
# "faulty-model": 31,434,240 and 31,434,496 bytes).
MEASURED_FIELDS = CLOCK_FIELDS | {"peak_memory_bytes", "input_wait_seconds"}


class ModelDirectoryError(StorageError):
    """A model directory that cannot be used as asked; the message names the directory or file."""


class LabelsFileError(DataError):
    """A model directory's labels.json that cannot name a classification head's classes (exit status 3:
    the directory's state, not the command line, is wrong)."""


def check_labels(path: str, values: Any) -> tuple[str, ...]:
    """``values`` read from labels.json at ``path``, checked to be at least 2 distinct label names
    (a classification head's classes, index = class id); else a LabelsFileError saying what to do."""
    what = "what `xlnet finetune` wrote there: the classes of the head its checkpoints hold, index = class id"
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise LabelsFileError(f"{path} holds {json.dumps(values)[:80]}, not a list of label names; put back {what}")
    if len(values) < 2:
        raise LabelsFileError(f"{path} holds {len(values)} label{'' if len(values) == 1 else 's'} "
                              f"{json.dumps(values)}; a classification model has at least 2; put back {what}")
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise LabelsFileError(f"{path} names {', '.join(map(repr, repeated))} more than once; put back {what}")
    return tuple(values)


class ModelDirectory:
    """One model directory (local or gs://). Reads are cached: a directory is read once."""

    MODEL_CONFIG = "model_config.json"
    TRAIN_CONFIG = "train_config.json"
    VOCAB = "spiece.model"
    SPECIAL_IDS = "special_ids.json"
    TEXT_NORMALIZATION = "text_normalization.json"
    CHECKPOINTS = "checkpoints"
    TENSORBOARD = "tensorboard"
    STEP_LOG = "train_steps.jsonl"
    FINETUNE_CONFIG = "finetune_config.json"
    LABELS = "labels.json"
    EVAL_RESULTS = "eval_results.json"
    PREDICTIONS = "predictions.jsonl"
    SQUAD_PREDICTIONS = "predictions.json"  # squad: the official format, question id -> answer
    NULL_ODDS = "null_odds.json"  # squad 2.0: question id -> no-answer score
    SQUAD_TEST_PREDICTIONS = "test_predictions.json"  # squad --test: as predictions.json
    DAMAGED_CHECKPOINTS = "damaged"  # under checkpoints/: checkpoints that could not be read, set aside
    TEST_NULL_ODDS = "test_null_odds.json"  # squad --test, a model trained on SQuAD 2.0
    GOODPUT = goodput.FILE  # where the job's wall time went, over all its runs (trainer/runtime/goodput.py)
    # What `xlnet export` and --init-checkpoint need besides a checkpoint.
    REQUIRED = (MODEL_CONFIG, VOCAB, SPECIAL_IDS)

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path).rstrip("/") or "/"

    def __repr__(self) -> str:
        return f"ModelDirectory({self.path!r})"

    def join(self, *names: str) -> str:
        """The path of ``names`` inside the directory."""
        return posixpath.join(self.path, *names)

    @property
    def checkpoints(self) -> str:
        return self.join(self.CHECKPOINTS)

    @property
    def damaged_checkpoints(self) -> str:
        """checkpoints/damaged/: where either engine sets aside a checkpoint that cannot be read."""
        return checkpoint_history.damaged_directory(self.checkpoints)

    @property
    def step_log(self) -> str:
        return self.join(self.STEP_LOG)

    def tensorboard(self, name: str) -> str:
        """The summary directory of one writer ("train" or "eval")."""
        return self.join(self.TENSORBOARD, name)

    def worker(self, index: int) -> "ModelDirectory":
        """Worker ``index``'s own directory in a multi-worker run (its replicas' memory differs)."""
        return ModelDirectory(self.join("workers", f"worker-{index}"))

    # ------------------------------------------------------------------------ checks
    def exists(self) -> bool:
        return file_system.isdir(self.path)

    def has(self, name: str) -> bool:
        return file_system.exists(self.join(name))

    def require(self, flag: str, names: Iterable[str] = REQUIRED) -> None:
        """Raises ModelDirectoryError naming ``flag`` and every missing file of ``names`` (or a file
        given for the directory)."""
        if not self.exists():
            if file_system.exists(self.path):
                raise ModelDirectoryError(f"{flag} {self.path!r} is a file, not a model directory (give the directory "
                                          "`xlnet train` or `xlnet import-checkpoint` wrote)")
            raise ModelDirectoryError(f"{flag} {self.path!r} does not exist")
        missing = [name for name in names if not self.has(name)]
        if missing:
            raise ModelDirectoryError(f"{flag} {self.path!r} lacks {', '.join(missing)} (a model directory is "
                                      "written by `xlnet train` or `xlnet import-checkpoint`)")

    def check_same_model(self, model_config: ModelConfig) -> None:
        """Raises ModelDirectoryError (a UsageError: exit status 2) naming the fields in which an
        existing directory's model differs from ``model_config``: resuming with another architecture
        would restore mismatched weights."""
        if not self.has(self.MODEL_CONFIG) or self.model_config == model_config:
            return
        existing = self.model_config.to_dict()
        changed = sorted(k for k, v in model_config.to_dict().items() if existing.get(k) != v)
        raise ModelDirectoryError(f"--model-dir {self.path} holds a model with different {', '.join(changed)}; "
                                  "use a new --model-dir or the same model settings to resume")

    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint prefix under checkpoints/, or None: the one checkpoints/checkpoint
        names, or with that file missing or damaged the highest ckpt-N present. A name there outside
        checkpoints/ is a CheckpointNameError (exit status 3)."""
        return self.checkpoint_history().latest

    def newest_checkpoint(self) -> str | None:
        """What a reader of this directory starts from: the TensorFlow engine's latest checkpoint
        prefix (``latest_checkpoint``), else the JAX engine's newest Orbax step (``checkpoints/<step>``);
        None when there is neither. The one place that decides it, for both engines' readers."""
        latest = self.latest_checkpoint()
        if latest is not None:
            return latest
        steps = self.orbax_steps()
        return posixpath.join(self.checkpoints, str(steps[-1])) if steps else None

    def orbax_steps(self) -> list[int]:
        """The steps of the JAX engine's Orbax checkpoints under checkpoints/ (``<step>/`` directories), oldest first."""
        if not file_system.isdir(self.checkpoints):
            return []
        return sorted(int(name.rstrip("/")) for name in file_system.listdir(self.checkpoints)
                      if name.rstrip("/").isdigit())

    def set_aside_checkpoints(self) -> list[str]:
        """What checkpoints/damaged/ holds (names): the checkpoints of either engine set aside because
        they could not be read."""
        damaged = self.damaged_checkpoints
        return sorted(name.rstrip("/") for name in file_system.listdir(damaged)) if file_system.isdir(damaged) else []

    def has_tensorflow_checkpoints(self) -> bool:
        """Whether checkpoints/ holds the TensorFlow engine's checkpoints (``ckpt-N.index``)."""
        return bool(checkpoint_history.on_disk(self.checkpoints))

    def checkpoint_history(self) -> checkpoint_history.History:
        """The checkpoints under checkpoints/, oldest first (trainer/runtime/checkpoint_history.py)."""
        return checkpoint_history.read_history(self.checkpoints)

    # ------------------------------------------------------------------------- reads
    @functools.cached_property
    def model_config(self) -> ModelConfig:
        values = read_json(self.join(self.MODEL_CONFIG))  # a StorageError names the file itself
        try:
            return ModelConfig.from_dict(values)
        except (ValueError, TypeError) as error:
            raise ModelDirectoryError(f"{self.join(self.MODEL_CONFIG)}: {error}") from None

    @functools.cached_property
    def special_ids(self) -> dict[str, int]:
        values = read_json(self.join(self.SPECIAL_IDS))
        if not isinstance(values, dict):
            raise ModelDirectoryError(f"{self.join(self.SPECIAL_IDS)}: expected an object of name -> id")
        return {name: int(value) for name, value in values.items()}

    @functools.cached_property
    def sp_model_proto(self) -> bytes:
        return read_bytes(self.join(self.VOCAB))

    @functools.cached_property
    def uncased(self) -> bool | None:
        """The casing recorded in text_normalization.json, or None when the directory has none."""
        path = self.join(self.TEXT_NORMALIZATION)
        if not self.has(self.TEXT_NORMALIZATION):
            return None
        value = read_json(path)
        value = value.get("uncased") if isinstance(value, dict) else None
        if not isinstance(value, bool):
            raise ModelDirectoryError(f"{path}: expected {{\"uncased\": true|false}}")
        return value

    @functools.cached_property
    def finetune_config(self):
        """The FinetuneConfig of a fine-tuned model, or None for a pretrained one."""
        from trainer.configs.finetuning import FinetuneConfig

        if not self.has(self.FINETUNE_CONFIG):
            return None
        values = read_json(self.join(self.FINETUNE_CONFIG))  # a StorageError names the file itself
        try:
            return FinetuneConfig.from_dict(values)
        except (ValueError, TypeError) as error:
            raise ModelDirectoryError(f"{self.join(self.FINETUNE_CONFIG)}: {error}") from None

    @functools.cached_property
    def head_spec(self) -> HeadSpec | None:
        """The fine-tuning head this directory's checkpoints hold (finetune_config.json, and labels.json
        for classification), or None for a pretrained model."""
        config = self.finetune_config
        if config is None:
            return None
        if config.task == "squad":
            return HeadSpec("squad", start_n_top=config.start_n_top, end_n_top=config.end_n_top)
        if config.task == "classification" and self.labels is None:
            raise ModelDirectoryError(f"{self.path!r} is a classification model without {self.LABELS} (the file "
                                      "that names its classes, index = class id)")
        return HeadSpec(config.task, self.labels if config.task == "classification" else ())

    @functools.cached_property
    def labels(self) -> tuple[str, ...] | None:
        """The classification labels (index = class id), or None when the directory has none."""
        if not self.has(self.LABELS):
            return None
        return check_labels(self.join(self.LABELS), read_json(self.join(self.LABELS)))

    def step_rows(self) -> list[dict[str, Any]]:
        """The rows of train_steps.jsonl (step, loss, metrics, grad_norm), in the order written."""
        if not self.has(self.STEP_LOG):
            return []
        with file_system.open_file(self.step_log, "r") as handle:
            return [json.loads(line) for line in handle.read().splitlines() if line.strip()]

    def reproducible_step_rows(self) -> list[dict[str, Any]]:
        """The rows of train_steps.jsonl without the fields the machine measures (``MEASURED_FIELDS``):
        what two runs with the same data, configuration, seed and ``deterministic=true`` write identically."""
        return [{name: value for name, value in row.items() if name not in MEASURED_FIELDS}
                for row in self.step_rows()]

    def step_losses(self) -> dict[int, float]:
        """step -> loss from train_steps.jsonl (a step logged twice keeps its last value)."""
        return {int(row["step"]): float(row["loss"]) for row in self.step_rows()}

    def scalars(self, name: str, tag: str) -> dict[int, float]:
        """step -> value of the scalar ``tag`` in the TensorBoard events of writer ``name`` ("train"
        or "eval"), whether written as a tensor (tf.summary) or as a simple value."""
        events = event_files.scalar_events(self.tensorboard(name))
        return dict(sorted((step, value) for step, found, value in events if found == tag))

    def scalar_tags(self, name: str) -> set[str]:
        """The scalar tags writer ``name`` ("train" or "eval") has written."""
        return {tag for _, tag, _ in event_files.scalar_events(self.tensorboard(name))}

    # ------------------------------------------------------------------------ resumes
    def forget_steps_after(self, step: int) -> int:
        """Drops what a run logged beyond ``step`` (the checkpoint it resumes from): rows of
        train_steps.jsonl and TensorBoard events of later steps, which the resumed run logs again.
        So the step log holds each step once, equal to an uninterrupted run's, and the curves do
        not double. Returns how many step-log rows were dropped."""
        rows = self.step_rows()
        kept = [row for row in rows if int(row["step"]) <= step]
        if len(kept) != len(rows):
            self._replace(self.step_log, "".join(json.dumps(row) + "\n" for row in kept).encode("utf-8"))
        for name in ("train", "eval"):
            event_files.forget_events_after(self.tensorboard(name), step)
        return len(rows) - len(kept)

    def set_aside_checkpoint(self, prefix: str) -> str:
        """Moves the files of checkpoint ``prefix`` (one under checkpoints/) to checkpoints/damaged/,
        never deleting or overwriting one (a name set aside before gets a counter: ckpt-N_2), and
        rewrites checkpoints/checkpoint with every other checkpoint present, the newest the latest;
        returns the prefix the files now have."""
        history = self.checkpoint_history()
        moved = checkpoint_history.set_aside(self.checkpoints, prefix)
        left = tuple(path for path in history.prefixes if posixpath.basename(path) != posixpath.basename(prefix))
        checkpoint_history.write_history(checkpoint_history.History(self.checkpoints, left))
        return moved

    def set_aside_file(self, name: str) -> str:
        """Moves the directory's file ``name`` (a damaged goodput.json) to damaged/ under the rule
        checkpoints are set aside by (trainer/runtime/checkpoint_history.py): nothing overwritten, a
        name set aside before gets a counter (goodput_2.json); returns its new path."""
        return checkpoint_history.set_aside_file(self.path, name)

    def _replace(self, path: str, data: bytes) -> None:
        """Writes ``data`` as the whole of ``path``: on a local disk through a temporary file and a
        rename, so a reader never sees half a file; an object store publishes an object whole."""
        if "://" in path:
            write_bytes(path, data)
            return
        write_bytes(path + ".tmp", data)
        file_system.rename(path + ".tmp", path, overwrite=True)

    # ------------------------------------------------------------------------ writes
    def write_model_files(self, model_config: ModelConfig, special_ids: Mapping[str, int], vocab_path: str,
                          uncased: bool | None = None) -> None:
        """Writes model_config.json and special_ids.json, copies the SentencePiece model to spiece.model
        and, when ``uncased`` is known (not None), writes text_normalization.json."""
        file_system.makedirs(self.path)
        write_json(self.join(self.MODEL_CONFIG), model_config.to_dict())
        write_json(self.join(self.SPECIAL_IDS), dict(special_ids))
        if uncased is not None:
            write_json(self.join(self.TEXT_NORMALIZATION), {"uncased": bool(uncased)})
        target = self.join(self.VOCAB)
        if os.fspath(vocab_path) != target:
            file_system.copy(os.fspath(vocab_path), target, overwrite=True)
        for name in ("model_config", "special_ids", "sp_model_proto", "uncased"):
            self.__dict__.pop(name, None)  # drop what was read before this write

    def write_train_config(self, train_config) -> None:
        """Writes train_config.json (a trainer.configs.training.TrainConfig)."""
        write_json(self.join(self.TRAIN_CONFIG), train_config.to_dict())

    def settings_changes(self, name: str, config) -> list[str]:
        """How ``config`` (a configuration dataclass) differs from the one saved as ``name``, one
        "field: saved -> new" per field (empty when nothing is saved yet)."""
        if not self.has(name):
            return []
        # A field added after the file was saved counts at its default; the JSON round trip makes
        # tuples compare with the lists JSON reads back.
        defaults = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
        saved = json.loads(json.dumps({**defaults, **read_json(self.join(name))}))
        new = json.loads(json.dumps(config.to_dict()))
        return [f"{key}: {saved.get(key, '(none)')!r} -> {new.get(key, '(none)')!r}"
                for key in sorted(set(saved) | set(new)) if saved.get(key) != new.get(key)]

    def replace_settings(self, name: str, config, resumed_at: int) -> str:
        """Writes ``config`` as ``name`` and keeps the settings it replaces as ``name.step-N.json``,
        N the step the run with the new settings resumed at; returns where the old ones went."""
        kept = self.join(name.removesuffix(".json") + f".step-{resumed_at}.json")
        file_system.rename(self.join(name), kept, overwrite=True)
        write_json(self.join(name), config.to_dict())
        self.__dict__.pop("finetune_config", None)
        return kept

    def write_finetune_files(self, finetune_config, labels) -> None:
        """Writes finetune_config.json and, for classification, labels.json."""
        write_json(self.join(self.FINETUNE_CONFIG), finetune_config.to_dict())
        if labels is not None:
            write_json(self.join(self.LABELS), list(labels))
        for name in ("finetune_config", "labels", "head_spec"):
            self.__dict__.pop(name, None)

    def write_head_files(self, head: HeadSpec) -> None:
        """Records a fine-tuning head that did not come from `xlnet finetune` (an imported one):
        finetune_config.json with the task and, for squad, the beam widths (every other setting at
        its default) and, for classification, labels.json."""
        from trainer.configs.finetuning import FinetuneConfig

        widths = {"start_n_top": head.start_n_top, "end_n_top": head.end_n_top} if head.task == "squad" else {}
        self.write_finetune_files(FinetuneConfig(task=head.task, **widths),
                                  head.labels if head.task == "classification" else None)

    def write_json(self, name: str, value: Any) -> None:
        """Writes one JSON file of the directory (e.g. EVAL_RESULTS)."""
        write_json(self.join(name), value)

    def replace_json(self, name: str, value: Any) -> None:
        """Writes one JSON file of the directory whole, so that a reader never sees half of it (a
        file rewritten as a run goes, e.g. GOODPUT)."""
        self._replace(self.join(name), (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8"))

    def write_json_lines(self, name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        """Writes one JSON-lines file of the directory (e.g. PREDICTIONS), replacing it."""
        text = "".join(json.dumps(dict(row)) + "\n" for row in rows)
        with file_system.open_file(self.join(name), "w") as handle:
            handle.write(text)

    def append_steps(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Appends one JSON line per row to train_steps.jsonl.

        On an object store an append rewrites the object (as TensorBoard's event files do on
        every flush), so rows are appended once per loop of steps, not per step. A full disk is a
        LogWriteError (exit status 3) with the file left as it was (event_files.append_text)."""
        text = "".join(json.dumps(dict(row)) + "\n" for row in rows)
        with event_files.full_disk_stops_the_run(self.step_log, self.path, self.latest_checkpoint):
            event_files.append_text(self.step_log, text)
