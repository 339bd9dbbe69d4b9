"""A pretraining run (`xlnet train`): its settings, its configurations resolved against its data
directories, and its controller built.

Resolution order: preset (or ``--init-checkpoint``'s architecture) -> ``--config`` -> ``--set``; then
the data's vocabulary size replaces the preset's (a preset's size is a default, the data's a fact),
and every manifest is checked against the result before anything is built.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, Callable, Iterable

from tfrecords.errors import UsageError
from trainer.launch.run_setup import console_log

if TYPE_CHECKING:  # imported where used: `xlnet train --help` should not load TensorFlow
    from tfrecords.manifest import Manifest
    from trainer.configs.training import TrainConfig
    from trainer.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class PretrainingRun:
    """What `xlnet train` is asked to do: one field per flag (paths local or gs://)."""

    data: tuple[str, ...]  # --data: one directory, or several for a mixture
    model_dir: str
    preset: str = "tiny"
    mixture_weights: str | None = None  # "W1,W2,...", one per --data
    eval_data: tuple[str, ...] = ()  # directories only evaluated on (their valid split)
    config_file: str | None = None
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE items
    init_checkpoint: str | None = None  # a model directory whose weights start the run
    strategy: str = "auto"
    tpu: str | None = None
    device_memory: str | None = None  # e.g. "16GiB": the fit check's memory per replica
    backend: str = "tensorflow"  # the engine: "tensorflow" (tf.distribute) or "jax"


@dataclasses.dataclass(frozen=True)
class ResolvedPretraining:
    """A run's configurations and the data they were checked against."""

    model: ModelConfig
    train: TrainConfig
    manifests: tuple[Manifest, ...]  # of --data, in order
    eval_manifests: tuple[Manifest, ...]  # of --eval-data, in order
    weights: tuple[float, ...]  # normalised mixture weights of --data
    vocab_path: str  # the SentencePiece model the run uses

    def mixture(self, run: PretrainingRun) -> list:
        """The MixtureSources of a mixture run; empty for one directory."""
        from tfrecords.mixture_schedule import MixtureSource

        if len(run.data) == 1:
            return []
        return [MixtureSource(data, manifest, weight)
                for data, manifest, weight in zip(run.data, self.manifests, self.weights)]

    def eval_sources(self, run: PretrainingRun) -> list:
        from tfrecords.mixture_schedule import MixtureSource

        return [MixtureSource(data, manifest, 1.0) for data, manifest in zip(run.eval_data, self.eval_manifests)]


def pretraining_configs(preset: str, config_file: str | None = None, overrides: Iterable[str] = (),
                        base_model: ModelConfig | None = None) -> tuple[ModelConfig, TrainConfig, set[str]]:
    """(ModelConfig, TrainConfig, model keys set explicitly): preset -> ``--config`` -> ``--set``, with
    ``base_model`` (an ``--init-checkpoint``'s architecture) in place of the preset's model. What
    `xlnet plan` and `xlnet inspect --permutation` resolve without data."""
    from trainer.configs.overrides import resolve_configs
    from trainer.launch.run_setup import read_config_file

    return resolve_configs(preset, read_config_file(config_file), list(overrides), base_model)


def with_data_vocab_size(model: ModelConfig, manifest: Manifest, explicit: set[str]) -> ModelConfig:
    """``model`` with the data's vocabulary size, unless ``--config``/``--set`` gave one: a preset's
    size is a default, the data's is a fact."""
    data_vocab_size = int(manifest.vocab["vocab_size"])
    if "vocab_size" in explicit or model.vocab_size == data_vocab_size:
        return model
    return model.replace(vocab_size=data_vocab_size)


def resolve_pretraining(run: PretrainingRun) -> ResolvedPretraining:
    """The run's configurations, with every data directory checked before anything is built: each
    named once, every shard there with its recorded size, all of them compatible, and every
    manifest agreeing with the resolved configurations. Raises UsageError or DamagedDataError."""
    from tfrecords.manifest import load_manifest, manifest_location, vocabulary_path
    from tfrecords.mixture_schedule import check_compatible, check_distinct, parse_weights
    from tfrecords.stream_layout import validate_manifest
    from tfrecords.vocabulary import file_sha256
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.storage import failures_named

    if not run.data:
        raise UsageError("--data: give at least one data directory")
    data, eval_data = list(run.data), list(run.eval_data)
    check_distinct(data)
    check_distinct(data + eval_data, "--eval-data")
    weights = parse_weights(run.mixture_weights, len(data))
    with failures_named(", ".join(data), "read", "--data"):
        manifests = [load_manifest(each) for each in data]
    with failures_named(", ".join(eval_data), "read", "--eval-data"):
        eval_manifests = [load_manifest(each) for each in eval_data]
    named = list(zip(data + eval_data, manifests + eval_manifests))
    for each, manifest in named:
        _check_shard_files(manifest, each)
    check_compatible(named)
    init = ModelDirectory(run.init_checkpoint) if run.init_checkpoint else None
    huggingface = init is not None and is_huggingface_directory(init)
    if init is not None and not huggingface:
        init.require("--init-checkpoint", (ModelDirectory.MODEL_CONFIG, ModelDirectory.VOCAB))
    if huggingface:
        base_model = huggingface_model_config(init.path)
    else:
        base_model = init.model_config if init is not None else None
    model, train, explicit = pretraining_configs(run.preset, run.config_file, run.overrides, base_model)
    if len(data) > 1:
        train = train.replace(mixture=tuple(zip(data, weights)))
    if base_model is None:
        model = with_data_vocab_size(model, manifests[0], explicit)
    vocab_path = init.join(ModelDirectory.VOCAB) if init is not None else vocabulary_path(manifests[0])
    vocab_sha256 = file_sha256(vocab_path)
    for each, manifest in named:
        validate_manifest(manifest, seq_len=train.seq_len, reuse_len=model.reuse_len, bi_data=model.bi_data,
                          num_predict=train.num_predict, vocab_size=model.vocab_size, vocab_sha256=vocab_sha256,
                          source=manifest_location(each)[0])
    return ResolvedPretraining(model, train, tuple(manifests), tuple(eval_manifests), weights, vocab_path)


def build_pretraining(run: PretrainingRun, held: contextlib.ExitStack | None = None, strategy=None,
                      log: Callable[[str], None] = console_log):
    """The pretraining Controller of ``run``: configurations resolved and checked against the data,
    the strategy made (or ``strategy``), the fit check passed, the model directory prepared. With
    ``held``, the chief first takes the model directory's run lock, released when ``held`` closes."""
    from trainer.launch.fit_check import fit_to_device
    from trainer.launch.run_setup import hold_run_lock, start_run
    from trainer.launch.utilisation import run_step_flops
    from trainer.runtime.distribution import input_pipelines, is_chief
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.tasks.pretraining import pretraining_controller

    resolved = resolve_pretraining(run)
    model, manifest = resolved.model, resolved.manifests[0]
    strategy = start_run(resolved.train, run.strategy, run.tpu, strategy)
    _check_stream_starts(resolved)
    train = fit_to_device("xlnet train", model, resolved.train, strategy, run.device_memory, log)
    check_input_layout(run, resolved.manifests, resolved.eval_manifests, model, train,
                       strategy.num_replicas_in_sync, input_pipelines(strategy))
    after_first_save = None
    if is_chief(strategy):
        model_dir = ModelDirectory(run.model_dir)
        hold_run_lock(held, model_dir, True, log)
        after_first_save = _prepare_model_dir(model_dir, model, train, manifest.special_ids, resolved.vocab_path,
                                              uncased=bool(manifest.config.get("uncased", False)), log=log)
    init = huggingface_init(run)
    return pretraining_controller(model, train, manifest=manifest, model_dir=run.model_dir, strategy=strategy,
                                  init_checkpoint=None if init else run.init_checkpoint, init_weights=init,
                                  log=log, after_first_save=after_first_save,
                                  mixture=resolved.mixture(run), eval_sources=resolved.eval_sources(run),
                                  step_flops=run_step_flops(model, train, strategy))


def is_huggingface_directory(directory) -> bool:
    """Whether a model directory given as --init-checkpoint is a Hugging Face one (config.json and
    model.safetensors, spiece.model beside them) rather than ours (model_config.json)."""
    return not directory.has(directory.MODEL_CONFIG) and directory.has("config.json")


def huggingface_model_config(path: str):
    """The ModelConfig of a Hugging Face --init-checkpoint, config.json checked against its weights'
    headers (nothing read beyond them and the attention biases: the weights are read once, into the network)."""
    from trainer.conversion.huggingface_weights import read_huggingface_config

    return read_huggingface_config(path, "--init-checkpoint")


def huggingface_init(run: PretrainingRun) -> Callable | None:
    """What gives a new run's network the weights of a Hugging Face --init-checkpoint (either engine);
    None when the run has none."""
    from trainer.conversion.huggingface_weights import load_tensors, read_huggingface_weights
    from trainer.runtime.model_dir import ModelDirectory

    if not run.init_checkpoint or not is_huggingface_directory(ModelDirectory(run.init_checkpoint)):
        return None
    path = run.init_checkpoint

    def load(network) -> str:
        load_tensors(read_huggingface_weights(path, "--init-checkpoint"), network)
        return f"{path} (Hugging Face weights)"

    return load


def build_jax_pretraining(run: PretrainingRun, held: contextlib.ExitStack | None = None,
                          log: Callable[[str], None] = console_log):
    """The JAX engine of ``run`` (trainer/runtime/jax_engine.py), as :func:`build_pretraining` builds
    the TensorFlow one: configurations resolved and checked against the data (a mixture's and
    ``--eval-data``'s directories too), the input layout checked over the devices of every process,
    the run lock taken, the model directory prepared."""
    import jax

    from trainer.launch.run_setup import hold_run_lock
    from trainer.launch.utilisation import jax_step_flops
    from trainer.runtime.jax_engine import JaxPretrainingEngine, use_compilation_cache
    from trainer.runtime.jax_processes import start_processes
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.training_loop import warn_on_stderr

    check_jax_run(run)
    resolved = resolve_pretraining(run)
    model, train, manifest = resolved.model, resolved.train, resolved.manifests[0]
    check_jax_settings(train)
    processes = start_processes()  # before JAX starts its devices: a run of several processes joins here
    use_compilation_cache()  # before the first compilation (the MFU peak's timed matmul is one)
    # each process reads its devices' rows; each evaluates the whole eval batch (one replica, one pipeline)
    check_input_layout(run, resolved.manifests, resolved.eval_manifests, model, train, jax.device_count(),
                       processes, evaluated_over=(1, 1))
    model_dir, after_first_save = ModelDirectory(run.model_dir), None
    if jax.process_index() == 0:  # the chief writes the model directory; the others wait in the engine's set-up
        hold_run_lock(held, model_dir, True, log)
        after_first_save = _prepare_model_dir(model_dir, model, train, manifest.special_ids, resolved.vocab_path,
                                              uncased=bool(manifest.config.get("uncased", False)), log=log)
    return JaxPretrainingEngine(model, train, manifest=manifest, model_dir=run.model_dir,
                                mixture=resolved.mixture(run), eval_sources=resolved.eval_sources(run),
                                init_weights=jax_init_weights(run), log=log, warn=warn_on_stderr,
                                after_first_save=after_first_save, step_flops=jax_step_flops(model, train))


def check_jax_run(run: PretrainingRun) -> None:
    """The flags the JAX engine does not take, refused in one line naming the way that does."""
    if run.strategy != "auto" or run.tpu:
        raise UsageError("--strategy and --tpu are the TensorFlow engine's (tf.distribute); --backend jax "
                         "trains on every local device (keras.distribution's DataParallel)")
    if run.init_checkpoint:
        from trainer.runtime.model_dir import ModelDirectory
        from trainer.runtime.restore import is_orbax_step

        init = ModelDirectory(run.init_checkpoint)
        if init.exists() and not is_huggingface_directory(init):
            newest = init.newest_checkpoint()
            if newest is None:
                raise UsageError(f"--init-checkpoint {init.path} holds no checkpoint under checkpoints/ (train first)")
            if not is_orbax_step(newest) and importlib.util.find_spec("tensorflow") is None:
                raise UsageError(f"--init-checkpoint {init.path} holds the TensorFlow engine's checkpoints, which "
                                 "--backend jax reads through TensorFlow, not installed here: on a machine with "
                                 f"it, `xlnet export --model-dir {init.path} --format huggingface --output DIR`, "
                                 "then --init-checkpoint DIR")


def jax_init_weights(run: PretrainingRun) -> Callable | None:
    """What gives a new JAX run's network the weights of ``--init-checkpoint``; None without one.

    A Hugging Face directory is read as on the TensorFlow engine; a model directory the JAX engine
    trained gives its newest Orbax step; one the TensorFlow engine trained is first written as a
    Hugging Face directory by `xlnet export --format huggingface` under TensorFlow, in a child process
    (Keras runs on one backend per process), into a temporary folder read back at once: the one way
    of turning the TensorFlow engine's checkpoints into weights by name."""
    from trainer.runtime.model_dir import ModelDirectory

    loader = huggingface_init(run)
    if loader is not None or not run.init_checkpoint:
        return loader
    from trainer.runtime.restore import assign_network_weights, is_orbax_step

    init = ModelDirectory(run.init_checkpoint)
    checkpoint = init.newest_checkpoint()
    if checkpoint is not None and is_orbax_step(checkpoint):

        def load_orbax(network) -> str:
            assign_network_weights(network, checkpoint)
            return checkpoint

        return load_orbax

    def load_exported(network) -> str:
        from trainer.conversion.huggingface_weights import load_tensors, read_huggingface_weights

        with tempfile.TemporaryDirectory(prefix="xlnet-init-") as folder:
            _export_with_tensorflow(init.path, folder)
            load_tensors(read_huggingface_weights(folder, "--init-checkpoint"), network)
        return f"{checkpoint} (the TensorFlow engine's, read through a Hugging Face export)"

    return load_exported


def _export_with_tensorflow(model_dir: str, output: str) -> None:
    """`xlnet export --model-dir MODEL_DIR --format huggingface --output OUTPUT` under TensorFlow, in a
    child process; its last line, as a RestoreError, when it fails."""
    from trainer.runtime.restore import RestoreError

    command = [sys.executable, "-m", "xlnet_cli", "export", "--model-dir", model_dir, "--format", "huggingface",
               "--output", output]
    done = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": "tensorflow"}, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        raise RestoreError(f"--init-checkpoint {model_dir}: its weights could not be exported for the JAX engine "
                           f"(`xlnet export --format huggingface` exited {done.returncode}: "
                           f"{said[-1] if said else 'no message'})")


