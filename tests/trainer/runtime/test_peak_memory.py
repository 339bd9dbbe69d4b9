"""The allocator's peak memory in the step log and TensorBoard (trainer/runtime/peak_memory.py, read
by the controller per loop of steps)."""
from __future__ import annotations

import gc

import pytest
import tensorflow as tf

from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import pretraining_controller

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
