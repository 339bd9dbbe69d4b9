"""`xlnet finetune`: fine-tune a model directory for classification, regression, multiple choice
or extractive question answering (squad).

  --task classification|regression|multiple-choice|squad --train FILE_OR_GLOB --eval FILE_OR_GLOB
  [--test FILE_OR_GLOB] --init-checkpoint MODEL_DIR --model-dir OUT [--max-seq-length N]
  [--preset tiny|base|large] [--config FILE] [--set key=value ...] [--strategy ...] [--tpu NAME]

The output is a model directory (trainer/runtime/model_dir.py; local or gs://) that `xlnet export` turns
into a SavedModel with a ``classify``, ``regress``, ``choose`` or ``answer`` signature. Besides
the files of any model directory it holds finetune_config.json, labels.json (classification),
eval_results.json and, with --test, predictions.jsonl (squad: predictions.json, null_odds.json
and, with --test, test_predictions.json and test_null_odds.json). Re-running the same command resumes
from the latest checkpoint.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
from typing import Any

from trainer.models.heads import TASKS

# FinetuneConfig fields with a flag of their own (their help comes from the field's metadata).
SQUAD_FLAGS = ("doc_stride", "max_query_length", "max_answer_length", "n_best")
# ModelConfig fields that shape the weights: fixed by --init-checkpoint.
ARCHITECTURE = ("vocab_size", "n_layer", "d_model", "n_head", "d_head", "d_inner", "untie_r")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet finetune`."""
    from trainer.commands.fit_check import add_fit_arguments
    from trainer.commands.training_command import add_run_arguments, field_help
    from trainer.configs.finetuning import FinetuneConfig
    from trainer.models.config import MODEL_PRESETS

    parser.add_argument("--task", required=True, choices=TASKS, help="what the head predicts")
    parser.add_argument("--train", required=True, help="training file or glob (local or gs://): CSV, TSV or "
                        "JSON lines with text, [text_b,] label; multiple choice: JSON lines with context, "
                        "[question,] options, label")
    parser.add_argument("--eval", required=True, help="labeled eval file or glob, scored every eval_every steps "
                                                      "and at the end (eval_results.json)")
    parser.add_argument("--test", help="file or glob to predict at the end (predictions.jsonl; squad: "
                                       "test_predictions.json); labels or answers optional")
    parser.add_argument("--init-checkpoint", help="model directory from `xlnet train` or `xlnet import-checkpoint` "
                                                  "(local or gs://); its vocabulary, casing and architecture are "
                                                  "reused. Without it: random weights of --preset (a baseline)")
    parser.add_argument("--model-dir", required=True, help="output model directory (local or gs://)")
    parser.add_argument("--max-seq-length", type=int, help="pieces per example, <sep>s and <cls> included "
                                                           "(default: the preset's)")
    parser.add_argument("--preset", choices=sorted(MODEL_PRESETS),
                        help="fine-tuning defaults (and, without --init-checkpoint, the architecture); default: "
                             "the preset whose architecture matches --init-checkpoint, else base; tiny without "
                             "--init-checkpoint")
    parser.add_argument("--vocab", help="SentencePiece model for a run without --init-checkpoint")
    parser.add_argument("--uncased", action=argparse.BooleanOptionalAction, default=None,
                        help="lower-case text (default: as the --init-checkpoint model was trained)")
    parser.add_argument("--text-field", default="text", help="column or key of the first text")
    parser.add_argument("--text-b-field", default="text_b", help="column or key of the optional second text")
    parser.add_argument("--label-field", default="label", help="column or key of the label")
    parser.add_argument("--format", dest="file_format", choices=("csv", "tsv", "jsonl"),
                        help="file format of --train/--eval/--test (default: from each file's extension)")
    squad = parser.add_argument_group("squad", "extractive question answering (SQuAD JSON files)")
    for name in SQUAD_FLAGS:
        squad.add_argument("--" + name.replace("_", "-"), type=int, help=field_help(FinetuneConfig, name))
    add_run_arguments(parser, "finetune")
    add_fit_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Fine-tunes; 0 when done or preempted (checkpoint saved), 2 on bad input, 3 on divergence."""
    from trainer.commands.training_command import configure_logging, run_training
    from trainer.runtime.storage import StorageError

    configure_logging()

    def train() -> dict[str, Any]:
        with contextlib.ExitStack() as held:
            controller = build_controller(args, held=held)
            result = controller.train(evaluate_at_end=True)
            return _write_outputs(controller, args, result)

    return run_training("xlnet finetune", train, (ValueError, StorageError, FileNotFoundError))


def build_controller(args: argparse.Namespace, strategy=None, held: contextlib.ExitStack | None = None):
    """Reads the files, resolves the configs, prepares the model directory; returns the Controller.
    ``strategy``: an existing tf.distribute strategy instead of the one --strategy names. With
    ``held``, the chief first takes the model directory's run lock, released when ``held`` closes."""
    from trainer.commands.fit_check import fit_to_device
    from trainer.commands.training_command import settings_replacement
    from trainer.runtime.controller import Controller
    from trainer.runtime.distribution import create_strategy, is_chief, make_deterministic
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.run_lock import RunLock

    _check_settings_before_reading(args)
    source = _model_source(args)
    model, config = _resolve_configs(args, source)
    if config.deterministic:
        make_deterministic()
    # before any TensorFlow op runs (encoding counts pieces): multi-worker set-up needs a fresh runtime
    if strategy is None:
        strategy = create_strategy("tpu" if args.tpu and args.strategy == "auto" else args.strategy, args.tpu)
    config = fit_to_device("xlnet finetune", model, config, strategy, getattr(args, "device_memory", None))
    out = ModelDirectory(args.model_dir)
    if held is not None and is_chief(strategy):
        held.enter_context(RunLock(out, log=lambda line: print(line, flush=True)))
    resumed_labels = _check_resume(out, model, config)
    if config.task == "squad":
        task, labels = _squad_task(args, source, model, config), None
    else:
        task = _sequence_task(args, source, model, config, resumed_labels)
        labels = task.data.labels
    after_first_save = None
    if is_chief(strategy):
        out.write_model_files(model, source["special_ids"], source["vocab_path"], uncased=source["uncased"])
        after_first_save = settings_replacement(out, out.FINETUNE_CONFIG, task.config)
        if labels is not None:
            out.write_json(out.LABELS, list(labels))  # the same as a resumed run's (_check_resume)
    return Controller(task, task.config, model_dir=args.model_dir, strategy=strategy,
                      init_checkpoint=args.init_checkpoint, log=lambda line: print(line, flush=True),
                      after_first_save=after_first_save)


