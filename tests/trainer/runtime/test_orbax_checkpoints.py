"""trainer/runtime/orbax_checkpoints.py: the JAX engine's checkpoints (Orbax CheckpointManager) keep the
step's state and the reader's position, publish atomically, keep the newest N, and set a damaged
checkpoint aside for the one before it, as docs/reliability.md promises for TensorFlow's."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")
import jax.numpy as jnp  # noqa: E402

from support.bundled_data import REPO  # noqa: E402
from tfrecords.errors import UsageError  # noqa: E402
from trainer.runtime.jax_step import StepState  # noqa: E402
from trainer.runtime.orbax_checkpoints import OrbaxCheckpoints, read_network_weights  # noqa: E402
from trainer.runtime.training_stops import UnreadableCheckpointError  # noqa: E402


def state_of(step: int, mems: bool = True) -> StepState:
    """A StepState whose every array says which step wrote it."""
    return StepState(trainable=[jnp.full((4, 3), float(step)), jnp.arange(5, dtype=jnp.float32) * step],
                     non_trainable=[jnp.array([step, 7], dtype=jnp.uint32)],
                     optimizer=[jnp.full((4, 3), step / 10), jnp.array(step, dtype=jnp.int32)],
                     mems=[jnp.full((2, 6, 3), -float(step))] if mems else None)


def same(a: StepState, b: StepState) -> bool:
    return jax.tree.structure(a) == jax.tree.structure(b) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) and x.dtype == y.dtype
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def save_steps(directory: str, steps, keep: int = 3, asynchronous: bool = True) -> None:
    with OrbaxCheckpoints(directory, keep=keep, asynchronous=asynchronous) as checkpoints:
        for step in steps:
            checkpoints.save(step, state_of(step), {"records": 10 * step, "step": step})
        checkpoints.wait()


def damage(directory: str, step: int) -> None:
    """Flips a byte in the middle of the largest data file of the checkpoint of ``step``."""
    files = [f for f in glob.glob(os.path.join(directory, str(step), "state", "d", "*")) if os.path.isfile(f)]
    target = max(files, key=os.path.getsize)
    data = bytearray(open(target, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(target, "wb").write(bytes(data))


def test_a_restored_checkpoint_is_the_saved_state_and_position(tmp_path):
    save_steps(str(tmp_path), [5])
    with OrbaxCheckpoints(str(tmp_path), keep=3) as checkpoints:
        restored = checkpoints.restore_latest(state_of(0))
    assert restored.step == 5 and restored.position == {"records": 50, "step": 5}
    assert same(restored.state, state_of(5))


def test_a_state_without_memory_round_trips(tmp_path):
    with OrbaxCheckpoints(str(tmp_path), keep=1) as checkpoints:
        checkpoints.save(2, state_of(2, mems=False), {"step": 2})
        checkpoints.wait()
        restored = checkpoints.restore_latest(state_of(0, mems=False))
    assert restored.state.mems is None and same(restored.state, state_of(2, mems=False))


def test_a_relative_directory_saves_restores_and_gives_the_network_weights(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --model-dir, as `xlnet train --model-dir models/jax` gives
    save_steps(os.path.join("model", "checkpoints"), [2, 4])
    assert sorted(os.listdir(tmp_path / "model" / "checkpoints")) == ["2", "4"]
    with OrbaxCheckpoints(os.path.join("model", "checkpoints"), keep=3) as checkpoints:
        restored = checkpoints.restore_latest(state_of(0))
    assert restored.step == 4 and same(restored.state, state_of(4))
    weights = read_network_weights(os.path.join("model", "checkpoints"), 4)
    assert [w.tolist() for w in weights] == [np.asarray(w).tolist() for w in state_of(4).trainable]


def test_an_empty_directory_restores_nothing(tmp_path):
    with OrbaxCheckpoints(str(tmp_path / "checkpoints"), keep=2) as checkpoints:
        assert checkpoints.restore_latest(state_of(0)) is None and checkpoints.steps() == []


def test_the_newest_keep_checkpoints_stay(tmp_path):
    save_steps(str(tmp_path), [1, 2, 3, 4], keep=2)
    assert OrbaxCheckpoints(str(tmp_path), keep=2).steps() == [3, 4]
    assert sorted(os.listdir(tmp_path)) == ["3", "4"]


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_one_before_restored(tmp_path):
    save_steps(str(tmp_path), [1, 2])
    damage(str(tmp_path), 2)
    warnings = []
    with OrbaxCheckpoints(str(tmp_path), keep=3, warn=warnings.append) as checkpoints:
        restored = checkpoints.restore_latest(state_of(0))
        assert checkpoints.steps() == [1]
    assert restored.step == 1 and same(restored.state, state_of(1))
    assert os.path.isdir(tmp_path / "damaged" / "2") and not os.path.exists(tmp_path / "2")
    assert warnings[0].startswith(f"warning: checkpoint {tmp_path}/2 cannot be read (")
    assert warnings[0].endswith(f"moved it to {tmp_path}/damaged/2") and len(warnings) == 2
    assert warnings[1] == "warning: resuming from step 1 instead of step 2"


def test_a_checkpoint_missing_its_position_is_damaged(tmp_path):
    save_steps(str(tmp_path), [1, 2])
    os.remove(tmp_path / "2" / "position" / "metadata")
    with OrbaxCheckpoints(str(tmp_path), keep=3, warn=lambda line: None) as checkpoints:
        assert checkpoints.restore_latest(state_of(0)).step == 1


def test_when_no_checkpoint_reads_the_run_stops_naming_where_they_went(tmp_path):
    save_steps(str(tmp_path), [1])
    damage(str(tmp_path), 1)
    with OrbaxCheckpoints(str(tmp_path), keep=3, warn=lambda line: None) as checkpoints:
        with pytest.raises(UnreadableCheckpointError) as stopped:
            checkpoints.restore_latest(state_of(0))
    assert str(stopped.value) == (f"no checkpoint under {tmp_path} can be read: steps 1 were moved to "
                                  f"{tmp_path}/damaged; start again in a new --model-dir or put a readable "
                                  "checkpoint back")


def test_a_checkpoint_of_another_shape_is_a_usage_error_and_is_not_moved(tmp_path):
    save_steps(str(tmp_path), [1])
    other = state_of(0)._replace(trainable=[jnp.zeros((8, 3)), jnp.zeros(5)])
    with OrbaxCheckpoints(str(tmp_path), keep=3) as checkpoints:
        with pytest.raises(UsageError, match=r"holds state\.trainable\[0\] of shape \(4, 3\) float32, the model "
                                             r"being built has \(8, 3\) float32: it was written for another model"):
            checkpoints.restore_latest(other)
    assert os.path.isdir(tmp_path / "1") and not os.path.exists(tmp_path / "damaged")


def test_a_set_aside_step_saved_again_is_kept_beside_the_first(tmp_path):
    save_steps(str(tmp_path), [1])
    for _ in range(2):
        save_steps(str(tmp_path), [2])
        damage(str(tmp_path), 2)
        with OrbaxCheckpoints(str(tmp_path), keep=3, warn=lambda line: None) as checkpoints:
            assert checkpoints.restore_latest(state_of(0)).step == 1
    assert sorted(os.listdir(tmp_path / "damaged")) == ["2", "2.1"]


KILLED_WRITER = """
import os, sys, time
sys.path.insert(0, {tests!r})
import jax.numpy as jnp
from trainer.runtime.orbax_checkpoints import OrbaxCheckpoints
from trainer.runtime.jax_step import StepState

