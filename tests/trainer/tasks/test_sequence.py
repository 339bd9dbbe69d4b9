"""`xlnet finetune`: the fine-tuning task on the shared controller, on the bundled Rotten Tomatoes set."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from support.bundled_data import REPO, ROTTEN
from support.killed_runs import straight_and_resumed_losses
from support.processes import output_of, start_as_two_workers

import xlnet_cli
from trainer.commands.finetune import add_arguments, finetuning_run
from trainer.evaluation import metrics
from trainer.inputs import batching, sequence_examples
from trainer.launch.finetuning_run import build_finetuning
from trainer.runtime.model_dir import ModelDirectory

# A small network so that a step takes milliseconds on two CPU cores.
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "max_seq_length=48",
         "train_batch_size=16", "eval_batch_size=64", "steps_per_loop=2", "warmup_steps=2", "learning_rate=1e-3"]


def finetune_args(model_dir: Path, vocab: str, *overrides: str, task: str = "classification",
                  train: Path = ROTTEN / "train.tsv", eval: Path = ROTTEN / "dev.tsv", extra=()) -> list[str]:
    args = ["finetune", "--task", task, "--train", str(train), "--eval", str(eval), "--vocab", vocab,
            "--preset", "tiny", "--model-dir", str(model_dir), *extra]
    for item in SMALL + list(overrides):
        args += ["--set", item]
    return args




def last_json_line(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def dev_sentences(count: int) -> list[str]:
    rows = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:count + 1]
    return [row.split("\t")[0] for row in rows]


# ------------------------------------------------------------------------------ training order
def test_every_epoch_visits_each_example_once_in_a_seeded_order():
    indices = list(batching.example_order(10, seed=3).take(30).as_numpy_iterator())
    epochs = [indices[i:i + 10] for i in (0, 10, 20)]
    assert all(sorted(epoch) == list(range(10)) for epoch in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert indices == list(batching.example_order(10, seed=3).take(30).as_numpy_iterator())
    assert indices != list(batching.example_order(10, seed=4).take(30).as_numpy_iterator())


def test_the_order_resumed_at_any_position_is_the_tail_of_the_same_order():
    whole = list(batching.example_order(7, seed=0).take(25).as_numpy_iterator())
    for start in (3, 7, 12):
        assert list(batching.example_order(7, seed=0, start=start).take(25 - start).as_numpy_iterator()) \
            == whole[start:]


class Pipeline:
    """A tf.distribute.InputContext stand-in with the three fields the input function reads."""

    def __init__(self, replicas: int, pipelines: int = 1, pipeline_id: int = 0):
        self.num_replicas_in_sync, self.num_input_pipelines, self.input_pipeline_id = replicas, pipelines, pipeline_id


def test_replica_batches_are_consecutive_slices_of_the_global_batch(vocab):
    from trainer.serving.text_encoder import XLNetTextEncoder

    examples = sequence_examples.read_text_examples(str(ROTTEN / "dev.tsv"))[:40]
    targets = sequence_examples.label_ids(examples, sequence_examples.label_list(examples))
    encoder = XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), 32, uncased=False)

    columns, encode = sequence_examples.example_columns(examples, encoder)

    def first(pipeline, count):
        dataset = batching.training_dataset(columns, encode, 8, targets, seed=1, accumulation_steps=2,
                                                 input_context=pipeline)
        return [(features["input_ids"].numpy(), labels.numpy()) for features, labels in dataset.take(count)]

    (one_ids, one_labels), = first(Pipeline(1), 1)
    assert one_ids.shape == (2, 8, 32) and one_labels.shape == (2, 8)
    two = first(Pipeline(2), 2)  # replica 0 then replica 1 of step 0
    np.testing.assert_array_equal(np.concatenate([two[0][0], two[1][0]], axis=1), one_ids)
    np.testing.assert_array_equal(np.concatenate([two[0][1], two[1][1]], axis=1), one_labels)
    (worker_1, _), = first(Pipeline(2, pipelines=2, pipeline_id=1), 1)  # one replica per worker
    np.testing.assert_array_equal(worker_1, two[1][0])


# ------------------------------------------------------------------------- fine-tuning runs
@pytest.fixture(scope="module")
def classifier(tmp_path_factory, spm_model) -> tuple[Path, dict]:
    """A classifier fine-tuned for 100 steps from random weights, with --test on the dev file."""
    model_dir = tmp_path_factory.mktemp("finetune") / "rotten"
    args = finetune_args(model_dir, spm_model, "train_steps=100", "steps_per_loop=50", "eval_every=50",
                         "checkpoint_every=50", extra=["--test", str(ROTTEN / "dev.tsv")])
    completed = subprocess.run([sys.executable, "-m", "xlnet_cli"] + args, cwd=REPO, capture_output=True,
                               text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return model_dir, last_json_line(completed.stdout)


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_a_short_finetune_beats_the_majority_class_on_dev(classifier):
    model_dir, summary = classifier
    results = json.loads((model_dir / "eval_results.json").read_text())
    labels = [row.split("\t")[1] for row in (ROTTEN / "dev.tsv").read_text().splitlines()[1:]]
    majority = max(labels.count(label) for label in set(labels)) / len(labels)
    assert results["accuracy"] > majority + 0.05, (results, majority)
    assert results["step"] == 100 and results["examples"] == 1000
    assert summary["eval"]["accuracy"] == results["accuracy"]


@pytest.mark.slow  # about 14 s: a second finetune run
@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_rerunning_a_finished_finetune_evaluates_again_without_a_step(classifier, spm_model, tmp_path):
    model_dir, summary = classifier
    again = tmp_path / "again"
    subprocess.run(["cp", "-r", str(model_dir), str(again)], check=True)
    args = finetune_args(again, spm_model, "train_steps=100", "steps_per_loop=50", "eval_every=50",
                         "checkpoint_every=50")
    completed = subprocess.run([sys.executable, "-m", "xlnet_cli"] + args, cwd=REPO, capture_output=True,
                               text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    rerun = last_json_line(completed.stdout)
    assert (rerun["step"], rerun["stopped"], rerun["last_loss"]) == (100, "completed", None)
    assert rerun["eval"]["accuracy"] == summary["eval"]["accuracy"]
    assert ModelDirectory(again).step_losses() == ModelDirectory(model_dir).step_losses()


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_the_model_directory_holds_what_export_and_resume_need(classifier):
    model_dir, _ = classifier
    directory = ModelDirectory(str(model_dir))
    assert directory.labels == ("fresh", "rotten")
    config = directory.finetune_config
    assert (config.task, config.max_seq_length, config.text_pair) == ("classification", 48, False)
    assert directory.model_config.mem_len == 0 and not directory.model_config.bi_data
    assert {"model_config.json", "spiece.model", "special_ids.json", "text_normalization.json",
            "train_steps.jsonl", "checkpoints", "tensorboard"} <= set(os.listdir(model_dir))


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_eval_results_are_the_metrics_of_the_predictions(classifier):
    model_dir, summary = classifier
    rows = [json.loads(line) for line in (model_dir / "predictions.jsonl").read_text().splitlines()]
    assert [row["index"] for row in rows] == list(range(1000))
    assert all(row["label"] == ("fresh", "rotten")[int(np.argmax(row["probabilities"]))] for row in rows)
    truth = [row.split("\t")[1] for row in (ROTTEN / "dev.tsv").read_text().splitlines()[1:]]
    labels = np.array([("fresh", "rotten").index(label) for label in truth])
    expected = metrics.classification_metrics(labels, np.array([r["probabilities"] for r in rows]), 2)
    results = json.loads((model_dir / "eval_results.json").read_text())
    for name in ("accuracy", "macro_f1", "mcc"):
        assert results[name] == pytest.approx(expected[name], abs=1e-9)
        assert summary["test"][name] == pytest.approx(expected[name], abs=1e-9)


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_eval_metrics_go_to_tensorboard_at_every_eval(classifier):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model_dir, _ = classifier
    # TensorBoard's own reader: the events are scalars it shows (trainer/runtime/event_records.py writes them)
    events = EventAccumulator(str(model_dir / "tensorboard" / "eval"), size_guidance={"scalars": 0})
    events.Reload()
    for name in ("accuracy", "macro_f1", "mcc", "loss"):
        assert [event.step for event in events.Scalars(name)] == [50, 100]


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_truncated_examples_are_counted_in_the_summary(classifier):
    _, summary = classifier
    examples = sequence_examples.read_text_examples(str(ROTTEN / "dev.tsv"))
    from trainer.serving.text_encoder import XLNetTextEncoder

    directory = ModelDirectory(str(classifier[0]))
    encoder = XLNetTextEncoder(directory.sp_model_proto, directory.special_ids, 48, uncased=False)
    assert summary["truncated"]["eval"] == sequence_examples.count_truncated(examples, encoder) > 0


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_init_checkpoint_starts_from_the_pretrained_network(classifier, tmp_path):
    source, _ = classifier
    parser = __import__("argparse").ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(finetune_args(tmp_path / "out", "unused", "train_steps=2")[1:]
                             + ["--init-checkpoint", str(source)])
    args.vocab = None
    controller = build_finetuning(finetuning_run(args))
    latest = tf.train.latest_checkpoint(str(source / "checkpoints"))
    key = next(name for name, _ in tf.train.list_variables(latest) if name.startswith("model/word_embedding"))
    np.testing.assert_array_equal(controller.network.word_embedding.embeddings.numpy(),
                                  tf.train.load_checkpoint(latest).get_tensor(key))
    assert int(controller.step.numpy()) == 0
    assert (tmp_path / "out" / "spiece.model").read_bytes() == (source / "spiece.model").read_bytes()


def test_layer_decay_gives_lower_blocks_smaller_learning_rates(spm_model, tmp_path):
    parser = __import__("argparse").ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(finetune_args(tmp_path / "decay", spm_model, "train_steps=2", "layer_decay_rate=0.5",
                                           "n_layer=3")[1:])
    controller = build_finetuning(finetuning_run(args))
    factors = dict(zip((id(v) for v in controller.variables), controller.optimizer.learning_rate_multipliers))
    network = controller.network
    for layer, block in enumerate(network.blocks):
        assert {factors[id(v)] for v in block.trainable_variables} == {0.5 ** (2 - layer)}
    assert factors[id(network.word_embedding.embeddings)] == 1.0
    assert factors[id(controller.task.head.logits_proj.kernel)] == 1.0
    assert id(network.mask_emb) not in factors and id(network.lm_bias) not in factors  # unused by the head


# ---------------------------------------------------------------------------------- resume
@pytest.mark.slow  # 40 s; the same controller's exact resume is a fast test in tests/trainer/tasks/test_pretraining.py, and
# the resumed order's tail is test_the_order_resumed_at_any_position_is_the_tail_of_the_same_order
def test_sigkill_then_restart_gives_the_same_per_step_losses(spm_model, tmp_path):
    settings = ("train_steps=12", "checkpoint_every=4", "eval_every=0")
    expected, resumed, killed = straight_and_resumed_losses(lambda out: finetune_args(out, spm_model, *settings),
                                                            tmp_path)
    assert sorted(resumed) == list(range(1, 13))
    np.testing.assert_allclose([resumed[s] for s in range(1, 13)], [expected[s] for s in range(1, 13)], rtol=1e-5)
    # each step logged once: the steps the killed run logged after its last checkpoint were dropped
    assert [row["step"] for row in killed.step_rows()] == list(range(1, 13))


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_resuming_with_another_task_is_refused(classifier, spm_model, capsys):
    model_dir, _ = classifier
    code = xlnet_cli.main(finetune_args(model_dir, spm_model, task="regression",
                                        train=ROTTEN / "train.tsv", eval=ROTTEN / "dev.tsv"))
    assert code == 2
    assert "holds a classification model" in capsys.readouterr().err


# ------------------------------------------------------------------- regression, multiple choice
def test_regression_reports_pearson_and_spearman(spm_model, tmp_path, capsys):
    texts = dev_sentences(120)
    rows = [{"text": text, "label": float(len(text.split()))} for text in texts]  # a real, learnable target
    train, dev = write_lines(tmp_path / "train.jsonl", rows[:96]), write_lines(tmp_path / "dev.jsonl", rows[96:])
    code = xlnet_cli.main(finetune_args(tmp_path / "m", spm_model, "train_steps=4", "learning_rate=1e-4",
                                        task="regression", train=train, eval=dev))
    assert code == 0
    results = json.loads((tmp_path / "m" / "eval_results.json").read_text())
    assert set(results) >= {"pearson", "spearman", "loss"} and -1 <= results["pearson"] <= 1
    assert ModelDirectory(str(tmp_path / "m")).labels is None
    assert "accuracy" not in json.loads((tmp_path / "m" / ModelDirectory.STEP_LOG).read_text().splitlines()[0])


def test_multiple_choice_scores_each_question_over_its_options(spm_model, tmp_path):
    texts = dev_sentences(64)
    rows = [{"context": texts[i], "question": "The review above is _.", "options": ["fresh", "rotten", "mixed"],
             "label": i % 3} for i in range(len(texts))]
    train, dev = write_lines(tmp_path / "train.jsonl", rows[:48]), write_lines(tmp_path / "dev.jsonl", rows[48:])
    code = xlnet_cli.main(finetune_args(tmp_path / "m", spm_model, "train_steps=2", "train_batch_size=4",
                                        task="multiple-choice", train=train, eval=dev,
                                        extra=["--test", str(dev)]))
    assert code == 0
    predictions = [json.loads(line) for line in (tmp_path / "m" / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 16 and all(len(row["probabilities"]) == 3 for row in predictions)
    assert all(row["label"] in (0, 1, 2) for row in predictions)
    results = json.loads((tmp_path / "m" / "eval_results.json").read_text())
    expected = np.mean([row["label"] == rows[48 + i]["label"] for i, row in enumerate(predictions)])
    assert results["accuracy"] == pytest.approx(expected)


# ------------------------------------------------------------------------------- bad input
def test_an_eval_label_unknown_to_training_names_file_and_line(spm_model, tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabel\nA fine film.\tfresh\nNot my thing.\tmeh\n", encoding="utf-8")
    assert xlnet_cli.main(finetune_args(tmp_path / "m", spm_model, eval=dev)) == 2
    assert f"{dev}:3: label 'meh' is not one of the training labels" in capsys.readouterr().err


def test_a_glob_without_match_is_named(spm_model, tmp_path, capsys):
    assert xlnet_cli.main(finetune_args(tmp_path / "m", spm_model, train=tmp_path / "none-*.tsv")) == 2
    assert "none-*.tsv: no file matches" in capsys.readouterr().err


def test_eval_pairs_for_a_single_text_model_are_refused(spm_model, tmp_path, capsys):
    dev = write_lines(tmp_path / "dev.jsonl", [{"text": "Good.", "text_b": "Very.", "label": "fresh"}])
    assert xlnet_cli.main(finetune_args(tmp_path / "m", spm_model, eval=dev)) == 2
    assert "has a second text, unlike the training file" in capsys.readouterr().err


def test_without_init_checkpoint_a_vocabulary_is_required(tmp_path, capsys):
    args = finetune_args(tmp_path / "m", "x")
    args.remove("--vocab"), args.remove("x")
    assert xlnet_cli.main(args) == 2
    assert "--vocab is required without --init-checkpoint" in capsys.readouterr().err


def test_an_init_checkpoint_without_checkpoints_is_named(tmp_path, spm_model, capsys):
    (tmp_path / "empty").mkdir()
    assert xlnet_cli.main(finetune_args(tmp_path / "m", spm_model, extra=["--init-checkpoint",
                                                                          str(tmp_path / "empty")])) == 2
    assert "--init-checkpoint" in capsys.readouterr().err


def test_two_mirrored_replicas_compute_the_gradients_of_one_device(spm_model, tmp_path, mirrored_strategy):
    parser = __import__("argparse").ArgumentParser()
    add_arguments(parser)
    results = {}
    for name, strategy in (("cpu", tf.distribute.OneDeviceStrategy("/cpu:0")), ("mirrored", mirrored_strategy)):
        args = parser.parse_args(finetune_args(tmp_path / name, spm_model, "train_steps=2", "dropout=0",
                                               "dropatt=0", "train_batch_size=8")[1:])
        controller = build_finetuning(finetuning_run(args), strategy=strategy)
        assert controller.strategy.num_replicas_in_sync == (2 if name == "mirrored" else 1)
        results[name] = controller.gradients(iter(controller.train_dataset()))
    (grads_one, loss_one), (grads_two, loss_two) = results["cpu"], results["mirrored"]
    np.testing.assert_allclose(loss_two, loss_one, rtol=1e-5)
    for a, b in zip(grads_one, grads_two):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-7)


@pytest.mark.xdist_group("classifier")  # its module fixture (a 100-step finetune) built once
def test_finetuning_into_a_pretrained_model_directory_is_refused(classifier, spm_model, tmp_path, capsys):
    model_dir, _ = classifier
    pretrained = tmp_path / "pretrained"
    import shutil

    shutil.copytree(model_dir, pretrained)
    (pretrained / ModelDirectory.FINETUNE_CONFIG).unlink()
    assert xlnet_cli.main(finetune_args(pretrained, spm_model)) == 2
    assert "pass it as --init-checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_two_worker_processes_finetune_in_lockstep_and_the_chief_writes_the_results(spm_model, tmp_path):
    model_dir = tmp_path / "model"
    processes = start_as_two_workers(["-m", "xlnet_cli"] + finetune_args(
        model_dir, spm_model, "train_steps=4", "checkpoint_every=4", "eval_every=2", "dropout=0", "dropatt=0",
        extra=["--strategy", "multi-worker", "--test", str(ROTTEN / "dev.tsv")]))
    outputs = output_of(*processes, timeout=600)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    chief, other = (ModelDirectory(path).step_losses() for path in (model_dir, model_dir / "workers"
                                                                              / "worker-1"))
    assert sorted(chief) == [1, 2, 3, 4]
    np.testing.assert_allclose([other[s] for s in chief], [chief[s] for s in chief], rtol=1e-6)
    assert len((model_dir / "predictions.jsonl").read_text().splitlines()) == 1000
    assert json.loads((model_dir / "eval_results.json").read_text())["examples"] == 1000
    assert last_json_line(outputs[0])["eval"] == last_json_line(outputs[1])["eval"]