def _sequence_task(args: argparse.Namespace, source: dict[str, Any], model, config, resumed_labels):
    """Classification, regression or multiple choice: files -> examples -> FinetuningTask."""
    from trainer.serving.text_encoder import XLNetTextEncoder
    from trainer.tasks.sequence import FieldNames, FinetuningTask, load_task_data

    encoder = XLNetTextEncoder(source["sp_model_proto"], source["special_ids"], config.max_seq_length,
                               source["uncased"])
    fields = FieldNames(args.text_field, args.text_b_field, args.label_field, args.file_format)
    data = load_task_data(config.task, encoder, args.train, args.eval, args.test, fields, resumed_labels)
    config = config.replace(text_pair=getattr(data.train.examples[0], "text_b", None) is not None)
    for name, split in (("train", data.train), ("eval", data.eval), ("test", data.test)):
        if split is not None and split.truncated:
            print(f"{split.truncated} of {len(split.examples)} {name} examples are longer than max_seq_length "
                  f"{config.max_seq_length} and are truncated", flush=True)
    return FinetuningTask(config, model, encoder, data)


def _squad_task(args: argparse.Namespace, source: dict[str, Any], model, config):
    """SQuAD files -> windowed features -> SquadTask."""
    from trainer.inputs.squad import SquadTokenizer
    from trainer.tasks.squad import SquadTask, load_squad_splits

    tokenizer = SquadTokenizer.from_model_proto(source["sp_model_proto"], source["uncased"], source["vocab_path"])
    data = load_squad_splits(config, tokenizer, args.train, args.eval, args.test)
    task = SquadTask(config, model, data)
    counts = task.summary()
    test = (f", {counts['test_questions']} test questions in {counts['test_windows']} windows"
            if data.test is not None else "")
    print(f"{counts['train_questions']} training questions in {counts['train_windows']} windows "
          f"({counts['unaligned_skipped']} skipped: answer not aligned with the context), "
          f"{counts['eval_questions']} eval questions in {counts['eval_windows']} windows{test}; questions longer "
          f"than max_query_length {config.max_query_length}, truncated: {counts['truncated_questions']}",
          flush=True)
    return task


def _model_source(args: argparse.Namespace) -> dict[str, Any]:
    """Vocabulary, special ids, casing and architecture: from --init-checkpoint, or from --vocab
    and --preset for a baseline from random weights."""
    from tfrecords.vocabulary import parse_vocab
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.storage import read_bytes

    if args.init_checkpoint:
        init = ModelDirectory(args.init_checkpoint)
        init.require("--init-checkpoint")
        if init.latest_checkpoint() is None:
            raise ValueError(f"--init-checkpoint {init.path!r} has no checkpoint under checkpoints/")
        uncased = args.uncased if args.uncased is not None else bool(init.uncased)
        return {"model": init.model_config, "sp_model_proto": init.sp_model_proto, "special_ids": init.special_ids,
                "uncased": uncased, "vocab_path": init.join(ModelDirectory.VOCAB)}
    if not args.vocab:
        raise ValueError("--vocab is required without --init-checkpoint (the SentencePiece model to encode with)")
    proto = read_bytes(args.vocab)
    vocab = parse_vocab(proto, args.vocab)
    return {"model": None, "sp_model_proto": proto, "special_ids": vocab.special_ids.to_dict(),
            "uncased": bool(args.uncased), "vocab_path": args.vocab, "vocab_size": vocab.vocab_size}