def check_jax_settings(train) -> None:
    """The settings the JAX engine does not do, refused in one line naming the way that does."""
    if train.precision == "mixed_float16":
        raise UsageError("precision mixed_float16 needs dynamic loss scaling, which --backend jax does not do; use "
                         "mixed_bfloat16 (or float32), or --backend tensorflow")


def _check_shard_files(manifest, data: str) -> None:
    """Every shard the manifest lists is there with its recorded size, before anything is built: a
    truncated or missing shard would otherwise surface only when the reader reaches it, hours in.
    Raises DamagedDataError; no record is read (`xlnet inspect --verify` reads them all)."""
    from tfrecords.verification import check_shard_files

    if not check_shard_files(manifest):
        print(f"xlnet train: note: {data}'s manifest records no shard sizes (written before they were "
              f"recorded): only checked that every shard exists; `xlnet inspect {data} --verify` checks every "
              "record", file=sys.stderr, flush=True)


def _check_stream_starts(resolved: ResolvedPretraining) -> None:
    """Every shard holds the records its manifest lists, and the first record of every stream is what
    the manifest says (seq_len, reuse_len, stream layout), before the model directory is written: a
    manifest that does not describe its records would otherwise fail in the reader's parsing, or end a
    stream early, mid-run. Raises DamagedDataError. Reads one record per stream with TensorFlow, so it
    runs after start_run (which must configure TensorFlow before its first op)."""
    from tfrecords.verification import check_stream_starts

    for manifest in resolved.manifests + resolved.eval_manifests:
        check_stream_starts(manifest)


