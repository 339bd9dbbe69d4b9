"""The allocator's peak memory in the step log and TensorBoard (trainer/runtime/controller.py)."""
from __future__ import annotations

import tensorflow as tf

from tfrecords.manifest import load_manifest
from trainer.configs.overrides import resolve_configs
from trainer.runtime.model_dir import ModelDirectory
from trainer.tasks.pretraining import pretraining_controller

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "eval_every=0",
         "steps_per_loop=1", "train_steps=2", "warmup_steps=1"]


def train_rows(data_dir: str, model_dir: str, batch: int, *overrides: str) -> list[dict]:
    model, train, _ = resolve_configs("tiny", None, SMALL + [f"train_batch_size={batch}", *overrides])
    controller = pretraining_controller(model.replace(vocab_size=8000), train, manifest=load_manifest(data_dir),
                                        model_dir=model_dir, strategy=tf.distribute.get_strategy(),
                                        log=lambda line: None)
    controller.train()
    return ModelDirectory(model_dir).step_rows()


def test_every_step_row_carries_the_peak_memory_of_its_window_and_it_grows_with_the_batch(tiny_data_dir, tmp_path):
    small = train_rows(tiny_data_dir, str(tmp_path / "b2"), 2)
    large = train_rows(tiny_data_dir, str(tmp_path / "b8"), 8)
    assert all(row["peak_memory_bytes"] > 0 for row in small + large)
    # the second step of each run: its window holds one step, compiled already
    assert large[1]["peak_memory_bytes"] > small[1]["peak_memory_bytes"]
    events = ModelDirectory(str(tmp_path / "b8")).scalars("train", "peak_memory_bytes")
    assert events == {row["step"]: float(row["peak_memory_bytes"]) for row in large}


def test_gradient_accumulation_holds_one_micro_step_of_activations_at_a_time(tiny_data_dir, tmp_path):
    accumulated = train_rows(tiny_data_dir, str(tmp_path / "accumulated"), 2, "accumulation_steps=4")
    small = train_rows(tiny_data_dir, str(tmp_path / "small"), 2)
    # 4 micro-steps of 2 rows peak as one micro-step of 2 does, plus the accumulator (a copy of
    # the small model's gradients): never two micro-steps' activations at once
    assert accumulated[1]["peak_memory_bytes"] < 1.25 * small[1]["peak_memory_bytes"]
