"""`xlnet vocab`: train a SentencePiece unigram vocabulary with XLNet's special symbols."""
from __future__ import annotations

import argparse
import logging
import time

from pipeline.corpus import INPUT_FORMAT_HELP, INPUT_FORMATS
from pipeline.vocab import VocabConfig, train_vocab

_LOG = logging.getLogger("xlnet.vocab")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = VocabConfig(inputs=(), output_prefix="")
    parser.add_argument("--input", action="append", required=True, metavar="GLOB",
                        help="corpus files (local or gs://, plain/.gz/.bz2); repeat for several globs")
    parser.add_argument("--output", required=True, metavar="PREFIX",
                        help="writes PREFIX.model and PREFIX.vocab (e.g. out/spiece or gs://bucket/spiece)")
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size, help="pieces in the vocabulary")
    parser.add_argument("--input-sentence-size", type=int, default=defaults.input_sentence_size,
                        help="number of corpus lines sampled (seeded) for training")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="seeds the sample and SentencePiece")
    parser.add_argument("--uncased", action=argparse.BooleanOptionalAction, default=defaults.uncased,
                        help="lower-case the text (as preprocessing must then too)")
    parser.add_argument("--character-coverage", type=float, default=defaults.character_coverage,
                        help="share of characters the vocabulary covers (the rest become <unk>)")
    parser.add_argument("--num-threads", type=int, default=defaults.num_threads,
                        help="SentencePiece trainer threads (part of the config: keep it fixed for identical output)")
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default=defaults.input_format,
                        help=INPUT_FORMAT_HELP)
    parser.add_argument("--text-field", default=defaults.text_field, help="JSON-lines field or Parquet column holding the text")


def config_from_args(args: argparse.Namespace) -> VocabConfig:
    return VocabConfig(
        inputs=tuple(args.input), output_prefix=args.output, vocab_size=args.vocab_size,
        input_sentence_size=args.input_sentence_size, seed=args.seed, uncased=args.uncased,
        character_coverage=args.character_coverage, num_threads=args.num_threads,
        input_format=args.input_format, text_field=args.text_field)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    start = time.time()
    vocab = train_vocab(config_from_args(args))  # a VocabError or CorpusError is a usage error (exit 2)
    _LOG.info("wrote %s (%d pieces, sha256 %s) in %.1f s; special ids %s",
              vocab.path, vocab.vocab_size, vocab.sha256[:12], time.time() - start, vocab.special_ids.to_dict())
    return 0
