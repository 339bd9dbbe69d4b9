"""The fit check before `xlnet finetune` builds anything (trainer/launch/fit_check.py) counts what
a long-document run costs: the memory its segments read and the forward-only segments before the
last (max_segments N, mem_len M)."""
from __future__ import annotations

import pytest
import tensorflow as tf

from trainer.launch.finetuning_run import FinetuneSettings, finetuning_configs
from trainer.launch.fit_check import DoesNotFit, fit_to_device
from trainer.planning.plan import Workload


def configs(segments: int, *overrides: str):
    """The Base-shaped classification run at 512, batch 8, read in ``segments`` segments with a memory of 512."""
    memory = ("mem_len=512",) if segments > 1 else ()
    settings = FinetuneSettings(task="classification", preset="base", max_seq_length=512,
                                overrides=(f"max_segments={segments}", "train_batch_size=8", *memory, *overrides))
    return finetuning_configs(settings, vocab_size=32000)


def peak(model, config) -> int:
    return Workload(model, config).breakdown().total


def between() -> int:
    """A device memory whose usable share holds the one-segment run and not the eight-segment one."""
    one, eight = peak(*configs(1)), peak(*configs(8))
    assert one < eight
    return int((one + eight) / 2 / 0.95)


def test_a_run_that_fits_with_one_segment_is_refused_with_eight_and_a_memory():
    memory, lines = between(), []
    model, config = configs(1)
    assert fit_to_device("xlnet finetune", model, config, tf.distribute.get_strategy(), f"{memory}B",
                         lines.append) == config
    model, config = configs(8)
    assert model.mem_len == 512 and config.max_segments == 8
    with pytest.raises(DoesNotFit, match="the plan predicts a peak of .* per replica, more than 95% of the device's"):
        fit_to_device("xlnet finetune", model, config, tf.distribute.get_strategy(), f"{memory}B", lines.append)
    assert lines[-1].startswith("xlnet finetune: plan: 12x768, seq 512 x 8 segments with memory 512, micro-batch 8")


def test_auto_fit_chooses_settings_that_fit_the_long_document_costs():
    memory = between()
    model, config = configs(8, "auto_fit=true")
    fitted = fit_to_device("xlnet finetune", model, config, tf.distribute.get_strategy(), f"{memory}B", lambda _: None)
    assert fitted.train_batch_size * fitted.accumulation_steps == 8 and fitted.max_segments == 8
    assert (fitted.remat, fitted.train_batch_size) != ("none", 8)
    assert peak(model, fitted) <= memory * 0.95