def _resolve_configs(args: argparse.Namespace, source: dict[str, Any], preset: str | None = None):
    """(whole-sequence ModelConfig, FinetuneConfig): preset -> --config -> --set -> --task/--max-seq-length.
    ``preset``: the preset to resolve over (default: --preset, else the one matching the source's model)."""
    from trainer.commands.training_command import read_config_file
    from trainer.configs.finetuning import finetune_preset
    from trainer.configs.overrides import resolve_model_and
    from trainer.models.config import MODEL_PRESETS, model_preset, sequence_model_config

    base_model = source["model"]
    preset = preset or args.preset or _matching_preset(base_model, MODEL_PRESETS)
    if base_model is None:
        base_model = model_preset(preset).replace(vocab_size=source["vocab_size"])
    flags = {name: getattr(args, name) for name in ("max_seq_length",) + SQUAD_FLAGS if getattr(args, name) is not None}
    model, config, _ = resolve_model_and(base_model, finetune_preset(preset).for_task(args.task),
                                         read_config_file(args.config), args.overrides, "finetune",
                                         changes={"task": args.task, **flags})
    if source["model"] is not None:
        changed = sorted(name for name in ARCHITECTURE if getattr(model, name) != getattr(base_model, name))
        if changed:
            raise ValueError(f"--set/--config cannot change the architecture of --init-checkpoint "
                             f"({', '.join(changed)})")
    return sequence_model_config(model), config


def _check_settings_before_reading(args: argparse.Namespace) -> None:
    """Resolves the flags, --set and --config over a stand-in preset, so that a setting the
    configuration refuses (the SQuAD window rule among them) is reported before any model or data
    file is read. The stand-in cannot hide a problem of the real resolution: squad's lengths come
    from FinetuneConfig, not from a preset, and the full resolution checks everything again."""
    from trainer.models.config import model_preset

    preset = args.preset or "base"
    _resolve_configs(args, {"model": None, "vocab_size": model_preset(preset).vocab_size}, preset=preset)


def _matching_preset(model, presets) -> str:
    """The preset whose architecture is ``model``'s (so its fine-tuning defaults fit), else base;
    tiny when there is no model (a run from random weights without --preset)."""
    if model is not None:
        for name, preset in presets.items():
            if (preset.n_layer, preset.d_model, preset.n_head) == (model.n_layer, model.d_model, model.n_head):
                return name
    return "tiny" if model is None else "base"


def _check_resume(out, model, config) -> tuple[str, ...] | None:
    """An existing output must hold the same task and architecture; returns its label list, if any."""
    if not out.has(out.FINETUNE_CONFIG):
        if out.latest_checkpoint() is not None:
            raise ValueError(f"--model-dir {out.path} holds a model that was not fine-tuned (no "
                             f"{out.FINETUNE_CONFIG}); pass it as --init-checkpoint and fine-tune into a new "
                             "--model-dir")
        return None
    existing = out.finetune_config
    if existing.task != config.task:
        raise ValueError(f"--model-dir {out.path} holds a {existing.task} model; use a new --model-dir")
    out.check_same_model(model)
    return out.labels


def _write_outputs(controller, args: argparse.Namespace, result) -> dict[str, Any]:
    """eval_results.json and, with --test, predictions.jsonl (chief only); the run's summary."""
    task, out = controller.task, controller.model_dir
    if task.task == "squad":
        return _write_squad_outputs(controller, args, result)
    data = task.data
    truncated = {name: split.truncated for name, split in (("train", data.train), ("eval", data.eval),
                                                             ("test", data.test)) if split is not None}
    summary = {"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
               "eval": dict(result.eval_metrics), "truncated": truncated}
    if result.stopped != "completed":
        return summary
    if controller.chief:
        out.write_json(out.EVAL_RESULTS, {"task": task.task, "step": result.step, "eval_files": args.eval,
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


def _write_squad_outputs(controller, args: argparse.Namespace, result) -> dict[str, Any]:
    """eval_results.json, predictions.json (official format) and, for SQuAD 2.0, null_odds.json;
    with --test, test_predictions.json (and test_null_odds.json for a SQuAD 2.0 model)."""
    from trainer.evaluation.squad_answers import no_answer_scores, predictions_json

    task, out, counts = controller.task, controller.model_dir, controller.task.summary()
    summary = {"step": result.step, "stopped": result.stopped, "last_loss": result.last_loss,
               "eval": dict(result.eval_metrics), **counts}
    if result.stopped != "completed":
        return summary
    if controller.chief:
        out.write_json(out.EVAL_RESULTS, {"task": "squad", "step": result.step, "eval_files": args.eval,
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
    from trainer.evaluation.squad_answers import evaluate_predictions, no_answer_scores, predictions_json

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
