"""The fine-tuning configuration (trainer/configs/finetuning.py): the one home of the SQuAD settings
and of the SQuAD window rule."""
from __future__ import annotations

import subprocess
import sys

import pytest
from support.bundled_data import REPO

import xlnet_cli
from trainer.configs.finetuning import (
    MAX_SEGMENTS,
    SQUAD_MAX_SEQ_LENGTH,
    FinetuneConfig,
    finetune_preset,
    squad_length_problems,
)
from trainer.serving.answer_signature import SquadServingConfig


def test_squad_defaults_are_run_squads():
    config = FinetuneConfig(task="squad")
    assert (config.doc_stride, config.max_query_length, config.max_answer_length, config.n_best,
            config.start_n_top, config.end_n_top) == (128, 64, 30, 20, 5, 5)


@pytest.mark.parametrize("preset", ["tiny", "base", "large"])
def test_every_preset_fine_tunes_squad_at_the_originals_sequence_length(preset):
    config = finetune_preset(preset).for_task("squad")
    assert (config.task, config.max_seq_length) == ("squad", SQUAD_MAX_SEQ_LENGTH) == ("squad", 512)
    assert finetune_preset(preset).for_task("regression").max_seq_length == finetune_preset(preset).max_seq_length


def test_the_window_rule_leaves_room_for_three_specials_and_one_context_piece():
    assert squad_length_problems(68, 64) == []
    [problem] = squad_length_problems(67, 64)
    assert problem == ("max_seq_length (67) must exceed max_query_length (64) by at least 4 "
                       "(<sep>, <sep>, <cls> and one context piece)")


def test_the_configuration_refuses_windows_without_room_for_the_context():
    with pytest.raises(ValueError, match=r"max_seq_length \(64\) must exceed max_query_length \(64\)"):
        FinetuneConfig(task="squad", max_seq_length=64)
    FinetuneConfig(task="classification", max_seq_length=64)  # the rule is squad's only


def test_the_served_answer_signature_applies_the_same_rule():
    config = SquadServingConfig(max_length=67, doc_stride=8, max_query_length=64, max_answer_length=5,
                                start_n_top=2, end_n_top=2)
    assert config.problems() == squad_length_problems(67, 64)


def test_finetune_refuses_the_rule_before_reading_any_file(tmp_path, capsys):
    code = xlnet_cli.main(["finetune", "--task", "squad", "--train", str(tmp_path / "missing.json"), "--eval",
                           str(tmp_path / "missing.json"), "--vocab", str(tmp_path / "missing.model"),
                           "--model-dir", str(tmp_path / "out"), "--max-seq-length", "32",
                           "--max-query-length", "30"])
    assert code == 2
    error = capsys.readouterr().err
    assert "max_seq_length (32) must exceed max_query_length (30) by at least 4" in error
    assert "missing" not in error and not (tmp_path / "out").exists()


def test_finetune_help_shows_the_squad_defaults_of_the_configuration():
    result = subprocess.run([sys.executable, str(REPO / "xlnet_cli.py"), "finetune", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    help_text = " ".join(result.stdout.split())
    for flag, name in (("--doc-stride", "doc_stride"), ("--max-query-length", "max_query_length"),
                       ("--max-answer-length", "max_answer_length"), ("--n-best", "n_best")):
        assert f"{flag} {flag[2:].upper().replace('-', '_')} " in help_text
        assert f"(default: {getattr(FinetuneConfig, name)})" in help_text


# ------------------------------------------------------------------------------ long documents
def test_one_segment_per_text_is_the_default():
    assert FinetuneConfig().max_segments == 1
    assert all(preset.max_segments == 1 for preset in (finetune_preset(name) for name in ("tiny", "base", "large")))


def test_fewer_than_one_segment_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="max_segments must be in 1..32 \\(segments read per text; .*\\), got 0"):
        FinetuneConfig(max_segments=0)


def test_more_segments_than_the_bound_are_refused_with_the_reason():
    assert FinetuneConfig(max_segments=MAX_SEGMENTS).max_segments == MAX_SEGMENTS
    with pytest.raises(ValueError, match="max_segments must be in 1..32 \\(.*one more copy of the network in the "
                                         "step's graph and one more pass per step\\), got 1000"):
        FinetuneConfig(max_segments=1000)


def test_squad_reads_long_contexts_in_windows_not_segments():
    with pytest.raises(ValueError, match="max_segments must be 1 for task squad .* got 2"):
        FinetuneConfig(task="squad", max_segments=2)
    assert FinetuneConfig(task="multiple-choice", max_segments=2).max_segments == 2


@pytest.mark.parametrize("segments", [0, 1000])
def test_finetune_refuses_max_segments_outside_its_bound_before_reading_any_file(tmp_path, capsys, segments):
    code = xlnet_cli.main(["finetune", "--task", "classification", "--train", str(tmp_path / "missing.tsv"),
                           "--eval", str(tmp_path / "missing.tsv"), "--vocab", str(tmp_path / "missing.model"),
                           "--model-dir", str(tmp_path / "out"), "--set", f"max_segments={segments}"])
    assert code == 2
    error = capsys.readouterr().err
    assert "max_segments must be in 1..32" in error and f"--set max_segments={segments}" in error
    assert not (tmp_path / "out").exists()
