"""The model directory (trainer/runtime/model_dir.py): its head files and what it reads back, the step
log and the TensorBoard scalars."""
from __future__ import annotations

import json

import pytest
import tensorflow as tf

from trainer.configs.finetuning import FinetuneConfig
from trainer.models.head_spec import HeadSpec
from trainer.runtime.model_dir import ModelDirectory, ModelDirectoryError


def test_step_losses_keep_the_last_value_of_a_step_logged_twice(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    directory.append_steps([{"step": 1, "loss": 7.5, "grad_norm": 1.0}, {"step": 2, "loss": 7.25, "grad_norm": 1.0}])
    directory.append_steps([{"step": 2, "loss": 7.0, "grad_norm": 1.0}])  # a resumed run redoes step 2
    assert [row["loss"] for row in directory.step_rows()] == [7.5, 7.25, 7.0]
    assert directory.step_losses() == {1: 7.5, 2: 7.0}


def test_reproducible_step_rows_leave_out_only_what_the_clock_and_the_allocator_measure(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    directory.append_steps([{"step": 1, "loss": 7.5, "grad_norm": 1.0, "peak_memory_bytes": 4096,
                             "model_flops_per_sec": 2.5e10, "mfu": 0.19, "mfu_peak_source": "test"}])
    assert directory.reproducible_step_rows() == [
        {"step": 1, "loss": 7.5, "grad_norm": 1.0, "mfu_peak_source": "test"}]


def test_a_directory_without_a_step_log_has_no_steps(tmp_path):
    assert ModelDirectory(str(tmp_path / "new")).step_rows() == []


def test_scalars_are_the_values_tf_summary_wrote_for_one_tag(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    writer = tf.summary.create_file_writer(directory.tensorboard("eval"))
    with writer.as_default():
        for step, value in ((50, 8.5), (100, 7.25), (150, 6.0)):
            tf.summary.scalar("loss", value, step=step)
            tf.summary.scalar("grad_norm", 1.0, step=step)
    writer.flush()
    assert directory.scalars("eval", "loss") == {50: 8.5, 100: 7.25, 150: 6.0}
    assert directory.scalars("train", "loss") == {}


@pytest.mark.parametrize("head", [HeadSpec("classification", ("no", "yes")), HeadSpec("regression"),
                                  HeadSpec("multiple-choice"), HeadSpec("squad", start_n_top=3, end_n_top=2)])
def test_head_files_written_for_an_imported_head_read_back_as_the_same_head(tmp_path, head):
    directory = ModelDirectory(str(tmp_path))
    directory.write_head_files(head)
    assert ModelDirectory(str(tmp_path)).head_spec == head
    recorded = json.loads((tmp_path / ModelDirectory.FINETUNE_CONFIG).read_text())
    assert {key: recorded[key] for key in ("task", "max_seq_length")} == {
        "task": head.task, "max_seq_length": FinetuneConfig.max_seq_length}


def test_a_pretrained_directory_has_no_head(tmp_path):
    assert ModelDirectory(str(tmp_path)).head_spec is None


def test_a_classification_directory_without_labels_names_the_missing_file(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    directory.write_finetune_files(FinetuneConfig(task="classification"), None)
    with pytest.raises(ModelDirectoryError, match="is a classification model without labels.json"):
        directory.head_spec


def test_a_file_given_as_the_model_directory_is_named_a_file_not_missing(tmp_path):
    path = tmp_path / "model.json"
    path.write_text("{}")
    with pytest.raises(ModelDirectoryError) as error:
        ModelDirectory(str(path)).require("--model-dir")
    assert str(error.value) == (f"--model-dir '{path}' is a file, not a model directory (give the directory "
                                "`xlnet train` or `xlnet import-checkpoint` wrote)")


def test_export_of_a_file_as_model_directory_says_it_is_a_file(tmp_path, capsys):
    import xlnet_cli

    path = tmp_path / "ckpt-4.index"
    path.write_bytes(b"")
    assert xlnet_cli.main(["export", "--model-dir", str(path), "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"xlnet export: error: --model-dir '{path}' is a file, not a model directory (give the directory "
        "`xlnet train` or `xlnet import-checkpoint` wrote)"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content, says", [
    (["fresh"], 'holds 1 label ["fresh"]; a classification model has at least 2'),
    ([], "holds 0 labels []; a classification model has at least 2"),
    ("fresh", 'holds "fresh", not a list of label names'),
    (["fresh", "rotten", "fresh"], "names 'fresh' more than once"),
])
def test_a_labels_file_that_cannot_name_the_classes_is_a_data_error_naming_it(tmp_path, content, says):
    from tfrecords.errors import EXIT_DATA, exit_code
    from trainer.runtime.model_dir import LabelsFileError

    (tmp_path / "labels.json").write_text(json.dumps(content))
    with pytest.raises(LabelsFileError) as error:
        ModelDirectory(str(tmp_path)).labels
    assert exit_code(error.value) == EXIT_DATA
    assert str(error.value) == (f"{tmp_path / 'labels.json'} {says}; put back what `xlnet finetune` wrote there: "
                                "the classes of the head its checkpoints hold, index = class id")


@pytest.mark.parametrize("name", [ModelDirectory.MODEL_CONFIG, ModelDirectory.FINETUNE_CONFIG])
def test_a_config_file_that_is_not_json_is_named_once(tmp_path, name):
    (tmp_path / name).write_text('{"n_layer": ')
    with pytest.raises(ValueError) as raised:
        getattr(ModelDirectory(str(tmp_path)), name.removesuffix(".json"))
    assert str(raised.value).startswith(f"{tmp_path / name} is not valid JSON: ")
    assert str(raised.value).count(name) == 1


def test_export_of_a_model_config_that_is_not_json_names_it_once(tmp_path, capsys):
    import xlnet_cli

    (tmp_path / ModelDirectory.MODEL_CONFIG).write_text('{"n_layer": ')
    (tmp_path / ModelDirectory.VOCAB).write_bytes(b"")
    (tmp_path / ModelDirectory.SPECIAL_IDS).write_text("{}")
    assert xlnet_cli.main(["export", "--model-dir", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (f"xlnet export: error: {tmp_path / ModelDirectory.MODEL_CONFIG} is not valid JSON: Expecting value: "
                   "line 1 column 13 (char 12)\n")
