"""Plans (trainer/planning/plan.py): the largest micro-batch per remat mode, settings that keep
the global batch, step time from the FLOPs."""
from __future__ import annotations

import pytest

from trainer.configs.finetuning import finetune_preset
from trainer.configs.training import REMAT_MODES, train_preset
from trainer.models.config import model_preset, sequence_model_config
from trainer.planning.devices import DEVICES, GIB
from trainer.planning.flops import model_flops_per_step
from trainer.planning.plan import USABLE_FRACTION, Workload, make_plan

WORKLOADS = {
    "large pretraining": Workload(model_preset("large"), train_preset("large").replace(precision="mixed_bfloat16"),
                                  replicas=64),
    "base classification 512": Workload(sequence_model_config(model_preset("base")),
                                        finetune_preset("base").replace(max_seq_length=512)),
    "large squad": Workload(sequence_model_config(model_preset("large")),
                            finetune_preset("large").for_task("squad").replace(train_batch_size=48)),
}


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_largest_micro_batch_grows_with_each_remat_mode(name):
    plan = make_plan(WORKLOADS[name], DEVICES["v100-16gb"])
    largest = [plan.max_micro_batch[mode] for mode in REMAT_MODES]
    assert largest == sorted(largest) and largest[0] < largest[-1]


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_largest_micro_batch_is_the_last_that_fits(name):
    workload = WORKLOADS[name]
    plan = make_plan(workload, DEVICES["v100-16gb"])
    for mode, batch in plan.max_micro_batch.items():
        step = workload.batch_step
        assert workload.breakdown(batch, mode, accumulation_steps=2).total <= plan.budget_bytes
        assert workload.breakdown(batch + step, mode, accumulation_steps=2).total > plan.budget_bytes


@pytest.mark.parametrize("name", WORKLOADS)
def test_fitting_settings_keep_the_global_batch(name):
    workload = WORKLOADS[name]
    plan = make_plan(workload, DEVICES["v100-16gb"])
    for mode, choice in plan.choices.items():
        assert choice is not None
        assert choice.train_batch_size * choice.accumulation_steps == workload.global_batch
        assert choice.micro_batch * workload.replicas == choice.train_batch_size
        assert choice.micro_batch <= plan.max_micro_batch[mode]
        assert choice.micro_batch % workload.batch_step == 0
        assert choice.predicted_peak_bytes <= plan.budget_bytes


def test_the_cheapest_fitting_setting_recomputes_least():
    plan = make_plan(WORKLOADS["base classification 512"], DEVICES["v100-16gb"])
    assert not plan.fits
    assert plan.cheapest() == plan.choices["none"]


def test_a_configuration_that_fits_is_its_own_cheapest_setting():
    workload = Workload(model_preset("tiny"), train_preset("tiny"))
    plan = make_plan(workload, memory_bytes=16 * GIB)
    assert plan.fits
    choice = plan.cheapest()
    assert (choice.remat, choice.train_batch_size, choice.accumulation_steps) == ("none", 16, 1)


def test_nothing_fits_a_device_smaller_than_the_weights():
    plan = make_plan(WORKLOADS["large pretraining"], memory_bytes=2 * GIB)
    assert plan.nothing_fits and plan.cheapest() is None
    assert plan.budget_bytes == int(2 * GIB * USABLE_FRACTION)


def test_step_time_is_the_flops_over_the_peak_at_the_assumed_utilisation():
    workload = WORKLOADS["large pretraining"]
    plan = make_plan(workload, DEVICES["tpu-v4"], mfu=0.5)
    model, config = workload.model, workload.config
    flops = model_flops_per_step(model.n_layer, model.d_model, model.d_inner, config.seq_len, model.mem_len,
                                 config.num_predict, config.train_batch_size // 64, model.vocab_size)
    assert plan.step_seconds("none") == pytest.approx(flops / (275e12 * 0.5))
    assert plan.step_seconds("none") < plan.step_seconds("attention") < plan.step_seconds("full")
    assert plan.to_dict()["wall_seconds"] == pytest.approx(plan.step_seconds() * config.train_steps)


def test_fine_tuning_flops_have_no_query_stream_and_no_lm_head():
    kwargs = dict(n_layer=2, d_model=64, d_inner=128, seq_len=32, mem_len=0, batch=4, vocab=8000, bi_data=False)
    one_stream = model_flops_per_step(num_predict=0, head="sequence", **kwargs)
    # per layer: q, o on L rows and k, v on K = L rows; r on R = 2L rows; scores, values and positions; the FFN
    L, D, Di, B = 32, 64, 128, 4
    layer = 2 * B * L * D * D * 2 * 2 + 2 * 2 * L * D * D + 2 * B * L * D * (2 * L + 2 * L) + 4 * B * L * D * Di
    assert one_stream == 3.0 * 2 * layer
