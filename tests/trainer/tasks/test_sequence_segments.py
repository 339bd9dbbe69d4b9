"""`xlnet finetune --set max_segments=N`: texts read over N segments through the Transformer-XL memory,
in training, evaluation and predictions; resume, remat, two replicas and gs:// as for one segment."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from support.bundled_data import ROTTEN
from support.killed_runs import straight_and_resumed_losses

import xlnet_cli
from trainer.commands.finetune import add_arguments, finetuning_run
from trainer.launch.finetuning_run import build_finetuning, write_finetuning_outputs
from trainer.models.config import sequence_model_config
from trainer.models.network import build_network
from trainer.models.sequence_model import XLNetForSequenceTask
from trainer.runtime.model_dir import ModelDirectory

LENGTH = 16
# A small network; segments of 16 pieces, so that most reviews of the bundled set span two to four.
SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", f"max_seq_length={LENGTH}",
         "train_batch_size=16", "eval_batch_size=64", "steps_per_loop=2", "warmup_steps=2", "learning_rate=1e-3",
         "mem_len=32"]


def finetune_args(model_dir, vocab: str, *overrides: str, train=ROTTEN / "train.tsv", eval=ROTTEN / "dev.tsv",
                  extra=()) -> list[str]:
    args = ["finetune", "--task", "classification", "--train", str(train), "--eval", str(eval), "--vocab", vocab,
            "--preset", "tiny", "--model-dir", str(model_dir), *extra]
    for item in SMALL + list(overrides):
        args += ["--set", item]
    return args


def parsed(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(args[1:])


def step_gradients(model_dir: Path, vocab: str, *overrides: str, strategy=None):
    controller = build_finetuning(finetuning_run(parsed(finetune_args(model_dir, vocab, *overrides))),
                                  strategy=strategy)
    return controller, controller.gradients(iter(controller.train_dataset()))


@pytest.mark.slow  # 3.5 s; its parts are fast tests: the inputs (tests/trainer/inputs/), the head (tests/trainer/models/)
def test_a_step_reads_every_segment_of_its_texts(spm_model, tmp_path):
    rows = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()[:41]
    (tmp_path / "few.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    args = finetune_args(tmp_path / "m", spm_model, "max_segments=3", "train_steps=2", train=tmp_path / "few.tsv",
                         eval=tmp_path / "few.tsv")
    controller = build_finetuning(finetuning_run(parsed(args)))
    features, _ = next(iter(controller.train_dataset()))
    features = {name: controller.strategy.experimental_local_results(value)[0] for name, value in features.items()}
    assert features["input_ids"].shape == (1, 16, 3, LENGTH)  # accumulation steps, batch, segments, length
    assert features["input_mask"].numpy()[:, :, 0].any()  # some review reaches a third segment back
    assert controller.task.tokens_per_example == 3 * LENGTH
    assert (controller.network.config.mem_len, controller.network.config.reuse_len) == (32, 0)
    assert ModelDirectory(str(tmp_path / "m")).finetune_config.max_segments == 3


@pytest.mark.slow  # 15-30 s
def test_remat_full_gives_the_loss_and_gradients_of_no_remat(spm_model, tmp_path):
    results = [step_gradients(tmp_path / remat, spm_model, "max_segments=2", "train_steps=2", f"remat={remat}")[1]
               for remat in ("none", "full")]
    (grads, loss), (remat_grads, remat_loss) = results
    np.testing.assert_allclose(remat_loss, loss, rtol=1e-6)
    for grad, remat_grad in zip(grads, remat_grads):
        np.testing.assert_allclose(remat_grad, grad, rtol=1e-5, atol=1e-7)


@pytest.mark.slow  # 15-25 s
def test_two_mirrored_replicas_compute_the_gradients_of_one_device(spm_model, tmp_path, mirrored_strategy):
    settings = ("max_segments=2", "train_steps=2", "dropout=0", "dropatt=0", "train_batch_size=8")
    one = step_gradients(tmp_path / "one", spm_model, *settings, strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
    two = step_gradients(tmp_path / "two", spm_model, *settings, strategy=mirrored_strategy)
    assert two[0].strategy.num_replicas_in_sync == 2
    (grads_one, loss_one), (grads_two, loss_two) = one[1], two[1]
    np.testing.assert_allclose(loss_two, loss_one, rtol=1e-5)
    for a, b in zip(grads_one, grads_two):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-7)


@pytest.mark.slow  # 45-70 s
def test_sigkill_then_restart_gives_the_same_per_step_losses(spm_model, tmp_path):
    settings = ("max_segments=2", "train_steps=12", "checkpoint_every=4", "eval_every=0")
    expected, resumed, _ = straight_and_resumed_losses(lambda out: finetune_args(out, spm_model, *settings),
                                                       tmp_path)
    assert sorted(resumed) == list(range(1, 13))
    np.testing.assert_allclose([resumed[s] for s in range(1, 13)], [expected[s] for s in range(1, 13)], rtol=1e-5)


# --------------------------------------------------------------- a fine-tuned four-segment reader
@pytest.fixture(scope="module")
def four_segments(tmp_path_factory, spm_model):
    """A classifier fine-tuned briefly reading reviews over four segments, its memory holding the
    three segments before the last, with its outputs written (eval on 200 dev reviews, --test on 50)."""
    root = tmp_path_factory.mktemp("long")
    rows = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()
    (root / "dev.tsv").write_text("\n".join(rows[:201]) + "\n", encoding="utf-8")
    (root / "test.tsv").write_text("\n".join(rows[:1] + rows[201:251]) + "\n", encoding="utf-8")
    args = finetune_args(root / "model", spm_model, "max_segments=4", "mem_len=48", "train_steps=150",
                         "steps_per_loop=50", "eval_every=0", "checkpoint_every=150", eval=root / "dev.tsv", extra=["--test", str(root / "test.tsv")])
    run = finetuning_run(parsed(args))
    controller = build_finetuning(run)
    summary = write_finetuning_outputs(controller, run, controller.train(evaluate_at_end=True))
    return controller, summary, root


def probabilities(head, features) -> np.ndarray:
    return tf.nn.softmax(head(features, training=False), axis=-1).numpy()


@pytest.mark.slow  # 55 s with its fixture
def test_predictions_and_eval_results_are_the_four_segment_reading(four_segments):
    controller, summary, root = four_segments
    task = controller.task
    texts = [line.split("\t")[0] for line in (root / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    features = task.encoder.encode_segments(tf.constant(texts), max_segments=4)
    rows = [json.loads(line) for line in (root / "model" / ModelDirectory.PREDICTIONS).read_text().splitlines()]
    np.testing.assert_allclose([row["probabilities"] for row in rows], probabilities(task.head, features), atol=1e-5)
    results = json.loads((root / "model" / ModelDirectory.EVAL_RESULTS).read_text())
    assert results["examples"] == 200 and results["accuracy"] == summary["eval"]["accuracy"]
    eval_texts = [line.split("\t") for line in (root / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    predicted = probabilities(task.head, task.encoder.encode_segments(tf.constant([t for t, _ in eval_texts]),
                                                                      max_segments=4)).argmax(-1)
    labels = np.array([task.data.labels.index(label) for _, label in eval_texts])
    assert results["accuracy"] == pytest.approx(float(np.mean(predicted == labels)), abs=1e-9)
    assert results["truncated"]["eval"] == summary["truncated"]["eval"]


@pytest.mark.slow  # with the fixture above
def test_the_first_of_four_segments_reaches_the_prediction_only_through_the_memory(four_segments):
    controller, _, _ = four_segments
    task = controller.task
    rows = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    text = " ".join(row.split("\t")[0] for row in rows[:12])  # longer than four segments
    other = " ".join(row.split("\t")[0] for row in rows[12:24])
    features = task.encoder.encode_segments(tf.constant([text, other]), max_segments=4)
    assert features["input_mask"].numpy().all()
    changed = {name: tf.concat([value[1:, :1], value[:1, 1:]], axis=1) for name, value in features.items()}
    original = {name: value[:1] for name, value in features.items()}
    read = probabilities(task.head, original)
    assert np.abs(probabilities(task.head, changed) - read).max() > 1e-3  # measured: 0.018
    # the same weights without memory (max_segments 1: mem_len 0) read the last segment alone
    without_memory = XLNetForSequenceTask(build_network(sequence_model_config(task.network.config)),
                                          "classification", len(task.data.labels))
    without_memory.set_weights(task.head.get_weights())
    np.testing.assert_array_equal(probabilities(without_memory, changed), probabilities(without_memory, original))


@pytest.mark.slow  # 25 s
def test_a_long_document_finetune_reads_and_writes_gs(spm_model, gcs_prefix):
    rows = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()
    for name, part in (("train.tsv", rows[:161]), ("dev.tsv", rows[:1] + rows[161:241])):
        with tf.io.gfile.GFile(gcs_prefix + name, "w") as out:
            out.write("\n".join(part) + "\n")
    model_dir = gcs_prefix + "model"
    args = finetune_args(model_dir, spm_model, "max_segments=2", "train_steps=4", "eval_every=0",
                         train=gcs_prefix + "train.tsv", eval=gcs_prefix + "dev.tsv",
                         extra=["--test", gcs_prefix + "dev.tsv"])
    assert xlnet_cli.main(args) == 0
    directory = ModelDirectory(model_dir)
    assert directory.finetune_config.max_segments == 2 and directory.model_config.mem_len == 32
    with tf.io.gfile.GFile(directory.join(ModelDirectory.PREDICTIONS)) as predictions:
        assert len(predictions.read().splitlines()) == 80
    with tf.io.gfile.GFile(directory.join(ModelDirectory.EVAL_RESULTS)) as results:
        assert json.load(results)["examples"] == 80
