"""`xlnet score --model-dir M --input FILE ...`: each document's likelihood in natural order.

Documents are read from corpus files as `xlnet preprocess` reads them (text: one sentence per
line, a blank line between documents; or JSON lines; .gz/.bz2; local or gs://), tokenised the
same way, and scored with trainer/models/scoring.py: in segments of --segment-len, each seeing
the --mem-len positions before it (Transformer-XL memory), the first --context-length tokens
(after a leading <eod>) seen but not scored (trainer/configs/scoring.py).

Standard output: one JSON line per document (or per file with --per file) with ``tokens`` (how
many were scored), ``log_likelihood`` (natural log), ``mean_nll`` and ``perplexity``, then one
summary line (``"summary": true``) over everything scored. A file without text is an error
naming it (exit 2), met when the file is reached.

SIGTERM or SIGINT while documents are being scored stops the scoring at once (within one
segment's step): the documents already printed stand, the summary line covers them and says
``"stopped": "SIGTERM"`` (or ``"SIGINT"``; null after a full run), one line on standard error says
so, and the status is 128 + the signal's number (143, 130), as a shell gives
(tfrecords/interruption.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import signal
import sys
import time
from collections import Counter

from tfrecords.errors import UsageError
from tfrecords.interruption import Interrupted, interrupted_status, raising_on_signals

FLAGS = {"segment_len": "--segment-len", "mem_len": "--mem-len", "context_length": "--context-length",
         "batch_size": "--batch-size", "eod": "--eod"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet score`; the defaults and help of the scoring settings are ScoreConfig's."""
    from tfrecords.corpus_text import INPUT_FORMATS
    from trainer.configs.scoring import ScoreConfig

    parser.add_argument("--model-dir", required=True,
                        help="model directory written by `xlnet train`, `xlnet import-checkpoint` or `xlnet finetune` "
                             "(local or gs://)")
    parser.add_argument("--input", action="append", required=True, metavar="FILE",
                        help="corpus file or glob, as `xlnet preprocess` reads (repeatable; local or gs://)")
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default="auto",
                        help="text: one sentence per line, blank line between documents; jsonl: one JSON document "
                             "per line; auto: jsonl for *.jsonl/*.ndjson")
    parser.add_argument("--text-field", default="text", help="the field holding a jsonl document's text")
    fields = {f.name: f for f in dataclasses.fields(ScoreConfig)}
    for name, flag in FLAGS.items():
        field = fields[name]
        if field.type in (bool, "bool"):
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=field.default,
                                help=field.metadata["help"])
        else:
            parser.add_argument(flag, dest=name, type=int, default=field.default, help=field.metadata["help"])
    parser.add_argument("--per", choices=("document", "file"), default="document",
                        help="one JSON line per document or per input file")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint prefix to score with (default: the latest in MODEL_DIR/checkpoints)")
    casing = parser.add_mutually_exclusive_group()
    casing.add_argument("--uncased", action=argparse.BooleanOptionalAction, default=None,
                        help="lower-case input text, or not (default: as training recorded, else detected from the "
                             "vocabulary)")
    casing.add_argument("--cased", dest="uncased", action="store_false", default=None,
                        help="keep the case of input text, the same as --no-uncased")


def score_config(args: argparse.Namespace):
    """The ScoreConfig of the flags; a bad value is a UsageError naming its flag."""
    from trainer.configs.scoring import ScoreConfig

    values = {name: getattr(args, name) for name in FLAGS}
    return ScoreConfig.from_dict(values, origins=FLAGS)


def check_flags(args: argparse.Namespace) -> None:
    """The scoring settings checked before TensorFlow loads (xlnet_cli.py)."""
    score_config(args)


