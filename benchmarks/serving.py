"""Serving throughput of an exported SavedModel: what in-graph tokenisation costs next to the network.

Loads the export the way a client does (tensorflow + tensorflow_text only) and times, on the same
real sentences of the bundled corpus and in one run, side by side:

* ``encode``          the network alone on ids that were already tokenised (the floor)
* ``encode_text``     raw strings: in-graph normalisation + SentencePiece + layout + the network
* ``predict_masked``  raw strings with one ``<mask>`` each: tokenisation + the two-stream network
* ``python_sentencepiece`` the sentencepiece Python package tokenising the same strings (no model),
  for scale: the host-side tokenisation a client would otherwise run

Prints one JSON line per measurement: the median of ``--repeats`` timed batches after one warm-up,
the four measurements interleaved round-robin so that noise on a shared machine hits them alike.

    .venv/bin/python benchmarks/serving.py --export-dir demo_output/serving/xlnet/1 --batch-size 32
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent


def sentences(count: int) -> list[str]:
    """The first ``count`` non-empty lines of the bundled Wikipedia corpus."""
    with gzip.open(REPO / "data" / "corpus" / "wiki_summaries_en.txt.gz", "rt", encoding="utf-8") as handle:
        lines = (line.strip() for line in handle)
        return [line for line, _ in zip((line for line in lines if line), range(count))]


def interleaved_medians(runs: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each function, timed round-robin so machine noise hits all of them alike."""
    for function in runs.values():
        function()  # warm-up: first call traces / allocates
    timings = {name: [] for name in runs}
    for _ in range(repeats):
        for name, function in runs.items():
            began = time.perf_counter()
            function()
            timings[name].append(time.perf_counter() - began)
    return {name: statistics.median(values) for name, values in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export-dir", default=str(REPO / "demo_output" / "serving" / "xlnet" / "1"),
                        help="a version directory written by `xlnet export`")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import sentencepiece as spm
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops the SavedModel uses)

    model = tf.saved_model.load(args.export_dir)
    config = json.loads((Path(args.export_dir) / "assets" / "export_config.json").read_text())
    texts = sentences(args.batch_size)
    words = [text.split() for text in texts]
    masked = [" ".join(w[:len(w) // 2] + ["<mask>"] + w[len(w) // 2 + 1:]) for w in words]
    text_tensor, masked_tensor = tf.constant(texts), tf.constant(masked)
    ids = model.signatures["encode_text"](text=text_tensor)
    id_inputs = {name: ids[name] for name in ("input_ids", "segment_ids", "input_mask")}
    processor = spm.SentencePieceProcessor(model_file=str(Path(args.export_dir) / "assets" / "spiece.model"))

    runs = {
        "encode": lambda: model.signatures["encode"](**id_inputs)["pooled_output"].numpy(),
        "encode_text": lambda: model.signatures["encode_text"](text=text_tensor)["pooled_output"].numpy(),
        "predict_masked": lambda: model.signatures["predict_masked"](text=masked_tensor)["top_k_ids"].numpy(),
        "python_sentencepiece": lambda: processor.encode(texts),
    }
    for name, seconds in interleaved_medians(runs, args.repeats).items():
        print(json.dumps({"benchmark": "serving", "signature": name, "batch_size": args.batch_size,
                          "max_length": config["max_length"], "d_model": config["d_model"],
                          "median_batch_seconds": round(seconds, 5),
                          "sentences_per_second": round(args.batch_size / seconds, 1)}), flush=True)


if __name__ == "__main__":
    main()
