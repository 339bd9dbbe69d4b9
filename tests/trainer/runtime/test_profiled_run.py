"""`--set profile_steps=START:END` on a run (trainer/runtime/profiling.py through the controller):
the trace lands where TensorBoard's profile plugin reads it and holds the steps' ops, the loops are
cut at the window's ends, and the losses are those of the same run without a profiler."""
from __future__ import annotations

import glob
import os

import pytest

from trainer.runtime.model_dir import ModelDirectory

from support.bundled_data import SMALL_DATA_TRAINING
from support.processes import output_of, start

SMALL = ["n_layer=2", "d_model=64", "n_head=2", "d_head=32", "d_inner=128", "mem_len=32", "train_batch_size=4",
         "eval_batch_size=4", "steps_per_loop=4", "eval_steps=2", "warmup_steps=2", "checkpoint_every=8",
         "eval_every=0", "train_steps=8", "deterministic=true"]


def train(data_dir: str, model_dir: str, *settings: str) -> ModelDirectory:
    """`xlnet train` in a fresh process (a deterministic run fixes TensorFlow's thread pools)."""
    args = ["-m", "trainer.task", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny"]
    process = start(args + [a for item in SMALL + SMALL_DATA_TRAINING + list(settings) for a in ("--set", item)])
    (output,) = output_of(process)
    assert process.returncode == 0, output
    return ModelDirectory(model_dir)


@pytest.fixture(scope="module")
def runs(small_data_dir, tmp_path_factory) -> tuple[ModelDirectory, ModelDirectory]:
    """The same 8-step run without and with profile_steps=3:5."""
    root = tmp_path_factory.mktemp("profiled")
    return train(small_data_dir, str(root / "plain")), train(small_data_dir, str(root / "traced"),
                                                             "profile_steps=3:5")


def xplane_op_names(path: str) -> set[str]:
    """The names of every event of a trace (XSpace proto): TensorFlow ops, functions, host activity."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace.FromString(open(path, "rb").read())
    return {metadata.name for plane in space.planes for metadata in plane.event_metadata.values()}


@pytest.mark.slow  # about 30 s: two runs in child processes
def test_the_trace_is_where_tensorboards_profile_plugin_reads_it_and_holds_the_steps_ops(runs):
    plain, traced = runs
    [trace] = glob.glob(os.path.join(traced.tensorboard("train"), "plugins", "profile", "*", "*.xplane.pb"))
    names = xplane_op_names(trace)
    assert any("_train_loop_fn" in name for name in names)  # the loop of steps, traced
    assert any("MatMul" in name or "Einsum" in name for name in names)  # the step's own ops
    assert not os.path.exists(os.path.join(plain.tensorboard("train"), "plugins"))  # off by default


@pytest.mark.slow
def test_the_loops_are_cut_at_the_windows_ends_and_the_losses_are_unchanged(runs):
    plain, traced = runs
    assert sorted(plain.scalars("train", "loss")) == [1, 4, 8]
    assert sorted(traced.scalars("train", "loss")) == [1, 2, 4, 5, 8]  # steps 3-4 and 5 traced
    assert traced.step_losses() == plain.step_losses() and len(plain.step_losses()) == 8