big = StepState([jnp.ones((4096, 4096))] * 4, [], [], None)  # 256 MB: a write that takes a while
checkpoints = OrbaxCheckpoints(sys.argv[1], keep=3)
checkpoints.save(1, big, {{"step": 1}})
checkpoints.wait()
checkpoints.save(2, big, {{"step": 2}})
print("writing", flush=True)
time.sleep(600)
"""


def collected_unasked(coroutine) -> None:
    """Runs ``coroutine`` as a task and lets it be collected without asking for its error, as Orbax leaves
    the other tasks of a gather whose first error it raised: asyncio then logs "Task exception was never
    retrieved" with the error's traceback."""
    import asyncio
    import gc

    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    loop.run_until_complete(asyncio.wait([task]))
    loop.close()
    del task
    gc.collect()


def test_the_unasked_errors_of_orbaxs_tasks_print_nothing_even_after_close_and_other_tasks_errors_still_do(
        tmp_path, caplog):
    from orbax.checkpoint import serialization

    with OrbaxCheckpoints(str(tmp_path / "model"), keep=1):
        pass  # a failed gather's tasks are often collected after the checkpoints are closed
    (tmp_path / "a_file").write_text("")
    collected_unasked(serialization.async_serialize(  # an array write Orbax cannot do: its error is Orbax's
        jnp.zeros(3), {"driver": "zarr", "kvstore": {"driver": "file", "path": str(tmp_path / "a_file" / "x")}}))
    assert not [record for record in caplog.records if record.name == "asyncio"]

    async def our_own():
        raise ValueError("RESOURCE_EXHAUSTED: No space left on device")

    collected_unasked(our_own())
    told = [record for record in caplog.records if record.name == "asyncio"]
    assert len(told) == 1 and told[0].getMessage().startswith("Task exception was never retrieved")


def test_event_loop_closed_errors_of_late_reads_print_nothing_even_after_close_and_other_unraisables_still_do(
        tmp_path, monkeypatch):
    passed_on = []
    monkeypatch.setattr(sys, "unraisablehook", passed_on.append)
    with OrbaxCheckpoints(str(tmp_path), keep=1):
        pass  # tensorstore's late read callbacks often fail after the checkpoints are closed

    class RaisesWhenCollected:
        def __init__(self, error: BaseException):
            self.error = error

        def __del__(self):
            raise self.error

    RaisesWhenCollected(RuntimeError("Event loop is closed"))
    assert passed_on == []
    RaisesWhenCollected(RuntimeError("something else"))
    assert [str(unraisable.exc_value) for unraisable in passed_on] == ["something else"]


@pytest.mark.slow  # a 256 MB background write killed mid-way (about 20 s)
def test_a_write_killed_half_way_publishes_nothing_and_the_next_manager_removes_its_files(tmp_path):
    directory = str(tmp_path / "checkpoints")
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER.format(tests=str(REPO / "tests")), directory],
                             cwd=REPO, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        assert child.stdout.readline().strip() == "writing"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert sorted(os.listdir(directory)) == ["1", "2.orbax-checkpoint-tmp"]  # step 2 not published
    warnings = []
    with OrbaxCheckpoints(directory, keep=3, warn=warnings.append) as checkpoints:
        assert checkpoints.steps() == [1] and checkpoints.restore_latest(big_state(0.0)).step == 1
    assert sorted(os.listdir(directory)) == ["1"]
    assert warnings == [f"warning: removed 2.orbax-checkpoint-tmp under {directory}: what a checkpoint write that "
                        "did not finish left (a killed or failed run)"]


def big_state(value: float) -> StepState:
    return StepState([jnp.full((4096, 4096), value)] * 4, [], [], None)
