"""Corpus cleaning (issue 46): how well near duplicates are found, and how fast, on planted pairs of real text.

Planted pairs: each of ``--documents`` bundled Wikipedia summaries (at least ``--min-words`` words) beside
a copy with a share of its words replaced by made-up ones, at each share of ``--edits``; each pair's true
Jaccard similarity of 5-word shingle sets is computed, and whether the stage's rule
(pipeline/near_duplicates.py: a shared LSH band, then the estimated Jaccard at least ``min_jaccard``)
takes it for a duplicate. Then the quality filters' and the signatures' throughput over the same
documents, timed ``--repeats`` times (the median).

Then the same through the Beam pipeline (``--pipeline-documents`` N > 0): a JSON-lines corpus of N other
summaries, each beside one planted copy (the i-th edited by the i-th share of ``--edits``, cyclically), run
by the real ``xlnet preprocess`` (FnApiRunner, ``--workers``) once without cleaning and once with
``--dedup near --removed DIR``; a pair is caught when the audit names one of the two as removed with the
other as the copy kept. The vocabulary: ``--vocab``, or one of 2,000 pieces trained on the corpus first
(not timed).

Prints JSON lines: one per Jaccard band (pairs, share caught), then one per timed part (documents/s,
words/s, on one core), then with the pipeline one per Jaccard band of its pairs and one with both runs'
seconds and documents/s, then the settings. The peer (datatrove's MinHash and filters, in its own venv)
is not run yet.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bundled_data import wikipedia_documents  # noqa: E402
from pipeline import quality_filters  # noqa: E402
from pipeline.near_duplicates import MinHashSettings, band_keys, estimated_jaccard, signature, true_jaccard  # noqa: E402

BANDS = ((0.9, 1.01), (0.85, 0.9), (0.8, 0.85), (0.7, 0.8), (0.6, 0.7), (0.5, 0.6), (0.0, 0.5))


def edited(text: str, share: float, rng: np.random.Generator) -> str:
    words = text.split()
    for index in rng.choice(len(words), int(round(share * len(words))), replace=False):
        words[index] = f"zq{rng.integers(10 ** 9)}"
    return " ".join(words)


def taken_for_duplicates(a: str, b: str, settings: MinHashSettings) -> bool:
    x, y = signature(a, settings), signature(b, settings)
    return bool(set(band_keys(x, settings)) & set(band_keys(y, settings))) and \
        estimated_jaccard(x, y) >= settings.min_jaccard


def band_lines(part: str, judged: np.ndarray) -> list[dict]:
    """One line per Jaccard band of (true Jaccard, caught) rows."""
    lines = []
    for low, high in BANDS:
        inside = (judged[:, 0] >= low) & (judged[:, 0] < high)
        lines.append({"part": part, "jaccard_from": low, "jaccard_below": min(high, 1.0), "pairs": int(inside.sum()),
                      "caught": round(float(judged[inside, 1].mean()), 4) if inside.any() else None})
    return lines


def pipeline_run(corpus: Path, vocab: str, output: Path, workers: int, **cleaning) -> float:
    """Seconds of one real `xlnet preprocess` of ``corpus`` (small records, so that the corpus fills them)."""
    from pipeline.preprocess_command import preprocess
    from pipeline.preprocess_config import PreprocessConfig

    config = PreprocessConfig(inputs=(str(corpus),), output=str(output), vocab=vocab, seq_len=128, reuse_len=64,
                              num_predict=21, num_streams=8, num_shards=2, valid_shards=1, **cleaning)
    began = time.perf_counter()
    preprocess(config, workers=workers,
               runner_options=["--direct_running_mode=in_memory"] if workers == 1 else [])
    return time.perf_counter() - began


def through_the_pipeline(texts: list[str], args: argparse.Namespace, settings: MinHashSettings) -> list[dict]:
    """The planted pairs of ``texts`` through a plain and a --dedup near run: the lines to print."""
    rng = np.random.default_rng(args.seed + 1)
    copies = [edited(text, args.edits[i % len(args.edits)], rng) for i, text in enumerate(texts)]
    with tempfile.TemporaryDirectory(prefix="cleaning-benchmark-") as directory:
        work = Path(directory)
        corpus = work / "planted.jsonl"
        corpus.write_text("".join(json.dumps({"id": f"{kind}{i}", "text": text}) + "\n"
                                  for i, pair in enumerate(zip(texts, copies)) for kind, text in zip("oc", pair)),
                          encoding="utf-8")
        vocab = args.vocab or trained_vocab(texts + copies, work)
        plain = pipeline_run(corpus, vocab, work / "plain", args.workers)
        near = pipeline_run(corpus, vocab, work / "near", args.workers, dedup=("near",), removed=str(work / "removed"))
        removed = {(line["id"], line["kept"]) for path in sorted((work / "removed").glob("*.jsonl"))
                   for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    judged = np.array([(true_jaccard(a, b, settings), (f"o{i}", f"c{i}") in removed or (f"c{i}", f"o{i}") in removed)
                       for i, (a, b) in enumerate(zip(texts, copies))])
    documents = 2 * len(texts)
    return band_lines("pipeline_near_duplicates", judged) + [{
        "part": "pipeline", "documents": documents, "workers": args.workers, "plain_s": round(plain, 2),
        "near_s": round(near, 2), "plain_documents_per_s": round(documents / plain, 1),
        "near_documents_per_s": round(documents / near, 1), "removed": len(removed)}]


def trained_vocab(texts: list[str], work: Path) -> str:
    """A SentencePiece model of 2,000 pieces trained on ``texts`` by `xlnet vocab`: its path."""
    import xlnet_cli

    (work / "text.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    if xlnet_cli.main(["vocab", "--input", str(work / "text.txt"), "--output", str(work / "spiece"),
                       "--vocab-size", "2000", "--seed", "0"]) != 0:
        raise SystemExit("training the pipeline runs' vocabulary failed (see above)")
    return str(work / "spiece.model")


def median_rate(action, count: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return count / statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=300, help="Wikipedia summaries used")
    parser.add_argument("--min-words", type=int, default=120, help="shortest summary used, in words")
    parser.add_argument("--edits", type=float, nargs="+", default=[0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12, 0.2],
                        help="shares of words replaced in the planted copies")
    parser.add_argument("--repeats", type=int, default=3, help="timings per part (the median is printed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pipeline-documents", type=int, default=0,
                        help="other summaries planted with one copy each and run through `xlnet preprocess` "
                             "(0: not run)")
    parser.add_argument("--workers", type=int, default=1, help="the pipeline runs' worker processes")
    parser.add_argument("--vocab", default=None, help="SentencePiece model for the pipeline runs (default: trained)")
    args = parser.parse_args(argv)
    if args.documents < 1 or args.repeats < 1 or not all(0 <= share < 1 for share in args.edits):
        parser.error("--documents and --repeats must be positive, --edits in [0, 1)")
    if args.pipeline_documents < 0 or args.workers < 1:
        parser.error("--pipeline-documents must be at least 0, --workers at least 1")
    settings = MinHashSettings(seed=args.seed)
    texts = [" ".join(lines) for lines in wikipedia_documents(args.documents * 20)]
    texts = [text for text in texts if len(text.split()) >= args.min_words][:args.documents]
    rng = np.random.default_rng(args.seed)
    pairs = [(text, edited(text, share, rng)) for share in args.edits for text in texts]
    judged = np.array([(true_jaccard(a, b, settings), taken_for_duplicates(a, b, settings)) for a, b in pairs])
    for line in band_lines("near_duplicates", judged):
        print(json.dumps(line), flush=True)
    words = sum(len(text.split()) for text in texts)
    parts = {"minhash_signature": lambda: [signature(text, settings) for text in texts],
             "gopher": lambda: [quality_filters.gopher_repetition(t) or quality_filters.gopher_quality(t) for t in texts],
             "c4": lambda: [quality_filters.c4_clean(text) for text in texts],
             "fineweb": lambda: [quality_filters.fineweb_quality(text) for text in texts]}
    for name, action in parts.items():
        rate = median_rate(action, len(texts), args.repeats)
        print(json.dumps({"part": name, "documents_per_s": round(rate, 1),
                          "words_per_s": round(rate * words / len(texts), 1), "documents": len(texts)}), flush=True)
    if args.pipeline_documents:
        others = [" ".join(lines) for lines in wikipedia_documents((args.documents + args.pipeline_documents) * 20)]
        others = [text for text in others if len(text.split()) >= args.min_words]
        for line in through_the_pipeline(others[args.documents:args.documents + args.pipeline_documents], args,
                                         settings):
            print(json.dumps(line), flush=True)
    print(json.dumps({"part": "settings", "documents": len(texts), "edits": args.edits, "shingle_words":
                      settings.shingle_words, "bands": settings.bands, "rows": settings.rows,
                      "min_jaccard": settings.min_jaccard, "repeats": args.repeats,
                      "pipeline_documents": args.pipeline_documents, "peer": None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