def check_input_layout(run: PretrainingRun, manifests, eval_manifests, model, train, replicas: int, pipelines: int,
                       evaluated_over: tuple[int, int] | None = None) -> None:
    """The rule of shards, streams and hosts (tfrecords/input_layout.py) at start-up, after the fit
    check settled the micro-batch and before the model directory is written: the train split of
    ``--data`` (the streams of all its directories, for a mixture) must give every forward row of
    ``train_batch_size`` a stream of its own over the ``replicas`` and input ``pipelines`` (the
    strategy's, or the JAX engine's devices and processes), and so must each valid split evaluated
    (``eval_every`` > 0) for ``eval_batch_size``, over ``evaluated_over`` (replicas, pipelines) when
    the evaluation reads over others. Otherwise the readers refuse the batch only when they are
    built, as a traceback on every worker, and an evaluation's only at the first evaluation, hours
    in. Raises InputLayoutError (exit status 2)."""
    from tfrecords.input_layout import BatchLayout, check_layout

    def layout(batch: int, field: str, over: tuple[int, int] = (replicas, pipelines)) -> BatchLayout:
        return BatchLayout(batch, *over, model.bi_data, field)

    data = ", ".join(run.data)
    where = f"--data {data}'s train split" if len(run.data) == 1 else f"the mixture of --data {data} (train splits)"
    check_layout(layout(train.train_batch_size, "train.train_batch_size"), list(manifests), "train", where)
    eval_layout = layout(train.eval_batch_size, "train.eval_batch_size", evaluated_over or (replicas, pipelines))
    eval_layout.per_replica()  # the evaluation memory is sized at build time, evaluated or not
    if train.eval_every == 0:
        return
    for name, manifest in zip(run.data + run.eval_data, tuple(manifests) + tuple(eval_manifests)):
        check_layout(eval_layout, [manifest], "valid", f"{name}'s valid split (evaluated every {train.eval_every} "
                     "steps; train.eval_every=0 turns evaluation off)")


