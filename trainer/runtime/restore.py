"""Reading a trained model back out of a model directory: the one way export, interop export and
any other reader rebuild a directory's network and fine-tuned head.

* :func:`open_model_directory`: the directory, its model files required and its vocabulary
  checked (spiece.model, special_ids.json and model_config.json describe one vocabulary).
* :func:`checkpoint_to_read`: a given checkpoint prefix (``--checkpoint``), else the latest.
* :func:`restore_model`: the whole-sequence network and, for a fine-tuned directory, the head its
  finetune_config.json names (:class:`trainer.models.head_spec.HeadSpec`), every variable restored.
* :func:`resolve_uncased`: whether text is lower-cased, and why.

Every problem is a :class:`RestoreError` (a ModelDirectoryError) naming the directory, file,
checkpoint or flag.
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
from typing import Any, Optional

from tfrecords.vocabulary import SpecialIds, VocabError
from trainer.models.config import sequence_model_config
from trainer.models.head_spec import HeadSpec
from trainer.models.heads import build_head
from trainer.models.network import XLNetNetwork, build_network
from trainer.runtime import file_system
from trainer.runtime.model_dir import ModelDirectory, ModelDirectoryError
from trainer.runtime.storage import StorageError


class RestoreError(ModelDirectoryError):
    """A model directory or checkpoint that cannot be read back as a trained model."""


@dataclasses.dataclass(frozen=True)
class RestoredModel:
    """A model directory's trained model: ``network`` and, when fine-tuned, ``head`` (built over
    ``network``) as ``head_spec`` describes it; ``checkpoint`` is the prefix they came from."""

    network: XLNetNetwork
    head: Any
    head_spec: Optional[HeadSpec]
    checkpoint: str


def open_model_directory(model_dir: str | os.PathLike | ModelDirectory) -> ModelDirectory:
    """The model directory, with model_config.json, spiece.model and special_ids.json read (once)
    and checked to describe one vocabulary."""
    directory = model_dir if isinstance(model_dir, ModelDirectory) else ModelDirectory(model_dir)
    try:
        directory.require("--model-dir")
        check_vocabulary(directory)
    except RestoreError:
        raise
    except StorageError as error:
        raise RestoreError(str(error)) from None
    return directory


def check_vocabulary(directory: ModelDirectory) -> None:
    """spiece.model, special_ids.json and model_config.json must describe the same vocabulary."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=directory.sp_model_proto)
    where = directory.join(ModelDirectory.VOCAB)
    vocab_size = directory.model_config.vocab_size
    if processor.get_piece_size() != vocab_size:
        raise RestoreError(f"{where} has {processor.get_piece_size()} pieces but model_config.json has vocab_size "
                           f"{vocab_size}: they must describe the same vocabulary")
    try:
        from_vocab = SpecialIds.from_processor(processor, source=where).to_dict()
    except VocabError as error:
        raise RestoreError(str(error)) from error
    recorded = directory.special_ids
    differing = sorted(name for name, value in recorded.items() if from_vocab.get(name, value) != value)
    if differing:
        raise RestoreError(f"special_ids.json disagrees with {where} on {', '.join(differing)}: "
                           f"{ {name: recorded[name] for name in differing} } vs "
                           f"{ {name: from_vocab[name] for name in differing} }")


def checkpoint_to_read(directory: ModelDirectory, checkpoint: str | None = None) -> str:
    """``checkpoint`` (a prefix, --checkpoint) when given, else the latest of ``directory``: a
    TensorFlow checkpoint prefix, or for a directory the JAX engine trained its newest Orbax step
    (``checkpoints/<step>``)."""
    if checkpoint is None:
        checkpoint = directory.newest_checkpoint()
        if checkpoint is None:
            raise RestoreError(f"--model-dir {directory.path!r} has no checkpoint under checkpoints/ (train first)")
    elif not is_orbax_step(checkpoint) and not file_system.exists(checkpoint + ".index"):
        raise RestoreError(f"--checkpoint {checkpoint!r} not found (expected {checkpoint}.index)")
    return checkpoint


