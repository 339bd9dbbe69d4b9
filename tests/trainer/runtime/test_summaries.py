"""TensorBoard summaries (trainer/runtime/summaries.py): scalars written at a step read back from
the model directory; a worker other than the chief writes none."""
from __future__ import annotations

import os

from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.summaries import SummaryManager


def test_scalars_written_at_a_step_read_back_per_writer(tmp_path):
    directory = ModelDirectory(str(tmp_path))
    summaries = SummaryManager(directory)
    summaries.write("train", 2, {"loss": 7.5, "learning_rate": 0.001})
    summaries.write("train", 4, {"loss": 7.0, "learning_rate": 0.002})
    summaries.write("eval", 4, {"loss": 7.25})
    assert directory.scalars("train", "loss") == {2: 7.5, 4: 7.0}
    assert directory.scalar_tags("train") == {"loss", "learning_rate"}
    assert directory.scalars("eval", "loss") == {4: 7.25}


def test_a_disabled_manager_writes_nothing(tmp_path):
    SummaryManager(ModelDirectory(str(tmp_path)), enabled=False).write("train", 1, {"loss": 1.0})
    assert not os.path.exists(tmp_path / "tensorboard")
