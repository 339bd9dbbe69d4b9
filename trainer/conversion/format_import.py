"""A model directory (trainer/runtime/model_dir.py) from another framework's checkpoint: an original
TF1 release (trainer/conversion/tf1_checkpoint.py, with run_squad.py's head when the checkpoint
holds one) or a Hugging Face transformers directory (trainer/conversion/huggingface_format.py,
with its fine-tuning head). Every variable is checked before anything is assigned or written;
every path may be local or gs://.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator, Optional

if TYPE_CHECKING:
    from trainer.models.network import XLNetNetwork
    from trainer.models.question_answering import XLNetForQuestionAnswering


def new_model_directory(output: str):
    """The --output ModelDirectory, refused when it already holds checkpoints or is a file (a
    StorageError naming --output, before anything is read or built)."""
    from trainer.conversion.tf1_checkpoint import CheckpointImportError
    from trainer.runtime.model_dir import ModelDirectory
    from trainer.runtime.storage import check_output_directory

    check_output_directory(output)
    target = ModelDirectory(output)
    if target.latest_checkpoint() is not None:
        raise CheckpointImportError(f"--output {output}: already holds checkpoints; choose a new directory")
    return target


@contextlib.contextmanager
def writing_output(output: str) -> Iterator[None]:
    """Around an import's writes: a filesystem that refuses them (read-only, unreachable) is a
    StorageError naming --output (StorageUnreachableError), and a local --output this import
    created is removed when it fails, so nothing half-written is left."""
    import tensorflow as tf

    from trainer.runtime.storage import failures_named

    created = "://" not in output and not tf.io.gfile.exists(output)
    try:
        with failures_named(output, "written", "--output"):
            yield
    except BaseException:
        if created and tf.io.gfile.exists(output):
            tf.io.gfile.rmtree(output)
        raise


def save_checkpoint(target, **objects) -> str:
    """The one checkpoint of an imported model directory (``model=network``, plus ``head`` when
    fine-tuned); returns its prefix."""
    import tensorflow as tf

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), target.checkpoints, max_to_keep=1)
    return manager.save(checkpoint_number=0)


def load_release_weights(network: XLNetNetwork, checkpoint: str) -> Optional[XLNetForQuestionAnswering]:
    """Assigns the original checkpoint's encoder to ``network`` and, when the checkpoint holds
    run_squad.py's head, that head to a squad head built over ``network``; returns the head or None.
    Every variable, the head's included, is checked by name and shape before any is assigned."""
    from trainer.conversion.tf1_checkpoint import (
        assign_checked_weights,
        original_variable_map,
        read_original_checkpoint,
    )
    from trainer.conversion.tf1_format import build_question_answering_head, question_answering_variable_map

    source = f"checkpoint {checkpoint}"
    weights = read_original_checkpoint(checkpoint)
    head = build_question_answering_head(network, weights, source)
    targets = original_variable_map(network)
    if head is not None:
        targets.update(question_answering_variable_map(head))
    assign_checked_weights(targets, weights, source)
    return head


def check_release_layers(n_layer: int, checkpoint: str, config_path: str) -> None:
    """Before a network is built: --config's n_layer must not exceed the layers the checkpoint
    holds (its index alone is read), or building it would run for minutes before a weight is read.
    CheckpointImportError names the file and the field; a checkpoint that cannot be read is left
    to the weights' reading, which names it."""
    import re

    import tensorflow as tf

    from trainer.conversion.tf1_checkpoint import CheckpointImportError

    try:
        names = [name for name, _ in tf.train.list_variables(checkpoint)]
    except (tf.errors.OpError, ValueError):
        return
    layers = {int(match[1]) for name in names if (match := re.match(r"model/transformer/layer_(\d+)/", name))}
    if n_layer > len(layers):
        held = f"{len(layers)} layers (model/transformer/layer_0 to layer_{len(layers) - 1})" if layers else "no layer"
        raise CheckpointImportError(f"--config {config_path}: n_layer {n_layer}, but checkpoint {checkpoint} holds "
                                    f"{held}; correct n_layer")


def import_to_model_dir(checkpoint: str, config_path: str, spm_path: str, output: str, **overrides) -> str:
    """Converts the release and writes the model directory (local or gs://), a fine-tuned squad
    one when the checkpoint holds run_squad.py's head; returns the checkpoint written. Nothing is
    written before every variable is checked."""
    from tfrecords.vocabulary import parse_vocab
    from trainer.conversion.tf1_checkpoint import CheckpointImportError, read_original_config
    from trainer.conversion.tf1_format import RUN_SQUAD_HEAD
    from trainer.models.network import build_network
    from trainer.runtime.storage import read_bytes

    target = new_model_directory(output)
    config = read_original_config(config_path, **overrides)
    vocab = parse_vocab(read_bytes(spm_path), spm_path, source=f"--spm {spm_path!r}")
    if vocab.vocab_size != config.vocab_size:
        raise CheckpointImportError(f"--spm {spm_path} has {vocab.vocab_size} pieces but --config {config_path} "
                                    f"has n_token {config.vocab_size}: they are not from the same release")
    check_release_layers(config.n_layer, checkpoint, config_path)
    network = build_network(config)
    head = load_release_weights(network, checkpoint)
    with writing_output(output):
        target.write_model_files(config, vocab.special_ids.to_dict(), spm_path)
        if head is None:
            return save_checkpoint(target, model=network)
        target.write_head_files(RUN_SQUAD_HEAD)
        return save_checkpoint(target, model=network, head=head)


def import_huggingface_to_model_dir(source: str, output: str, **overrides) -> str:
    """Converts a Hugging Face XLNet directory and writes the model directory (local or gs://),
    with the fine-tuning head files when the source has a head; returns the checkpoint written.
    Every tensor is checked before anything is assigned or written."""
    import posixpath

    from trainer.conversion.huggingface_format import VOCAB, read_huggingface_directory
    from trainer.models.heads import build_head
    from trainer.models.network import build_network

    target = new_model_directory(output)
    model = read_huggingface_directory(source, **overrides)
    network = build_network(model.config)
    head = None if model.head is None else build_head(model.head, network)
    model.load_into(network, head)
    with writing_output(output):
        target.write_model_files(model.config, model.special_ids, posixpath.join(source.rstrip("/"), VOCAB),
                                 uncased=model.uncased)
        if head is None:
            return save_checkpoint(target, model=network)
        target.write_head_files(model.head)
        return save_checkpoint(target, model=network, head=head)
