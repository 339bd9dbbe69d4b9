"""Chooses the tf.distribute strategy: auto, cpu, gpu, mirrored, multi-worker or tpu."""
from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

from tfrecords.errors import UsageError

STRATEGIES = ("auto", "cpu", "gpu", "mirrored", "multi-worker", "tpu")

log = logging.getLogger(__name__)


def create_strategy(name: str = "auto", tpu: str | None = None) -> tf.distribute.Strategy:
    """Builds the strategy named by ``--strategy``.

    auto: a TPU when ``--tpu`` is given, multi-worker when TF_CONFIG names several workers,
    mirrored over all GPUs when there are more than one, else the default (one device).
    multi-worker reads the cluster from TF_CONFIG; tpu resolves ``--tpu`` (a TPU name, a
    grpc:// address, or 'local' on a TPU VM) through TPUClusterResolver.
    """
    if name not in STRATEGIES:
        raise UsageError(f"--strategy {name!r}: choose one of {', '.join(STRATEGIES)}")
    if name == "auto":
        name = _auto_strategy_name(tpu)
        log.info("--strategy auto chose %s", name)
    if name == "tpu":
        return _tpu_strategy(tpu)
    if name == "multi-worker":
        if not os.environ.get("TF_CONFIG"):
            raise UsageError("--strategy multi-worker needs the TF_CONFIG environment variable "
                             "(cluster: {worker: [host:port, ...]}, task: {type: worker, index: i})")
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "gpu":
        if not gpus:
            raise UsageError("--strategy gpu: TensorFlow sees no GPU on this machine")
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "cpu":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return tf.distribute.get_strategy()  # auto with one device


def _auto_strategy_name(tpu: str | None) -> str:
    if tpu:
        return "tpu"
    workers = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])
    if len(workers) > 1:
        return "multi-worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def _tpu_strategy(tpu: str | None) -> tf.distribute.Strategy:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError, RuntimeError) as error:
        raise UsageError(f"--tpu {tpu or '(none)'}: cannot reach the TPU ({error}); pass the TPU name, "
                         "a grpc:// address, or 'local' on a TPU VM") from None
    return tf.distribute.TPUStrategy(resolver)


def worker_info(strategy: tf.distribute.Strategy) -> tuple[int, int]:
    """(this worker's index, number of workers) for the strategy's cluster."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return 0, 1  # one client program drives every TPU host
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return 0, 1
    workers = resolver.cluster_spec().as_dict().get("worker", [])
    if not workers:
        return 0, 1
    return int(resolver.task_id or 0), len(workers)


def input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """The input pipelines ``strategy`` runs, one per host: what its ``distribute_datasets_from_function``
    passes as ``InputContext.num_input_pipelines`` (a TPU pod's hosts, a multi-worker cluster's
    workers; 1 on one machine), known before any dataset is built."""
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return int(strategy.extended.num_hosts)
    return worker_info(strategy)[1]


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the shared outputs (checkpoints, summaries, logs)."""
    return worker_info(strategy)[0] == 0


def make_deterministic() -> None:
    """Deterministic kernels and single-threaded CPU ops (train.deterministic).

    TensorFlow fixes its thread pools when it first runs an op, so this must come before that.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError as error:
        raise RuntimeError("train.deterministic must be applied before TensorFlow runs its first op "
                           f"(call trainer.runtime.distribution.make_deterministic() first): {error}") from error
    tf.config.experimental.enable_op_determinism()
