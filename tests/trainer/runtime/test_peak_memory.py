"""The allocator's peak memory in the step log and TensorBoard (trainer/runtime/peak_memory.py, read
by the controller per loop of steps), measured on every x86 CPU: TensorFlow keeps the CPU allocator's
statistics by default only with oneDNN on (CPUs with AVX-512); TF_ENABLE_ONEDNN_OPTS=0 gives this
machine the allocator of a CPU without it. The commands turn the statistics on before TensorFlow
starts (trainer/commands/tensorflow_startup.py), tests/conftest.py does the same for the tests."""
from __future__ import annotations

import gc
import json

import pytest
import tensorflow as tf

from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import pretraining_controller

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import output_of, start

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "eval_every=0",
         "steps_per_loop=1", "train_steps=2", "warmup_steps=1"]


def step_peak(rows: list[dict], before: int) -> int:
    """The second step's peak (its window holds one compiled step) above what was allocated before the run."""
    return rows[1]["peak_memory_bytes"] - before


def allocated() -> int:
    """Bytes allocated on the CPU now, once earlier runs' garbage is collected."""
    gc.collect()
    return tf.config.experimental.get_memory_info("CPU:0")["current"]


def train_rows(data_dir: str, model_dir: str, batch: int, *overrides: str) -> list[dict]:
    model, train, _ = resolve_configs("tiny", None, SMALL + [f"train_batch_size={batch}", *overrides])
    controller = pretraining_controller(model.replace(vocab_size=8000), train, manifest=load_manifest(data_dir),
                                        model_dir=model_dir, strategy=tf.distribute.get_strategy(),
                                        log=lambda line: None)
    controller.train()
    return ModelDirectory(model_dir).step_rows()


@pytest.fixture(scope="module")
def two_rows(tiny_data_dir, tmp_path_factory) -> tuple[list[dict], int]:
    """The step rows of a run of 2 rows a step, and what was allocated before it."""
    before = allocated()
    return train_rows(tiny_data_dir, str(tmp_path_factory.mktemp("b2")), 2), before


def test_every_step_row_carries_the_peak_memory_of_its_window_and_it_grows_with_the_batch(tiny_data_dir, two_rows,
                                                                                            tmp_path):
    small, small_before = two_rows
    before = allocated()
    large = train_rows(tiny_data_dir, str(tmp_path / "b8"), 8)
    assert all(row["peak_memory_bytes"] > 0 for row in small + large)
    assert step_peak(large, before) > step_peak(small, small_before)
    events = ModelDirectory(str(tmp_path / "b8")).scalars("train", "peak_memory_bytes")
    assert events == {row["step"]: float(row["peak_memory_bytes"]) for row in large}


@pytest.mark.slow  # about 16 s: two measured runs
def test_gradient_accumulation_holds_one_micro_step_of_activations_at_a_time(tiny_data_dir, two_rows, tmp_path):
    small, small_before = two_rows
    before = allocated()
    accumulated = train_rows(tiny_data_dir, str(tmp_path / "accumulated"), 2, "accumulation_steps=4")
    # 4 micro-steps of 2 rows peak about as one micro-step of 2 does, plus the accumulator and the
    # sums (copies of the small model's gradients): measured 1.3x; with the micro-steps overlapping,
    # two micro-steps' activations were alive at once: 1.9x
    assert step_peak(accumulated, before) < 1.5 * step_peak(small, small_before)


# A CPU allocator as a CPU without AVX-512 has it: oneDNN off, and no choice of allocator inherited
# from this process (tests/conftest.py turns the statistics on for the tests' children where oneDNN is off).
WITHOUT_AVX512 = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPU_ALLOCATOR_USE_BFC": None}

PEAK_OF_A_MATMUL = """
from trainer.commands.tensorflow_startup import import_tensorflow_quietly

import_tensorflow_quietly()
import tensorflow as tf
from trainer.runtime.peak_memory import PeakMemory

peak = PeakMemory(tf.distribute.get_strategy())
peak.reset()
product = tf.random.normal([1024, 1024]) @ tf.random.normal([1024, 1024])  # three 4 MiB tensors
print(peak.peak())
"""


def test_the_commands_start_up_measures_the_peak_on_a_cpu_without_onednn():
    process = start(["-c", PEAK_OF_A_MATMUL], env=WITHOUT_AVX512)
    out = output_of(process)[0]
    assert process.returncode == 0, out
    assert int(out.split()[-1]) >= 3 * 4 * 1024 * 1024, out


ALLOCATOR_CHOSEN = """
import os
from trainer.commands.tensorflow_startup import import_tensorflow_quietly

import_tensorflow_quietly()
from tensorflow.python.util import _pywrap_util_port

print(_pywrap_util_port.IsMklEnabled(), os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"))
"""


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_the_bfc_allocator_is_asked_for_only_where_onednn_is_off(onednn):
    # oneDNN's own allocator keeps statistics and counts as the planner's CPU figures were checked
    # against; the BFC allocator counts differently (22% more on a long-document step)
    process = start(["-c", ALLOCATOR_CHOSEN], env={**WITHOUT_AVX512, "TF_ENABLE_ONEDNN_OPTS": onednn})
    out = output_of(process)[0]
    assert process.returncode == 0, out
    assert out.split()[-2:] == (["True", "None"] if onednn == "1" else ["False", "true"])


@pytest.mark.slow  # 20-35 s: an `xlnet train` process; the fast test above covers the start-up
def test_a_cpu_allocator_without_statistics_logs_a_null_peak_and_the_run_goes_on(small_data_dir, tmp_path):
    overrides = SMALL + ["train_batch_size=4", "eval_batch_size=4"] + SMALL_DATA_TRAINING
    process = start(["xlnet_cli.py", "train", "--data", small_data_dir, "--model-dir", str(tmp_path / "model"),
                     *[arg for item in overrides for arg in ("--set", item)]],
                    env={**WITHOUT_AVX512, "TF_CPU_ALLOCATOR_USE_BFC": "false"})
    out = output_of(process)[0]
    assert process.returncode == 0, out
    rows = [json.loads(line) for line in (tmp_path / "model" / ModelDirectory.STEP_LOG).read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    assert [row["peak_memory_bytes"] for row in rows] == [None, None]
    assert ModelDirectory(str(tmp_path / "model")).scalars("train", "peak_memory_bytes") == {}
