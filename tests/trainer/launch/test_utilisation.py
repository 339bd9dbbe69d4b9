"""What a run's MFU is measured with (trainer/launch/utilisation.py): the plan's model FLOPs of the
global batch, the peak of the device table or of a matmul timed on this CPU, named."""
from __future__ import annotations

import pytest
import tensorflow as tf

from trainer.configs.training import train_preset
from trainer.launch.utilisation import run_step_flops
from trainer.planning.devices import gpu_table_row
from trainer.models.config import model_preset
from trainer.planning.plan import Workload


def test_on_this_cpu_the_peak_is_a_matmul_timed_now_and_the_flops_are_the_plans():
    model, train = model_preset("tiny"), train_preset("tiny")
    flops = run_step_flops(model, train, tf.distribute.get_strategy())
    assert flops.peak_source == "measured_matmul_peak (float32, this CPU)"
    assert 1e8 < flops.peak_flops < 1e14
    assert flops.model_flops == Workload(model, train, 1).step_flops()[0]


def test_replicas_sharing_this_cpu_share_its_peak_and_the_flops_are_the_global_batchs(mirrored_strategy):
    model, train = model_preset("tiny"), train_preset("tiny")
    flops = run_step_flops(model, train, mirrored_strategy)
    # each replica projects the relative positions once for its rows: a little more than one device's
    assert flops.model_flops == 2 * Workload(model, train, 2).step_flops()[0] > Workload(model, train, 1).step_flops()[0]
    assert flops.peak_source == "measured_matmul_peak (float32, this CPU)"
    assert flops.peak_flops < 2 * run_step_flops(model, train, tf.distribute.get_strategy()).peak_flops


def test_bfloat16_runs_are_measured_against_a_bfloat16_matmul():
    flops = run_step_flops(model_preset("tiny"), train_preset("tiny").replace(precision="mixed_bfloat16"),
                           tf.distribute.get_strategy())
    assert flops.peak_source == "measured_matmul_peak (bfloat16, this CPU)"


@pytest.mark.parametrize("reported, row", [("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
                                           ("NVIDIA H100 80GB HBM3", "h100-80gb"), ("Tesla V100-SXM2-32GB", "v100-32gb"),
                                           ("NVIDIA H200", "h200-141gb"), ("NVIDIA H100 PCIe", None),
                                           ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"), ("Tesla T4", None)])
def test_a_gpu_is_found_in_the_device_table_by_the_name_tensorflow_reports(reported, row):
    found = gpu_table_row(reported)
    assert (found.name if found else None) == row


def test_the_rates_of_a_loop_are_its_model_flops_per_second_over_the_peak():
    from trainer.runtime.throughput import StepFlops

    assert StepFlops(2e9, 1e11, "test").rates(steps=10, seconds=4.0) == {"model_flops_per_sec": 5e9, "mfu": 0.05}


def test_a_loop_faster_than_a_peak_timed_low_has_an_mfu_of_1_never_more():
    # benchmarks/train_step.py printed 1.036 where a busy machine timed the matmul peak below the step's rate.
    from trainer.runtime.throughput import StepFlops, utilisation

    assert StepFlops(2e9, 1e9, "test").rates(steps=10, seconds=4.0) == {"model_flops_per_sec": 5e9, "mfu": 1.0}
    assert utilisation(5e9, 1e9) == (1.0, 5e9)  # the peak it divided by: the rate, which the device reached
    assert utilisation(5e8, 1e9) == (0.5, 1e9)
    assert utilisation(5e8, 0.0) == (0.0, 0.0)  # no peak known
