"""The profiler window (trainer/runtime/profiling.py): where loops must end so that the trace holds
steps START..END, when tracing starts and stops. A traced run: tests/trainer/runtime/test_profiled_run.py."""
from __future__ import annotations

import pytest
import tensorflow as tf

from trainer.runtime.profiling import ProfileWindow


def traced_loops(window: ProfileWindow, loops: list[tuple[int, int]]) -> list[bool]:
    """Whether each loop (last step done before it, steps it runs) ran with the profiler on."""
    traced = []
    for step, count in loops:
        window.before_loop(step)
        traced.append(window.active)
        window.after_loop(step + count)
    window.stop()
    return traced


def test_loops_end_just_before_the_window_and_at_its_last_step():
    assert ProfileWindow((5, 8), "unused").boundaries() == (4, 8)
    assert ProfileWindow(None, "unused").boundaries() == ()


def test_only_the_loops_of_the_window_are_traced(tmp_path):
    window = ProfileWindow((5, 8), str(tmp_path))
    assert traced_loops(window, [(0, 1), (1, 3), (4, 2), (6, 2), (8, 2)]) == [False, False, True, True,
                                                                                         False]


def test_a_run_resumed_inside_the_window_traces_from_its_first_loop(tmp_path):
    assert traced_loops(ProfileWindow((5, 8), str(tmp_path)), [(6, 1), (7, 1), (8, 2)]) == [True, True,
                                                                                                       False]


@pytest.mark.parametrize("window, enabled", [(None, True), ((1, 4), False), ((2, 3), True)])
def test_nothing_is_traced_without_a_window_off_the_chief_or_after_the_window(window, enabled, tmp_path):
    profile = ProfileWindow(window, str(tmp_path), enabled=enabled)
    assert traced_loops(profile, [(4, 2), (6, 2)]) == [False, False]
    assert not tf.io.gfile.exists(str(tmp_path / "plugins"))
