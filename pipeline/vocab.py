"""`xlnet vocab`'s SentencePiece training with XLNet's special symbols, and loading for the pipeline.

Training follows the original XLNet recipe: a unigram model with
``control_symbols=<cls>,<sep>,<pad>,<mask>,<eod>`` and
``user_defined_symbols=<eop>,.,(,),",-,–,£,€`` so that the ids come out as
``<unk>=0 <s>=1 </s>=2 <cls>=3 <sep>=4 <pad>=5 <mask>=6 <eod>=7 <eop>=8``. Nobody
hard-codes those numbers: ``tfrecords.vocabulary.SpecialIds`` reads them from the model and
refuses a model that lacks one.

Determinism: SentencePiece's own input sampler is not reproducible when fed from an
iterator, so the input sample (``input_sentence_size`` lines) is drawn here by a seeded
reservoir sampler over the corpus in file order, SentencePiece's remaining randomness is
seeded with ``sentencepiece.set_random_generator_seed``, and the model is written through
``model_writer`` so that no output path is recorded inside it. The same corpus,
settings and seed give a byte-identical ``.model`` file. Corpus lines are
normalised with ``tfrecords.text_normalization.normalize_text`` exactly as preprocessing does.
"""
from __future__ import annotations

import io
import os
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterator

import numpy as np

from pipeline.corpus import check_parquet_inputs, expand_inputs, read_documents
from tfrecords.text_normalization import normalize_text
from tfrecords.vocabulary import Vocab, VocabError, parse_vocab

CONTROL_SYMBOLS = ("<cls>", "<sep>", "<pad>", "<mask>", "<eod>")
USER_DEFINED_SYMBOLS = ("<eop>", ".", "(", ")", '"', "-", "–", "£", "€")


def load_vocab(path: str, expected_sha256: str | None = None) -> Vocab:
    """Loads a .model file (local or any Beam filesystem) and checks its special symbols
    (and its checksum, when ``expected_sha256`` is given)."""
    from apache_beam.io.filesystems import FileSystems

    try:
        with FileSystems.open(path, compression_type="uncompressed") as handle:
            proto = handle.read()
    except Exception as error:  # Beam wraps every filesystem's errors differently
        raise VocabError(f"--vocab {path!r}: cannot read SentencePiece model: {error}") from error
    return parse_vocab(proto, path, expected_sha256, source=f"--vocab {path!r}")


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
    """Normalised non-empty corpus lines, in file order (the training input). Parquet inputs that cannot give
    text are refused first, as `xlnet preprocess` refuses them (one line, exit 3)."""
    files = expand_inputs(config.inputs)
    check_parquet_inputs(files, config.input_format, config.text_field)
    for input_file in files:
        for document in read_documents(input_file.path, config.input_format, config.text_field, stats=Counter()):
            for line in document:
                text = normalize_text(line, config.uncased)
                if text:
                    yield text


def train_vocab(config: VocabConfig) -> Vocab:
    """Trains the unigram model, writes ``{output_prefix}.model`` / ``.vocab``, returns it loaded."""
    import sentencepiece as spm

    config.validate()
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
    """Writes ``data`` so that readers never see a partial file (local or any Beam filesystem)."""
    if "://" in path:  # object stores publish an object whole when it is closed
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(path, mime_type="application/octet-stream") as handle:
            handle.write(data)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    scratch = f"{path}.tmp-{os.getpid()}"
    with open(scratch, "wb") as handle:
        handle.write(data)
    os.replace(scratch, path)