def run(args: argparse.Namespace) -> int:
    """Scores every document and prints the JSON lines; bad input raises a UsageError (exit 2)."""
    import sentencepiece as spm

    from trainer.inputs.corpus_documents import corpus_documents, matching_corpus_files
    from trainer.runtime.restore import open_model_directory, resolve_uncased, restore_model

    config = score_config(args)
    files = matching_corpus_files(args.input)
    directory = open_model_directory(args.model_dir)
    uncased, _ = resolve_uncased(directory, args.uncased)
    processor = spm.SentencePieceProcessor(model_proto=directory.sp_model_proto)
    check_files_hold_text(files, processor, uncased, args.input_format, args.text_field)
    restored = restore_model(directory, args.checkpoint)
    mem_len = config.resolved_mem_len(directory.model_config.mem_len)
    scorer = DocumentScorer(restored.network, config, mem_len, directory.special_ids["eod"])
    if restored.head_spec is not None:
        print(f"xlnet score: note: {args.model_dir} is fine-tuned ({restored.head_spec.task}); its LM head (the tied "
              "embedding and lm_bias) is kept, but fine-tuning trained the embedding further", file=sys.stderr)
    stats = Counter()
    started = time.time()
    totals = Totals()
    per_file: dict[str, Totals] = {}
    documents = corpus_documents(files, processor, uncased, args.input_format, args.text_field, stats)
    stopped = None
    try:
        with raising_on_signals():
            for document, tokens, log_likelihood in scorer.score(documents):
                totals.add(tokens, log_likelihood)
                if args.per == "document":
                    line = Totals(1, tokens, log_likelihood).as_dict()
                    del line["documents"]
                    print(json.dumps({"file": document.path, "document": document.index, **line}), flush=True)
                else:
                    per_file.setdefault(document.path, Totals()).add(tokens, log_likelihood)
    except Interrupted as stop:
        stopped = stop.signum
    for path, file_totals in per_file.items():
        print(json.dumps({"file": path, **file_totals.as_dict()}), flush=True)
    seconds = time.time() - started
    print(json.dumps({"summary": True, "files": len(files), **totals.as_dict(), "segment_len": config.segment_len,
                      "mem_len": mem_len, "context_length": config.context_length, "eod": config.eod,
                      "seconds": round(seconds, 3), "tokens_per_second": round(totals.tokens / max(seconds, 1e-9), 1),
                      **{name: stats[name] for name in ("invalid_lines", "long_lines", "empty_documents")},
                      "stopped": None if stopped is None else signal.Signals(stopped).name}),
          flush=True)
    if stopped is not None:
        # The status a shell gives a command a signal stopped, as export and preprocess end
        # (tfrecords/interruption.py); SystemExit, since run() returns 0 or raises one of our errors.
        print(f"xlnet score: interrupted by {signal.Signals(stopped).name}; the summary covers the "
              f"{totals.documents} documents scored before it", file=sys.stderr, flush=True)
        raise SystemExit(interrupted_status(stopped))
    return 0


def check_files_hold_text(files, processor, uncased: bool, input_format: str, text_field: str) -> None:
    """A UsageError naming the first file without a document to score (read up to its first one)."""
    from trainer.inputs.corpus_documents import corpus_documents

    for path in files:
        if next(corpus_documents([path], processor, uncased, input_format, text_field), None) is None:
            raise UsageError(f"--input {path}: no text to score (an empty file, or only blank or invalid lines)")


@dataclasses.dataclass
class Totals:
    """Documents, scored tokens and their summed log-likelihood."""

    documents: int = 0
    tokens: int = 0
    log_likelihood: float = 0.0

    def add(self, tokens: int, log_likelihood: float) -> None:
        self.documents += 1
        self.tokens += tokens
        self.log_likelihood += log_likelihood

    def as_dict(self) -> dict:
        mean_nll = -self.log_likelihood / self.tokens if self.tokens else None
        return {"documents": self.documents, "tokens": self.tokens, "log_likelihood": round(self.log_likelihood, 4),
                "mean_nll": None if mean_nll is None else round(mean_nll, 6),
                "perplexity": None if mean_nll is None else round(math.exp(min(mean_nll, 700.0)), 4)}


class DocumentScorer:
    """Scores tokenised documents in batches with a compiled segment (trainer/models/scoring.py)."""

    def __init__(self, network, config, mem_len: int, eod_id: int):
        import tensorflow as tf

        from trainer.models.inference_network import inference_network
        from trainer.models.scoring import score_segment

        self.network = inference_network(network, mem_len)
        self.config, self.eod_id = config, eod_id
        # Traced once per memory length (the network needs it static) and batch size: a handful per run.
        self.segment_fn = tf.function(lambda *args: score_segment(self.network, *args))

    def score(self, documents):
        """Yields (document, tokens scored, log-likelihood) for each document, in order."""
        batch = []
        for document in documents:
            batch.append(document)
            if len(batch) == self.config.batch_size:
                yield from self._score_batch(batch)
                batch = []
        if batch:
            yield from self._score_batch(batch)

    def _score_batch(self, documents):
        import numpy as np
        import tensorflow as tf

        from trainer.models.document_framing import eod_framed
        from trainer.models.scoring import score_tokens

        pieces = [np.asarray(document.ids, np.int32) for document in documents]
        rows = tf.RaggedTensor.from_row_lengths(np.concatenate(pieces), [len(piece) for piece in pieces])
        rows = list((eod_framed(rows, self.eod_id) if self.config.eod else rows).numpy())
        lengths = np.array([len(row) for row in rows], np.int32)
        ids = np.zeros([len(rows), int(lengths.max())], np.int32)
        for index, row in enumerate(rows):
            ids[index, :len(row)] = row
        contexts = np.minimum(lengths, self.config.context_tokens)
        out = score_tokens(self.network, ids, lengths, contexts, self.config.segment_len, segment_fn=self.segment_fn)
        for index, document in enumerate(documents):
            yield document, int(out["num_tokens"][index]), float(out["log_likelihood"][index])