def _prepare_model_dir(model_dir, model, train, special_ids: dict, vocab_path: str, uncased: bool,
                       log: Callable[[str], None]):
    """Writes the resolved configs, spiece.model and special_ids.json into the model directory.

    An existing model directory must hold the same architecture: resuming with another one
    would silently restore mismatched weights. Changed training settings are allowed and logged;
    train_config.json then changes only once the run has saved a checkpoint with them (a run that
    fails before leaves the settings of its checkpoints): the returned function, for the controller.
    """
    from trainer.launch.run_setup import settings_replacement

    model_dir.check_same_model(model)
    _check_same_mixture(model_dir, train)
    model_dir.write_model_files(model, special_ids, vocab_path, uncased=uncased)
    return settings_replacement(model_dir, model_dir.TRAIN_CONFIG, train, log)


def _check_same_mixture(model_dir, train) -> None:
    """Refuses to resume a run on another mixture: the reader replays the saved mixture's schedule to
    find where each row stopped, so other directories or weights would read other batches."""
    if not model_dir.has(model_dir.TRAIN_CONFIG):
        return
    from trainer.runtime.storage import read_json

    saved_mixture = read_json(model_dir.join(model_dir.TRAIN_CONFIG)).get("mixture", ())
    saved = tuple((str(name), float(weight)) for name, weight in saved_mixture)
    if saved == train.mixture:
        return

    def shown(mixture) -> str:
        return ", ".join(f"{name} ({weight:.4g})" for name, weight in mixture) or "one --data directory"

    raise UsageError(f"{model_dir.join(model_dir.TRAIN_CONFIG)} trained on {shown(saved)}; this command gives "
                     f"{shown(train.mixture)}. A resumed run must read the same mixture (same --data directories "
                     "in the same order, same --mixture-weights); to train on another one, start a new model "
                     "directory with --init-checkpoint")
