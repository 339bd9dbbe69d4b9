"""Corpus cleaning (issue 46): how well near duplicates are found, and how fast, on planted pairs of real text.

Planted pairs: each of ``--documents`` bundled Wikipedia summaries (at least ``--min-words`` words) beside
a copy with a share of its words replaced by made-up ones, at each share of ``--edits``; each pair's true
Jaccard similarity of 5-word shingle sets is computed, and whether the stage's rule
(pipeline/near_duplicates.py: a shared LSH band, then the estimated Jaccard at least ``min_jaccard``)
takes it for a duplicate. Then the quality filters' and the signatures' throughput over the same
documents, timed ``--repeats`` times (the median).

Prints JSON lines: one per Jaccard band (pairs, share caught), then one per timed part (documents/s,
words/s, on one core), then the settings. The peer (datatrove's MinHash and filters, in its own venv)
is not run yet.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
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
    args = parser.parse_args(argv)
    if args.documents < 1 or args.repeats < 1 or not all(0 <= share < 1 for share in args.edits):
        parser.error("--documents and --repeats must be positive, --edits in [0, 1)")
    settings = MinHashSettings(seed=args.seed)
    texts = [" ".join(lines) for lines in wikipedia_documents(args.documents * 20)]
    texts = [text for text in texts if len(text.split()) >= args.min_words][:args.documents]
    rng = np.random.default_rng(args.seed)
    pairs = [(text, edited(text, share, rng)) for share in args.edits for text in texts]
    judged = np.array([(true_jaccard(a, b, settings), taken_for_duplicates(a, b, settings)) for a, b in pairs])
    for low, high in BANDS:
        inside = (judged[:, 0] >= low) & (judged[:, 0] < high)
        print(json.dumps({"part": "near_duplicates", "jaccard_from": low, "jaccard_below": min(high, 1.0),
                          "pairs": int(inside.sum()),
                          "caught": round(float(judged[inside, 1].mean()), 4) if inside.any() else None}), flush=True)
    words = sum(len(text.split()) for text in texts)
    parts = {"minhash_signature": lambda: [signature(text, settings) for text in texts],
             "gopher": lambda: [quality_filters.gopher_repetition(t) or quality_filters.gopher_quality(t) for t in texts],
             "c4": lambda: [quality_filters.c4_clean(text) for text in texts],
             "fineweb": lambda: [quality_filters.fineweb_quality(text) for text in texts]}
    for name, action in parts.items():
        rate = median_rate(action, len(texts), args.repeats)
        print(json.dumps({"part": name, "documents_per_s": round(rate, 1),
                          "words_per_s": round(rate * words / len(texts), 1), "documents": len(texts)}), flush=True)
    print(json.dumps({"part": "settings", "documents": len(texts), "edits": args.edits, "shingle_words":
                      settings.shingle_words, "bands": settings.bands, "rows": settings.rows,
                      "min_jaccard": settings.min_jaccard, "repeats": args.repeats, "peer": None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
