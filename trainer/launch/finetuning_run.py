"""A fine-tuning run (`xlnet finetune`): its settings, its configurations resolved, its task's files
read, its controller built, and the outputs it leaves in the model directory once trained.

Resolution order: the preset (``--preset``, else the one matching ``--init-checkpoint``'s
architecture) -> ``--config`` -> ``--set`` -> the command's own flags (``--task``,
``--max-seq-length``, the SQuAD lengths). The architecture of ``--init-checkpoint`` is fixed.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, Callable

from tfrecords.errors import UsageError
from trainer.launch.run_setup import console_log

if TYPE_CHECKING:  # imported where used: `xlnet finetune --help` should not load TensorFlow
    from trainer.configs.finetuning import FinetuneConfig
    from trainer.models.config import ModelConfig
    from trainer.tasks.sequence import FieldNames

# FinetuneConfig fields with a flag of their own (their help comes from the field's metadata).
SQUAD_FLAGS = ("doc_stride", "max_query_length", "max_answer_length", "n_best")
# ModelConfig fields that shape the weights: fixed by --init-checkpoint.
ARCHITECTURE = ("vocab_size", "n_layer", "d_model", "n_head", "d_head", "d_inner", "untie_r")


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """What resolves a fine-tuning configuration: the task kind and the flags that set its fields.
    ``None`` leaves a field to the preset (and, below it, to FinetuneConfig's defaults)."""

    task: str  # classification, regression, multiple-choice or squad (models/head_spec.py: TASKS)
    preset: str | None = None  # default: the preset matching --init-checkpoint, else base (tiny without one)
    config_file: str | None = None
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE items
    max_seq_length: int | None = None
    doc_stride: int | None = None
    max_query_length: int | None = None
    max_answer_length: int | None = None
    n_best: int | None = None

    def flag_changes(self) -> dict[str, Any]:
        """The FinetuneConfig fields the command's own flags set."""
        changes = {name: getattr(self, name) for name in ("max_seq_length",) + SQUAD_FLAGS}
        return {"task": self.task, **{name: value for name, value in changes.items() if value is not None}}


@dataclasses.dataclass(frozen=True)
class FinetuningRun:
    """What `xlnet finetune` is asked to do: one field per flag (paths local or gs://)."""

    settings: FinetuneSettings
    train: str  # file or glob
    eval: str
    model_dir: str
    test: str | None = None
    init_checkpoint: str | None = None  # without it: random weights of the preset (a baseline)
    vocab: str | None = None  # the SentencePiece model of a run without --init-checkpoint
    uncased: bool | None = None  # default: as --init-checkpoint was trained
    fields: FieldNames | None = None  # column names and file format; None: the defaults
    strategy: str = "auto"
    tpu: str | None = None
    device_memory: str | None = None


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Where a fine-tuning run's vocabulary, casing and architecture come from: ``--init-checkpoint``,
    or ``--vocab`` and the preset for a baseline from random weights (``model`` None)."""

    model: ModelConfig | None
    sp_model_proto: bytes
    special_ids: dict
    uncased: bool
    vocab_path: str
    vocab_size: int | None = None


def finetuning_configs(settings: FinetuneSettings, base_model: ModelConfig | None = None,
                       vocab_size: int | None = None, preset: str | None = None
                       ) -> tuple[ModelConfig, FinetuneConfig]:
    """(whole-sequence ModelConfig, FinetuneConfig) of ``settings`` over ``base_model`` (an
    ``--init-checkpoint``'s architecture, fixed) or, without one, the preset's model with
    ``vocab_size``. ``preset``: the preset to resolve over (default: ``settings.preset``, else the
    one matching ``base_model``)."""
    from trainer.configs.finetuning import finetune_preset
    from trainer.configs.overrides import resolve_model_and
    from trainer.launch.run_setup import read_config_file
    from trainer.models.config import MODEL_PRESETS, model_preset, sequence_model_config

    preset = preset or settings.preset or matching_preset(base_model, MODEL_PRESETS)
    start = base_model
    if start is None:
        start = model_preset(preset)
        start = start.replace(vocab_size=vocab_size) if vocab_size is not None else start
    model, config, _ = resolve_model_and(start, finetune_preset(preset).for_task(settings.task),
                                         read_config_file(settings.config_file), list(settings.overrides),
                                         "finetune", changes=settings.flag_changes())
    if base_model is not None:
        changed = sorted(name for name in ARCHITECTURE if getattr(model, name) != getattr(base_model, name))
        if changed:
            raise UsageError(f"--set/--config cannot change the architecture of --init-checkpoint "
                             f"({', '.join(changed)})")
    return sequence_model_config(model, segment_memory(model, config)), config


def segment_memory(model: ModelConfig, config: FinetuneConfig) -> int:
    """The memory a fine-tuning run reads with: with ``max_segments`` 1 none (one segment per text,
    as ever); with more, the model's ``mem_len`` (--init-checkpoint's, the memory it was pretrained
    with, unless ``--set mem_len=M``), which must then be positive."""
    if config.max_segments == 1:
        return 0
    if model.mem_len == 0:
        raise UsageError(f"max_segments {config.max_segments} reads the earlier segments of a text through the "
                         "memory, but mem_len is 0: set a memory length with --set mem_len=M (M > 0), or "
                         "--set max_segments=1")
    return model.mem_len


def matching_preset(model: ModelConfig | None, presets: dict[str, ModelConfig]) -> str:
    """The preset whose architecture is ``model``'s (so its fine-tuning defaults fit), else base;
    tiny when there is no model (a run from random weights without --preset)."""
    if model is not None:
        for name, preset in presets.items():
            if (preset.n_layer, preset.d_model, preset.n_head) == (model.n_layer, model.d_model, model.n_head):
                return name
    return "tiny" if model is None else "base"


def model_source(run: FinetuningRun) -> ModelSource:
    """Vocabulary, special ids, casing and architecture: from --init-checkpoint, or from --vocab
    and the preset for a baseline from random weights."""
    from tfrecords.vocabulary import parse_vocab
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.storage import read_bytes

    if run.init_checkpoint:
        init = ModelDirectory(run.init_checkpoint)
        init.require("--init-checkpoint")
        if init.latest_checkpoint() is None:
            raise UsageError(f"--init-checkpoint {init.path!r} has no checkpoint under checkpoints/")
        uncased = run.uncased if run.uncased is not None else bool(init.uncased)
        return ModelSource(init.model_config, init.sp_model_proto, init.special_ids, uncased,
                           init.join(ModelDirectory.VOCAB))
    if not run.vocab:
        raise UsageError("--vocab is required without --init-checkpoint (the SentencePiece model to encode with)")
    proto = read_bytes(run.vocab)
    vocab = parse_vocab(proto, run.vocab)
    return ModelSource(None, proto, vocab.special_ids.to_dict(), bool(run.uncased), run.vocab, vocab.vocab_size)


def check_settings(settings: FinetuneSettings) -> None:
    """Resolves the flags, --set and --config over a stand-in preset, so that a setting the
    configuration refuses (the SQuAD window rule among them) is reported before any model or data
    file is read. The stand-in cannot hide a problem of the real resolution: squad's lengths come
    from FinetuneConfig, not from a preset, and the full resolution checks everything again."""
    from trainer.models.config import model_preset

    preset = settings.preset or "base"
    finetuning_configs(settings, vocab_size=model_preset(preset).vocab_size, preset=preset)


def build_finetuning(run: FinetuningRun, held: contextlib.ExitStack | None = None, strategy=None,
                     log: Callable[[str], None] = console_log):
    """Reads the files, resolves the configs, prepares the model directory; returns the Controller.
    ``strategy``: an existing tf.distribute strategy instead of the one ``run.strategy`` names. With
    ``held``, the chief first takes the model directory's run lock, released when ``held`` closes."""
    from trainer.launch.fit_check import fit_to_device
    from trainer.launch.run_setup import hold_run_lock, settings_replacement, start_run
    from trainer.launch.utilisation import run_step_flops
    from trainer.runtime.controller import Controller
    from trainer.runtime.distribution import is_chief
    from trainer.runtime.model_dir import ModelDirectory

    check_settings(run.settings)
    source = model_source(run)
    model, config = finetuning_configs(run.settings, source.model, source.vocab_size)
    # before any TensorFlow op runs (encoding counts pieces): multi-worker set-up needs a fresh runtime
    strategy = start_run(config, run.strategy, run.tpu, strategy)
    config = fit_to_device("xlnet finetune", model, config, strategy, run.device_memory, log)
    out = ModelDirectory(run.model_dir)
    hold_run_lock(held, out, is_chief(strategy), log)
    resumed_labels = _check_resume(out, model, config)
    if config.task == "squad":
        task, labels = _squad_task(run, source, model, config, log), None
    else:
        task = _sequence_task(run, source, model, config, resumed_labels, log)
        labels = task.data.labels
    after_first_save = None
    if is_chief(strategy):
        out.write_model_files(model, source.special_ids, source.vocab_path, uncased=source.uncased)
        after_first_save = settings_replacement(out, out.FINETUNE_CONFIG, task.config, log)
        if labels is not None:
            out.write_json(out.LABELS, list(labels))  # the same as a resumed run's (_check_resume)
    return Controller(task, task.config, model_dir=run.model_dir, strategy=strategy,
                      init_checkpoint=run.init_checkpoint, log=log, after_first_save=after_first_save,
                      step_flops=run_step_flops(model, task.config, strategy, task.options))


def _sequence_task(run: FinetuningRun, source: ModelSource, model, config, resumed_labels,
                   log: Callable[[str], None]):
    """Classification, regression or multiple choice: files -> examples -> SequenceTask."""
    from trainer.serving.text_encoder import XLNetTextEncoder
    from trainer.tasks.sequence import FieldNames, SequenceTask, load_task_data

    encoder = XLNetTextEncoder(source.sp_model_proto, source.special_ids, config.max_seq_length, source.uncased)
    data = load_task_data(config.task, encoder, run.train, run.eval, run.test, run.fields or FieldNames(),
                          resumed_labels, max_segments=config.max_segments)
    config = config.replace(text_pair=getattr(data.train.examples[0], "text_b", None) is not None)
    longer_than = f"max_seq_length {config.max_seq_length}"
    if config.max_segments > 1:
        longer_than = f"max_segments {config.max_segments} x {longer_than}"
    for name, split in (("train", data.train), ("eval", data.eval), ("test", data.test)):
        if split is not None and split.truncated:
            log(f"{split.truncated} of {len(split.examples)} {name} examples are longer than {longer_than} "
                "and are truncated")
    return SequenceTask(config, model, encoder, data)


def _squad_task(run: FinetuningRun, source: ModelSource, model, config, log: Callable[[str], None]):
    """SQuAD files -> windowed features -> SquadTask."""
    from trainer.inputs.squad import SquadTokenizer
    from trainer.tasks.squad import SquadTask, load_squad_splits

    tokenizer = SquadTokenizer.from_model_proto(source.sp_model_proto, source.uncased, source.vocab_path)
    data = load_squad_splits(config, tokenizer, run.train, run.eval, run.test)
    task = SquadTask(config, model, data)
    counts = task.summary()
    test = (f", {counts['test_questions']} test questions in {counts['test_windows']} windows"
            if data.test is not None else "")
    log(f"{counts['train_questions']} training questions in {counts['train_windows']} windows "
        f"({counts['unaligned_skipped']} skipped: answer not aligned with the context), "
        f"{counts['eval_questions']} eval questions in {counts['eval_windows']} windows{test}; questions longer "
        f"than max_query_length {config.max_query_length}, truncated: {counts['truncated_questions']}")
    return task


def _check_resume(out, model, config) -> tuple[str, ...] | None:
    """An existing output must hold the same task and architecture; returns its label list, if any."""
    if not out.has(out.FINETUNE_CONFIG):
        if out.latest_checkpoint() is not None:
            raise UsageError(f"--model-dir {out.path} holds a model that was not fine-tuned (no "
                             f"{out.FINETUNE_CONFIG}); pass it as --init-checkpoint and fine-tune into a new "
                             "--model-dir")
        return None
    existing = out.finetune_config
    if existing.task != config.task:
        raise UsageError(f"--model-dir {out.path} holds a {existing.task} model; use a new --model-dir")
    out.check_same_model(model)
    return out.labels


def write_finetuning_outputs(controller, run: FinetuningRun, result) -> dict[str, Any]:
    """eval_results.json and, with --test, predictions.jsonl (chief only); returns the run's summary."""
    task, out = controller.task, controller.model_dir
    if task.task == "squad":
        return _write_squad_outputs(controller, run, result)
    data = task.data
    truncated = {name: split.truncated for name, split in (("train", data.train), ("eval", data.eval),
                                                             ("test", data.test)) if split is not None}
    summary = {"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
               "eval": dict(result.eval_metrics), "truncated": truncated}
    if result.stopped != "completed":
        return summary
    if controller.chief:
        out.write_json(out.EVAL_RESULTS, {"task": task.task, "step": result.step, "eval_files": run.eval,
                                          "examples": len(data.eval.examples), **result.eval_metrics,
                                          "truncated": truncated})
    if data.test is not None:
        # every worker predicts (the outputs are gathered across workers); the chief writes
        outputs = task.predict(controller.strategy, data.test.examples)
        if controller.chief:
            out.write_json_lines(out.PREDICTIONS, task.prediction_rows(outputs))
        if data.test.targets is not None:
            summary["test"] = task.scores(outputs, data.test.targets)
    return summary


def _write_squad_outputs(controller, run: FinetuningRun, result) -> dict[str, Any]:
    """eval_results.json, predictions.json (official format) and, for SQuAD 2.0, null_odds.json;
    with --test, test_predictions.json (and test_null_odds.json for a SQuAD 2.0 model)."""
    from trainer.evaluation.squad_postprocessing import no_answer_scores, predictions_json

    task, out, counts = controller.task, controller.model_dir, controller.task.summary()
    summary = {"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
               "eval": dict(result.eval_metrics), **counts}
    if result.stopped != "completed":
        return summary
    if controller.chief:
        out.write_json(out.EVAL_RESULTS, {"task": "squad", "step": result.step, "eval_files": run.eval,
                                          "version_2": task.data.eval.data.version_2, **result.eval_metrics,
                                          **counts})
        out.write_json(out.SQUAD_PREDICTIONS, predictions_json(task.predictions))
        if task.data.eval.data.version_2:
            out.write_json(out.NULL_ODDS, no_answer_scores(task.predictions))
    if task.data.test is not None:
        scores = _answer_squad_test(controller)
        if scores is not None:
            summary["test"] = scores
    return summary


def _answer_squad_test(controller) -> dict[str, float] | None:
    """Answers the --test questions (every worker; the outputs are gathered across workers) and
    writes test_predictions.json and, for a SQuAD 2.0 model, test_null_odds.json (chief only);
    the official scores when the file carries its answers, else None."""
    from trainer.evaluation.squad_postprocessing import evaluate_predictions, no_answer_scores, predictions_json

    task, out, test = controller.task, controller.model_dir, controller.task.data.test
    answers = task.answer(controller.strategy, test)
    # a hidden test set carries no is_impossible flags: the training data says whether the model
    # learned to abstain
    version_2 = task.data.train.data.version_2
    if controller.chief:
        out.write_json(out.SQUAD_TEST_PREDICTIONS, predictions_json(answers))
        if version_2:
            out.write_json(out.TEST_NULL_ODDS, no_answer_scores(answers))
    if not test.data.labeled:
        return None
    scored = dataclasses.replace(test.data, version_2=version_2)
    return {name: float(value) for name, value in evaluate_predictions(scored, answers).items()}
