"""The workers of a run resuming from the same step (trainer/runtime/resume_agreement.py). Four real
worker processes whose newest checkpoints differ are in test_multi_worker_input.py (slow)."""
from __future__ import annotations

import pytest

from trainer.runtime import checkpoint_history
from trainer.runtime.resume_agreement import (
    agreed_history,
    check_same_step,
    checkpoint_step,
    history_up_to,
    workers_steps,
)


def test_a_checkpoints_step_is_its_number():
    assert checkpoint_step("gs://b/model/checkpoints/ckpt-40") == 40
    with pytest.raises(ValueError, match="ckpt-STEP"):
        checkpoint_step("/m/checkpoints/model.ckpt")


def test_every_replica_reports_its_workers_step(mirrored_strategy):
    assert workers_steps(mirrored_strategy, 20) == [20, 20]  # two replicas of one worker


def test_one_worker_keeps_its_history_and_has_nothing_to_check(mirrored_strategy, tmp_path):
    history = checkpoint_history.History(str(tmp_path), (str(tmp_path / "ckpt-20"), str(tmp_path / "ckpt-40")))
    assert agreed_history(history, mirrored_strategy, 1, warn=print) is history
    check_same_step(mirrored_strategy, 1, 40, str(tmp_path))


def test_a_history_cut_to_a_step_lists_the_checkpoints_up_to_it_and_leaves_the_later_files(tmp_path):
    for step in (20, 40, 60):
        for suffix in (".index", ".data-00000-of-00001"):
            (tmp_path / f"ckpt-{step}{suffix}").write_bytes(b"")
    history = checkpoint_history.History(str(tmp_path), tuple(str(tmp_path / f"ckpt-{s}") for s in (20, 40, 60)))
    cut = history_up_to(history, 40)
    assert cut.prefixes == (str(tmp_path / "ckpt-20"), str(tmp_path / "ckpt-40"))
    assert checkpoint_history.read_history(str(tmp_path)).prefixes == cut.prefixes  # ckpt-60 is newer: left out
    assert (tmp_path / "ckpt-60.index").exists()
