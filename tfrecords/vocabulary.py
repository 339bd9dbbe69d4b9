"""The SentencePiece vocabulary as both halves see it: XLNet's special ids and word starts.

A vocabulary is a SentencePiece model proto. ``parse_vocab`` checks that it is one and that
it has every XLNet special symbol (``SpecialIds.from_processor`` reads their ids from the
model; nobody hard-codes the numbers) and records its size and SHA-256 (``vocabulary_sha256``,
the checksum a manifest records; ``is_tokenised_with`` the one check of a vocabulary against it).
Reading the bytes is each side's own business: the pipeline reads through Beam's FileSystems
(pipeline/vocab.py), the trainer through tf.io.gfile (trainer/runtime/model_dir.py,
tfrecords/reader.py's ``file_sha256``).
"""
from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from tfrecords.errors import UsageError

WORD_BOUNDARY = "\u2581"  # SentencePiece's '▁'


class VocabError(UsageError):
    """A vocabulary that cannot be used (missing file, missing special symbol, bad settings)."""


@dataclass(frozen=True)
class SpecialIds:
    """Ids of XLNet's special symbols, read from a SentencePiece model."""

    unk: int
    bos: int
    eos: int
    cls: int
    sep: int
    pad: int
    mask: int
    eod: int
    eop: int

    PIECES = {"unk": "<unk>", "bos": "<s>", "eos": "</s>", "cls": "<cls>", "sep": "<sep>",
              "pad": "<pad>", "mask": "<mask>", "eod": "<eod>", "eop": "<eop>"}

    @classmethod
    def from_processor(cls, processor, source: str = "vocabulary") -> "SpecialIds":
        """Looks every special piece up in ``processor``; VocabError lists the missing ones."""
        ids, missing = {}, []
        for name, piece in cls.PIECES.items():
            piece_id = processor.piece_to_id(piece)
            # piece_to_id returns unk's id for unknown pieces; only <unk> itself may map there.
            if piece != "<unk>" and (piece_id == processor.unk_id() or processor.id_to_piece(piece_id) != piece):
                missing.append(piece)
            ids[name] = piece_id
        if missing:
            raise VocabError(f"{source} lacks XLNet special symbol(s) {', '.join(missing)}; "
                             "train it with `xlnet vocab` (it adds them) or pass a model that has them")
        return cls(**ids)

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values: dict) -> "SpecialIds":
        return cls(**{f.name: int(values[f.name]) for f in fields(cls)})


def vocabulary_sha256(model_proto: bytes) -> str:
    """The vocabulary's checksum, as a manifest records it (``vocab.sha256``): the hex SHA-256 of
    the SentencePiece model's serialised bytes (the file's bytes)."""
    return hashlib.sha256(model_proto).hexdigest()


def file_sha256(path: str) -> str:
    """The vocabulary checksum (:func:`vocabulary_sha256`) of the SentencePiece model file at ``path``
    (local, or gs:// through tf.io.gfile)."""
    from tfrecords.manifest import read_file

    return vocabulary_sha256(read_file(path))


def is_tokenised_with(manifest_vocab: Mapping[str, Any], sha256: str) -> bool:
    """True when the records of a manifest whose ``vocab`` entry is ``manifest_vocab`` were tokenised
    with the vocabulary of checksum ``sha256``: only then do their ids mean its pieces. A manifest
    that records no checksum matches no vocabulary."""
    return manifest_vocab.get("sha256") == sha256


def is_word_start_piece(piece: str) -> bool:
    """A piece starts a word when it begins with '▁', '<' (special symbols) or punctuation."""
    if not piece:
        return False
    first = piece[0]
    return first == WORD_BOUNDARY or first == "<" or unicodedata.category(first).startswith("P")


@dataclass(frozen=True)
class Vocab:
    """A loaded SentencePiece model plus what the pipeline needs from it."""

    path: str
    model_proto: bytes
    special_ids: SpecialIds
    vocab_size: int
    sha256: str

    def processor(self):
        """A fresh SentencePieceProcessor for this model (one per worker, built in DoFn.setup)."""
        import sentencepiece as spm

        return spm.SentencePieceProcessor(model_proto=self.model_proto)

    def word_start_table(self) -> np.ndarray:
        """bool[vocab_size]: True for pieces that start a word (see is_word_start_piece)."""
        processor = self.processor()
        return np.array([is_word_start_piece(processor.id_to_piece(i)) for i in range(self.vocab_size)], dtype=bool)

    def manifest_entry(self) -> dict:
        return {"path": self.path, "sha256": self.sha256, "vocab_size": self.vocab_size}


def parse_vocab(model_proto: bytes, path: str, expected_sha256: str | None = None,
                source: str | None = None) -> Vocab:
    """A Vocab of serialised SentencePiece model bytes read from ``path``; checks the special
    symbols and, when ``expected_sha256`` is given, the checksum. Errors name ``source`` (the
    flag and path, e.g. "--vocab 'gs://b/spiece.model'"; the path alone by default)."""
    import sentencepiece as spm

    source = source or repr(path)
    digest = vocabulary_sha256(model_proto)
    if expected_sha256 is not None and digest != expected_sha256:
        raise VocabError(f"{source} changed during the run: sha256 {digest}, expected {expected_sha256}")
    processor = spm.SentencePieceProcessor()
    try:
        processor.load_from_serialized_proto(model_proto)
    except Exception as error:  # sentencepiece raises a bare RuntimeError/OSError mix
        raise VocabError(f"{source} is not a SentencePiece model: {error}") from error
    special_ids = SpecialIds.from_processor(processor, source=source)
    return Vocab(path=path, model_proto=model_proto, special_ids=special_ids,
                 vocab_size=processor.get_piece_size(), sha256=digest)