def restore_model(directory: ModelDirectory, checkpoint: str | None = None, whole_sequence: bool = True,
                  mem_len: int = 0) -> RestoredModel:
    """Builds ``directory``'s network and, when it is fine-tuned, its head, and restores
    ``checkpoint`` (default: the latest) into them; every variable they hold must be found.

    ``whole_sequence``: the network as serving and fine-tuning run it (no memory, no bi_data:
    ``sequence_model_config``); False keeps model_config.json as it is (the same variables).
    ``mem_len`` > 0 (with ``whole_sequence``): the network reads texts of several segments, keeping
    the last ``mem_len`` states of whole segments as memory (``sequence_model_config``)."""
    checkpoint = checkpoint_to_read(directory, checkpoint)
    try:
        spec = directory.head_spec
    except StorageError as error:
        raise RestoreError(str(error)) from None
    config = directory.model_config
    network = build_network(sequence_model_config(config, mem_len) if whole_sequence else config)
    if spec is None and is_orbax_step(checkpoint):
        assign_network_weights(network, checkpoint)
        return RestoredModel(network, None, None, checkpoint)
    if spec is None:
        _restore(checkpoint, "match model_config.json", model=network)
        return RestoredModel(network, None, None, checkpoint)
    head = build_head(spec, network)
    kind = "SQuAD model" if spec.task == "squad" else "model"
    _restore(checkpoint, f"hold the fine-tuned {kind} of {directory.path!r}", model=network, head=head)
    return RestoredModel(network, head, spec, checkpoint)


def is_orbax_step(checkpoint: str) -> bool:
    """Whether ``checkpoint`` names one of the JAX engine's Orbax checkpoints (``.../checkpoints/<step>``)."""
    return posixpath.basename(checkpoint.rstrip("/")).isdigit()


def assign_network_weights(network: XLNetNetwork, checkpoint: str) -> None:
    """Gives ``network`` the weights of the JAX engine's checkpoint ``checkpoint`` (``.../<step>``): the
    pretrainer's trainable variables, in the order the network builds them on any backend."""
    from trainer.runtime.orbax_checkpoints import read_network_weights

    directory, step = posixpath.split(checkpoint.rstrip("/"))
    weights = read_network_weights(directory, int(step))
    variables = network.trainable_variables
    shapes = [tuple(v.shape) for v in variables]
    if [tuple(w.shape) for w in weights] != shapes:
        raise RestoreError(f"checkpoint {checkpoint!r} holds {len(weights)} weights of other shapes than the "
                           f"{len(variables)} of model_config.json's network")
    for variable, value in zip(variables, weights):
        variable.assign(value)


def _restore(checkpoint: str, expectation: str, **objects) -> None:
    """Restores ``objects`` (tf.train.Checkpoint keys) from ``checkpoint``; every variable they hold
    must be found. RestoreError says why not: unreadable, or it does not ``expectation``."""
    import tensorflow as tf  # a TensorFlow checkpoint (the JAX engine's are read by assign_network_weights)

    try:
        status = tf.train.Checkpoint(**objects).restore(checkpoint)
        status.assert_existing_objects_matched()
    except (tf.errors.OpError, IndexError) as error:
        raise RestoreError(f"cannot read checkpoint {checkpoint!r}: {getattr(error, 'message', error)}") from error
    except (AssertionError, ValueError) as error:
        raise RestoreError(f"checkpoint {checkpoint!r} does not {expectation}: {error}") from error
    status.expect_partial()  # optimizer slots, step, mems and rng state are training-only


def resolve_uncased(model_dir: str | os.PathLike | ModelDirectory, flag: bool | None = None) -> tuple[bool, str]:
    """Whether input text is lower-cased, and why: the --uncased/--cased flag, else what training
    recorded in text_normalization.json, else a guess from the vocabulary."""
    if flag is not None:
        return flag, "--uncased" if flag else "--cased"
    directory = model_dir if isinstance(model_dir, ModelDirectory) else ModelDirectory(model_dir)
    try:
        recorded = directory.uncased
        if recorded is not None:
            return recorded, ModelDirectory.TEXT_NORMALIZATION
        return vocabulary_is_uncased(directory.sp_model_proto), "detected from the vocabulary"
    except RestoreError:
        raise
    except StorageError as error:
        raise RestoreError(str(error)) from None


def vocabulary_is_uncased(sp_model_proto: bytes) -> bool:
    """True when no piece of the vocabulary has an upper-case letter (it was trained on lower-cased text)."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=sp_model_proto)
    return not any(piece != piece.lower() for piece in
                   (processor.id_to_piece(i) for i in range(processor.get_piece_size())))
