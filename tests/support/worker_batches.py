"""One worker of a TF_CONFIG cluster reading pretraining's train input, as `xlnet train` builds it.

``python tests/support/worker_batches.py DATA_DIR OUT_DIR STEPS [KEY=VALUE ...]``: makes the
MultiWorkerMirroredStrategy of TF_CONFIG, the train input of ``PretrainingTask.train_dataset`` (the
tiny preset with the KEY=VALUE overrides), reads STEPS steps and saves this worker's part of each
global batch (``stream_id``, ``stream_pos``, ``input_ids`` of its replica, [STEPS, accumulation,
rows, ...]) to OUT_DIR/worker-I.npz, with the InputContext its input pipeline was given and what
``trainer.runtime.distribution.input_pipelines`` says beforehand. Used by
tests/trainer/runtime/test_multi_worker_input.py.
"""
from __future__ import annotations

import os
import sys

FEATURES = ("stream_id", "stream_pos", "input_ids")


def main(argv: list[str]) -> int:
    data, out, steps, *overrides = argv
    import numpy as np
    import tensorflow as tf

    from tfrecords.manifest import load_manifest
    from trainer.configs.overrides import resolve_configs
    from trainer.runtime.distribution import create_strategy, input_pipelines, worker_info
    from trainer.tasks.pretraining import PretrainingTask

    strategy = create_strategy("multi-worker")
    expected_pipelines = input_pipelines(strategy)  # before any dataset is built, as the start-up check asks
    contexts: list[tf.distribute.InputContext] = []
    strategy.distribute_datasets_from_function(lambda context: contexts.append(context) or tf.data.Dataset.range(1))
    model, train, _ = resolve_configs("tiny", None, list(overrides))
    iterator = iter(PretrainingTask(model, train, load_manifest(data)).train_dataset(strategy, start_step=0))
    # each step: feature -> this worker's replicas' values, [accumulation, rows, ...] each
    local = [tf.nest.map_structure(strategy.experimental_local_results, next(iterator)) for _ in range(int(steps))]
    (context,) = contexts
    index, _ = worker_info(strategy)
    arrays = {name: np.stack([np.concatenate([value.numpy() for value in step[name]], axis=1) for step in local])
              for name in FEATURES}
    np.savez(os.path.join(out, f"worker-{index}.npz"), **arrays, input_pipeline_id=context.input_pipeline_id,
             num_input_pipelines=context.num_input_pipelines, num_replicas_in_sync=context.num_replicas_in_sync,
             input_pipelines=expected_pipelines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
