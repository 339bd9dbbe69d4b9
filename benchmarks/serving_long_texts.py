"""Serving long texts: what `xlnet export --max-segments N` costs per batch, by how much of N a text fills.

Builds a model directory of ``--preset`` with seeded random weights (timing does not depend on the
weights) and the vocabulary ``--vocab``, exports it twice with ``--max-length L`` (one segment, and
``--max-segments N`` with ``--mem-len L``), loads both as a client does (tensorflow +
tensorflow_text only) and times ``encode_text`` on batches of bundled-corpus texts that fill 1, N/2
and N segments (sentences joined until their pieces fill that many segments). Timings are the median
of ``--repeats`` batches after a warm-up, every run interleaved round-robin (benchmarks/serving.py).

Prints one JSON line per (export, texts): ``export_segments``, ``text_segments`` (segments the
texts reach, the mean over the batch), ``median_batch_seconds``, ``seconds_per_text_segment``.
What to read: a batch of one-segment texts should cost the multi-segment export about what it
costs the one-segment export (leading segments no text reaches are skipped), and a batch filling
N segments about N times that.

    .venv/bin/python benchmarks/serving_long_texts.py --vocab demo_output/vocab/spiece.model \\
        --preset base --max-length 512 --max-segments 8 --batch-size 8 --workdir /tmp/serving-long
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from serving import interleaved_medians  # noqa: E402  (benchmarks/serving.py: the same timing rule)


def corpus_sentences(count: int) -> list[str]:
    """The first ``count`` lines of the bundled Wikipedia corpus longer than 40 characters."""
    with gzip.open(REPO / "data" / "corpus" / "wiki_summaries_en.txt.gz", "rt", encoding="utf-8") as handle:
        lines = (line.strip() for line in handle)
        return [line for line, _ in zip((line for line in lines if len(line) > 40), range(count))]


def texts_filling(processor, sentences: list[str], pieces: int, count: int) -> list[str]:
    """``count`` texts of about ``pieces`` SentencePiece pieces each: consecutive sentences joined, cut
    to their first ``pieces`` pieces (decoded back to text, so a text may re-encode a piece or two off)."""
    texts, start = [], 0
    for _ in range(count):
        ids: list[int] = []
        while len(ids) < pieces:
            ids += processor.encode(sentences[start % len(sentences)] + " ")
            start += 1
        texts.append(processor.decode(ids[:pieces]))
    return texts


def write_model_dir(path: Path, preset: str, vocab: str, max_length: int) -> None:
    """A pretrained model directory of ``preset`` with seeded random weights."""
    import tensorflow as tf

    from tfrecords.vocabulary import parse_vocab
    from trainer.models.config import model_preset
    from trainer.models.network import build_network
    from trainer.runtime.model_dir import ModelDirectory

    proto = Path(vocab).read_bytes()
    parsed = parse_vocab(proto, vocab)
    config = model_preset(preset).replace(vocab_size=parsed.vocab_size, mem_len=max_length)
    directory = ModelDirectory(str(path))
    directory.write_model_files(config, parsed.special_ids.to_dict(), vocab, uncased=False)
    tf.keras.utils.set_random_seed(0)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=build_network(config)), directory.checkpoints, 1).save()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", required=True, help="a SentencePiece model (spiece.model)")
    parser.add_argument("--workdir", required=True, help="where the model directory and the exports go")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--max-segments", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import sentencepiece as spm
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    import xlnet_cli

    workdir = Path(args.workdir)
    model_dir = workdir / "model"
    if not (model_dir / "checkpoints").is_dir():
        write_model_dir(model_dir, args.preset, args.vocab, args.max_length)
    exports = {}
    for segments in sorted({1, args.max_segments}):
        output = workdir / f"serving-{segments}"
        if not (output / "1").is_dir():
            flags = ["--max-segments", str(segments), "--mem-len", str(args.max_length)] if segments > 1 else []
            assert xlnet_cli.main(["export", "--model-dir", str(model_dir), "--output", str(output),
                                   "--max-length", str(args.max_length), *flags]) == 0
        exports[segments] = tf.saved_model.load(str(output / "1")).signatures["encode_text"]

    processor = spm.SentencePieceProcessor(model_file=args.vocab)
    sentences = corpus_sentences(2000)
    fills = sorted({1, max(1, args.max_segments // 2), args.max_segments})
    # a text of k segments: the earlier ones full, the last less <sep> <cls> and some slack (a decoded
    # text may re-encode to a few more pieces, and one text spilling over makes the batch read k + 1)
    slack = 2 + 4 + args.max_length // 8
    batches = {k: tf.constant(texts_filling(processor, sentences, k * args.max_length - slack, args.batch_size))
               for k in fills}
    runs = {(segments, k): (lambda function=function, texts=texts: function(text=texts)["pooled_output"].numpy())
            for segments, function in exports.items() for k, texts in batches.items()
            if segments > 1 or k == 1}
    reached = {k: float(exports[args.max_segments](text=texts)["input_mask"].numpy().any(axis=2).sum(axis=1).mean())
               for k, texts in batches.items()}
    for (segments, k), seconds in interleaved_medians(runs, args.repeats).items():
        text_segments = reached[k] if segments > 1 else 1.0
        print(json.dumps({"benchmark": "serving_long_texts", "preset": args.preset, "max_length": args.max_length,
                          "batch_size": args.batch_size, "export_segments": segments,
                          "text_segments": round(text_segments, 2), "median_batch_seconds": round(seconds, 5),
                          "seconds_per_text_segment": round(seconds / text_segments, 5)}), flush=True)


if __name__ == "__main__":
    main()
