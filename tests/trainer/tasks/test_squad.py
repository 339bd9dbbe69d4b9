"""`xlnet finetune --task squad`: SQuAD on the shared controller, scored by the official evaluation."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

import xlnet_cli
from trainer.evaluation.squad_official import squad_evaluate
from trainer.inputs.squad import read_squad
from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import WIKI_QA

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "train_batch_size=8",
         "eval_batch_size=32", "steps_per_loop=2", "warmup_steps=2"]


def squad_args(model_dir: Path, vocab: str, *overrides: str, train: Path = WIKI_QA, eval: Path = WIKI_QA,
               extra=()) -> list[str]:
    args = ["finetune", "--task", "squad", "--train", str(train), "--eval", str(eval), "--vocab", vocab,
            "--preset", "tiny", "--model-dir", str(model_dir), "--max-seq-length", "96", "--doc-stride", "48",
            "--max-query-length", "24", *extra]
    for item in SMALL + list(overrides):
        args += ["--set", item]
    return args


def run_finetune(args: list[str]) -> dict:
    """Runs `xlnet finetune` in-process; its summary (the last JSON line it prints)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert xlnet_cli.main(args) == 0
    return json.loads([line for line in printed.getvalue().splitlines() if line.startswith("{")][-1])


@pytest.fixture(scope="module")
def answered(tmp_path_factory, spm_model) -> tuple[Path, dict]:
    """4 steps on the bundled set, scored on it, and the same file again as --test."""
    model_dir = tmp_path_factory.mktemp("squad") / "model"
    summary = run_finetune(squad_args(model_dir, spm_model, "train_steps=4", "eval_every=2", "checkpoint_every=4",
                                      extra=["--test", str(WIKI_QA)]))
    return model_dir, {**json.loads((model_dir / "eval_results.json").read_text()), "summary": summary}


def test_every_question_gets_an_answer_that_is_a_span_of_its_context(answered):
    model_dir, _ = answered
    predictions = json.loads((model_dir / "predictions.json").read_text())
    examples = {example.qid: example for example in read_squad(str(WIKI_QA)).examples}
    assert set(predictions) == set(examples)
    assert all(answer in examples[qid].context for qid, answer in predictions.items())


def test_eval_results_are_the_official_scores_of_predictions_json(answered):
    model_dir, results = answered
    data = read_squad(str(WIKI_QA))
    predictions = json.loads((model_dir / "predictions.json").read_text())
    null_odds = json.loads((model_dir / "null_odds.json").read_text())
    expected = squad_evaluate(data.gold_answers(), predictions, null_odds, na_prob_thresh=float("inf"))
    for name in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "best_f1", "best_f1_thresh"):
        assert results[name] == pytest.approx(expected[name]), name
    assert results["total"] == 130 and results["HasAns_total"] == 109 and results["NoAns_total"] == 21
    assert results["version_2"] is True and results["step"] == 4


def test_the_counts_of_windows_and_truncated_questions_are_reported(answered):
    _, results = answered
    assert results["train_questions"] == results["eval_questions"] == 130
    assert results["eval_windows"] > 130  # contexts longer than one 96-piece window are split
    assert results["unaligned_skipped"] == 0 and set(results["truncated_questions"]) == {"train", "eval", "test"}


def test_the_model_directory_records_the_squad_settings(answered):
    model_dir, _ = answered
    config = ModelDirectory(str(model_dir)).finetune_config
    assert (config.task, config.max_seq_length, config.doc_stride, config.max_query_length) == ("squad", 96, 48, 24)
    assert (config.max_answer_length, config.n_best) == (30, 20)
    assert ModelDirectory(str(model_dir)).labels is None


def test_squad_defaults_to_the_original_sequence_length(tmp_path, spm_model):
    from trainer.commands.finetune import add_arguments, finetune_settings
    from trainer.launch.finetuning_run import finetuning_configs

    parser = __import__("argparse").ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--task", "squad", "--train", "x", "--eval", "x", "--vocab", spm_model, "--preset",
                              "tiny", "--model-dir", str(tmp_path)])
    _, config = finetuning_configs(finetune_settings(args), vocab_size=8000)
    assert (config.max_seq_length, config.doc_stride, config.max_query_length) == (512, 128, 64)


def test_a_missing_answer_start_names_the_file_and_the_question(tmp_path, spm_model, capsys):
    data = json.loads(WIKI_QA.read_text())
    question = data["data"][0]["paragraphs"][0]["qas"][0]
    del question["answers"][0]["answer_start"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    assert xlnet_cli.main(squad_args(tmp_path / "m", spm_model, train=broken)) == 2
    error = capsys.readouterr().err
    assert str(broken) in error and question["id"] in error and "answer_start" in error


def test_a_test_file_is_answered_like_the_eval_file(answered):
    model_dir, results = answered
    assert json.loads((model_dir / "test_predictions.json").read_text()) == json.loads(
        (model_dir / "predictions.json").read_text())
    test_odds = json.loads((model_dir / "test_null_odds.json").read_text())
    assert test_odds == pytest.approx(json.loads((model_dir / "null_odds.json").read_text()), abs=1e-5)


def test_a_labeled_test_file_is_scored_in_the_summary(answered):
    _, results = answered
    test = results["summary"]["test"]
    assert test["total"] == 130 and test["f1"] == pytest.approx(results["f1"])
    assert results["summary"]["test_questions"] == 130


def test_an_unlabeled_test_file_gets_answers_and_no_scores(tmp_path, spm_model):
    data = json.loads(WIKI_QA.read_text())
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [{"id": qa["id"], "question": qa["question"]} for qa in paragraph["qas"]]
    hidden = tmp_path / "hidden.json"
    hidden.write_text(json.dumps(data))
    summary = run_finetune(squad_args(tmp_path / "m", spm_model, "train_steps=2", extra=["--test", str(hidden)]))
    answers = json.loads((tmp_path / "m" / "test_predictions.json").read_text())
    contexts = {example.qid: example.context for example in read_squad(str(WIKI_QA)).examples}
    assert set(answers) == set(contexts) and all(answer in contexts[qid] for qid, answer in answers.items())
    assert "test" not in summary and (tmp_path / "m" / "test_null_odds.json").exists()
