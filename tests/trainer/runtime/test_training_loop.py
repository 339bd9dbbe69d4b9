"""trainer/runtime/training_loop.py: the lines both engines log when a run resumes or finds no checkpoint,
written once (the TensorFlow and JAX engines' resume tests check them in real runs)."""
from __future__ import annotations

from trainer.runtime.training_loop import no_checkpoint_warning, resumed_line


def test_a_resume_names_its_checkpoint_its_step_and_the_steps_it_logs_again():
    assert resumed_line("m/checkpoints/ckpt-4", 4, 2) == \
        "resumed from m/checkpoints/ckpt-4 at step 4; the 2 steps logged after it will be logged again"


def test_a_resume_with_nothing_logged_after_its_checkpoint_says_only_where_it_resumed():
    assert resumed_line("m/checkpoints/8", 8, 0) == "resumed from m/checkpoints/8 at step 8"


def test_a_run_that_saved_no_checkpoint_is_named_with_the_steps_logged_again():
    assert no_checkpoint_warning("m/checkpoints", "m/train_steps.jsonl", 3) == (
        "warning: no checkpoint under m/checkpoints: starting at step 1, the 3 steps m/train_steps.jsonl holds "
        "from a run that saved none will be logged again")
