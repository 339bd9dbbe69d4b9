"""Chooses the tf.distribute strategy: auto, cpu, gpu, mirrored, multi-worker or tpu."""
from __future__ import annotations

import json
import logging
import os
import re

from tfrecords.errors import UsageError
from trainer.runtime.training_stops import PEER_GONE

# TensorFlow is imported in the functions that use it: STRATEGIES, the choices of --strategy, is
# read by `xlnet train --help` and `xlnet finetune --help`, which import no TensorFlow.
STRATEGIES = ("auto", "cpu", "gpu", "mirrored", "multi-worker", "tpu")

log = logging.getLogger(__name__)


def create_strategy(name: str = "auto", tpu: str | None = None) -> tf.distribute.Strategy:
    """Builds the strategy named by ``--strategy``.

    auto: a TPU when ``--tpu`` is given, multi-worker when TF_CONFIG names several workers,
    mirrored over all GPUs when there are more than one, else the default (one device).
    multi-worker reads the cluster from TF_CONFIG; tpu resolves ``--tpu`` (a TPU name, a
    grpc:// address, or 'local' on a TPU VM) through TPUClusterResolver.
    """
    import tensorflow as tf

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
    import tensorflow as tf

    if tpu:
        return "tpu"
    workers = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])
    if len(workers) > 1:
        return "multi-worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def _tpu_strategy(tpu: str | None) -> tf.distribute.Strategy:
    import tensorflow as tf

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
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return 0, 1  # one client program drives every TPU host
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return 0, 1
    workers = resolver.cluster_spec().as_dict().get("worker", [])
    if not workers:
        return 0, 1
    return int(resolver.task_id or 0), len(workers)


# A task as TensorFlow names it in a lost peer's error ("/job:worker/replica:0/task:1"); what such an
# error says is training_stops.PEER_GONE (its heartbeats: "The following tasks are unhealthy (stopped
# sending heartbeats)"; its gRPC channel: "Connection reset by peer", "Socket closed").
_TASK = re.compile(r"/job:worker/(?:replica:\d+/)?task:(\d+)")


def lost_worker(error: tf.errors.OpError, strategy: tf.distribute.Strategy) -> str | None:
    """Which worker of a multi-worker run ``error`` says is gone ("worker 1 (10.0.0.2:2222)"), as
    TF_CONFIG names it; "another worker" when the error names none of them; None when ``error``
    is not a lost peer (or the run has one worker)."""
    import tensorflow as tf

    me, count = worker_info(strategy)
    if count < 2:
        return None
    message = getattr(error, "message", "") or str(error)
    if not (isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError)) or PEER_GONE.search(message)):
        return None
    addresses = strategy.cluster_resolver.cluster_spec().as_dict().get("worker", [])
    unhealthy = message.split("unhealthy", 1)[-1]  # the tasks named after it, when TensorFlow lists them
    indices = [int(index) for index in _TASK.findall(unhealthy) or _TASK.findall(message)]
    indices += [index for index, address in enumerate(addresses) if address in message]
    others = [index for index in dict.fromkeys(indices) if index != me and index < len(addresses)]
    if not others and count == 2:
        others = [1 - me]  # of two workers, the one that is gone is the other
    if not others:
        return "another worker"
    return ", ".join(f"worker {index} ({addresses[index]})" for index in others)


def input_pipelines(strategy: tf.distribute.Strategy) -> int:
    """The input pipelines ``strategy`` runs, one per host: what its ``distribute_datasets_from_function``
    passes as ``InputContext.num_input_pipelines`` (a TPU pod's hosts, a multi-worker cluster's
    workers; 1 on one machine), known before any dataset is built."""
    import tensorflow as tf

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
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError as error:
        raise RuntimeError("train.deterministic must be applied before TensorFlow runs its first op "
                           f"(call trainer.runtime.distribution.make_deterministic() first): {error}") from error
    tf.config.experimental.enable_op_determinism()
