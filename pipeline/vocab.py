"""SentencePiece vocabulary with XLNet's special symbols: training, loading, special ids.

Training follows the original XLNet recipe: a unigram model with
``control_symbols=<cls>,<sep>,<pad>,<mask>,<eod>`` and
``user_defined_symbols=<eop>,.,(,),",-,–,£,€`` so that the ids come out as
``<unk>=0 <s>=1 </s>=2 <cls>=3 <sep>=4 <pad>=5 <mask>=6 <eod>=7 <eop>=8``. Nobody
hard-codes those numbers: ``SpecialIds.from_processor`` reads them from the model and
refuses a model that lacks one.

Determinism: SentencePiece's own input sampler is not reproducible when fed from an
iterator, so the input sample (``input_sentence_size`` lines) is drawn here by a seeded
reservoir sampler over the corpus in file order, SentencePiece's remaining randomness is
seeded with ``sentencepiece.set_random_generator_seed``, and the model is written through
``model_writer`` so that no output path is recorded inside it. The same corpus,
settings and seed give a byte-identical ``.model`` file. Corpus lines are
normalised with ``pipeline.normalization.normalize_text`` exactly as preprocessing does.
"""
from __future__ import annotations

import hashlib
import os
import io
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, fields
from typing import Iterator

import numpy as np

from pipeline.corpus import expand_inputs, read_documents
from pipeline.normalization import normalize_text

CONTROL_SYMBOLS = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")
USER_DEFINED_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "–", "£", "€")
WORD_BOUNDARY = "\u2581"  # SentencePiece's '▁'


class VocabError(ValueError):
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


def load_vocab(path: str, expected_sha256: str | None = None) -> Vocab:
    """Loads a .model file (local or any Beam filesystem) and checks its special symbols
    (and its checksum, when ``expected_sha256`` is given)."""
    import sentencepiece as spm
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            proto = handle.read()
    except Exception as error:
        raise VocabError(f"--vocab {path!r}: cannot read SentencePiece model: {error}") from error
    digest = hashlib.sha256(proto).hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise VocabError(f"--vocab {path!r} changed during the run: sha256 {digest}, expected {expected_sha256}")
    processor = spm.SentencePieceProcessor()
    try:
        processor.load_from_serialized_proto(proto)
    except Exception as error:
        raise VocabError(f"--vocab {path!r} is not a SentencePiece model: {error}") from error
    special_ids = SpecialIds.from_processor(processor, source=f"--vocab {path!r}")
    return Vocab(path=path, model_proto=proto, special_ids=special_ids,
                 vocab_size=processor.get_piece_size(), sha256=digest)


@dataclass(frozen=True)
class VocabConfig:
    """Settings of `xlnet vocab` (defaults follow the original XLNet recipe)."""

    inputs: tuple[str, ...]
    output_prefix: str
    vocab_size: int = 32000
    input_sentence_size: int = 1_000_000
    seed: int = 0
    uncased: bool = False
    character_coverage: float = 0.99995
    num_threads: int = 4
    input_format: str = "auto"
    text_field: str = "text"

    def validate(self) -> None:
        if not self.inputs:
            raise VocabError("--input: give at least one corpus glob")
        if self.vocab_size < len(CONTROL_SYMBOLS) + len(USER_DEFINED_SYMBOLS) + 4:
            raise VocabError(f"--vocab-size {self.vocab_size} is too small for XLNet's special symbols")
        if self.input_sentence_size < 1:
            raise VocabError("--input-sentence-size must be >= 1")
        if not 0 < self.character_coverage <= 1:
            raise VocabError("--character-coverage must be in (0, 1]")
        if self.num_threads < 1:
            raise VocabError("--num-threads must be >= 1")

    def to_dict(self) -> dict:
        return asdict(self)


def corpus_sentences(config: VocabConfig) -> Iterator[str]:
    """Normalised non-empty corpus lines, in file order (the training input)."""
    for input_file in expand_inputs(config.inputs):
        for document in read_documents(input_file.path, config.input_format, config.text_field, stats=Counter()):
            for line in document:
                text = normalize_text(line, config.uncased)
                if text:
                    yield text


def train_vocab(config: VocabConfig) -> Vocab:
    """Trains the unigram model, writes ``{output_prefix}.model`` / ``.vocab``, returns it loaded."""
    import sentencepiece as spm

    config.validate()
    os.makedirs(os.path.dirname(os.path.abspath(config.output_prefix)), exist_ok=True)
    sample = sample_sentences(corpus_sentences(config), config.input_sentence_size, config.seed)
    if not sample:
        raise VocabError(f"--input {', '.join(config.inputs)}: no text to train on (all files empty or invalid)")
    spm.set_random_generator_seed(config.seed)
    model = io.BytesIO()
    try:
        # Writing through model_writer keeps SentencePiece from recording a scratch path in the model.
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sample),
            model_writer=model,
            model_type="unigram",
            vocab_size=config.vocab_size,
            character_coverage=config.character_coverage,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            control_symbols=list(CONTROL_SYMBOLS),
            user_defined_symbols=list(USER_DEFINED_SYMBOLS),
            num_threads=config.num_threads,
            minloglevel=2,
        )
    except RuntimeError as error:
        raise VocabError(f"SentencePiece training failed: {error} "
                         "(for a small corpus, lower --vocab-size)") from error
    _write_atomically(config.output_prefix + ".model", model.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    listing = "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(processor.get_piece_size()))
    _write_atomically(config.output_prefix + ".vocab", listing.encode("utf-8"))
    return load_vocab(config.output_prefix + ".model")


def sample_sentences(sentences: Iterator[str], size: int, seed: int) -> list[str]:
    """A seeded uniform sample of ``size`` sentences (all of them when fewer), in input order."""
    rng = np.random.default_rng(seed)
    reservoir: list[tuple[int, str]] = []
    for index, sentence in enumerate(sentences):
        if index < size:
            reservoir.append((index, sentence))
            continue
        slot = int(rng.integers(index + 1))
        if slot < size:
            reservoir[slot] = (index, sentence)
    return [sentence for _, sentence in sorted(reservoir)]


def _write_atomically(path: str, data: bytes) -> None:
    scratch = f"{path}.tmp-{os.getpid()}"
    with open(scratch, "wb") as handle:
        handle.write(data)
    os.replace(scratch, path)

