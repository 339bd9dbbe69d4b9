"""`xlnet finetune --task squad`: SQuAD on the shared controller, scored by the official evaluation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import xlnet_cli
from trainer.model_dir import ModelDirectory
from trainer.squad_data import read_squad
from trainer.squad_metrics import squad_evaluate

REPO = Path(__file__).resolve().parent.parent
WIKI_QA = REPO / "data" / "squad" / "wiki_qa_v2.json"
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


@pytest.fixture(scope="module")
def answered(tmp_path_factory, spm_model) -> tuple[Path, dict]:
    model_dir = tmp_path_factory.mktemp("squad") / "model"
    code = xlnet_cli.main(squad_args(model_dir, spm_model, "train_steps=4", "eval_every=2", "checkpoint_every=4"))
    assert code == 0
    return model_dir, json.loads((model_dir / "eval_results.json").read_text())


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
    assert results["unaligned_skipped"] == 0 and set(results["truncated_questions"]) == {"train", "eval"}


def test_the_model_directory_records_the_squad_settings(answered):
    model_dir, _ = answered
    config = ModelDirectory(str(model_dir)).finetune_config
    assert (config.task, config.max_seq_length, config.doc_stride, config.max_query_length) == ("squad", 96, 48, 24)
    assert (config.max_answer_length, config.n_best) == (30, 20)
    assert ModelDirectory(str(model_dir)).labels is None


def test_squad_defaults_to_the_original_sequence_length(tmp_path, spm_model):
    from trainer.finetune_command import _resolve_configs, add_arguments

    parser = __import__("argparse").ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--task", "squad", "--train", "x", "--eval", "x", "--vocab", spm_model, "--preset",
                              "tiny", "--model-dir", str(tmp_path)])
    _, config = _resolve_configs(args, {"model": None, "vocab_size": 8000})
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


def test_test_files_are_refused_for_squad_with_the_way_out(tmp_path, spm_model, capsys):
    assert xlnet_cli.main(squad_args(tmp_path / "m", spm_model, extra=["--test", str(WIKI_QA)])) == 2
    assert "score a file with --eval" in capsys.readouterr().err
