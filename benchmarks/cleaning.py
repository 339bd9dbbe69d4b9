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

With ``--peer-python PATH`` (a venv with datatrove: ``make datatrove-venv`` builds .venv-datatrove), the
peer beside ours, datatrove run by that Python in a subprocess on files in a temporary folder:

- near duplicates: the ``--documents`` summaries (``o<i>``) each beside one planted copy (``c<i>``, edited by
  the i-th share of ``--edits``, cyclically), as one JSON-lines file; datatrove's four MinHash stages
  (signatures, buckets, clusters, filter; its LocalPipelineExecutor, one worker) with our settings (5-word
  shingles, 14 buckets of 8 hashes, 64-bit), against our stage's rule without Beam (``our_near_duplicates``:
  band groups, ``pairs_in_band``, connected components, one kept per cluster), and the same without its
  verification (``min_jaccard`` 0: a shared band makes a pair, as in datatrove's buckets). Printed: per
  Jaccard band the share of pairs each puts in one cluster, and the share ours and datatrove decide the same;
  per variant of ours, the share of documents decided the same (``duplicate_agreement``: in a cluster or
  not; ``removed_agreement``: removed or not, which also counts the two sides keeping different copies of a
  cluster); the signatures' documents/s on one core, ours over datatrove's
  (``MinhashDedupSignature.get_shingles`` and ``get_signature``, its spaCy tokenizer loaded first), and the
  seconds of each of datatrove's stages.
- filters: the first ``--documents`` bundled summaries with their lines (``w<i>``) and a degraded copy of each
  (``d<i>``, one flaw of DEGRADATIONS in turn: repeated lines, bullets, lines cut with an ellipsis, menu
  lines, hashtags, a curly bracket, lorem ipsum, a cookie notice, no end punctuation, paragraphs, a table of
  numbers, the first line only); each of Gopher quality, Gopher repetition, C4 and FineWeb, ours
  (pipeline/quality_filters.py) and datatrove's (its defaults; C4 a second time with TFDS's 5 words per line
  and 3 sentences, as ours, ``c4_tfds_thresholds``). Printed per filter: documents removed by each, the
  share decided the same, documents/s of each on one core (for C4 also the share of documents both keep
  whose kept lines are the same), then a line grouping the documents decided differently by (our rule,
  datatrove's rule), with their ids.

Prints JSON lines: one per Jaccard band (pairs, share caught), then one per timed part (documents/s,
words/s, on one core), then with the peer the lines above (parts ``peer_near_duplicates``,
``peer_near_agreement``, ``peer_minhash_signature``, ``peer_filter``, ``peer_filter_differences``), then with
the pipeline one per Jaccard band of its pairs and one with both runs' seconds and documents/s, then the
settings (``peer``: datatrove's version, or null).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bundled_data import wikipedia_documents  # noqa: E402
from pipeline import quality_filters  # noqa: E402
from pipeline.near_duplicates import (Clusters, MinHashSettings, band_keys, estimated_jaccard,  # noqa: E402
                                      kept_and_removed, pairs_in_band, signature, true_jaccard)

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


# ------------------------------------------------------------------------------------- the datatrove peer
# Run by the peer venv's Python (``--peer-python``) on WORK, a folder holding request.json, near/near.jsonl
# and filters.jsonl; prints one JSON object. Only datatrove's public classes are called, with their defaults
# but for the MinHash settings, which are ours, and a second C4 with TFDS's thresholds, which ours uses.
PEER_SCRIPT = r'''
import json, statistics, sys, time
from pathlib import Path

work = Path(sys.argv[1])
request = json.loads((work / "request.json").read_text())
from importlib.metadata import version
from datatrove.data import Document
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter,
                                      MinhashDedupSignature)
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.utils.hashing import HashConfig


def median_seconds(action):
    times = []
    for _ in range(request["repeats"]):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


config = MinhashConfig(n_grams=request["shingle_words"], num_buckets=request["bands"],
                       hashes_per_bucket=request["rows"], hash_config=HashConfig(precision=64))
near = [json.loads(line) for line in (work / "near" / "near.jsonl").read_text(encoding="utf-8").splitlines()]
signer = MinhashDedupSignature(output_folder=str(work / "unused"), config=config)
signer.get_signature(signer.get_shingles(near[0]["text"]))  # the tokenizer loaded before the clock starts
signature_s = median_seconds(lambda: [signer.get_signature(signer.get_shingles(doc["text"])) for doc in near])

stages = {}
def run(name, pipeline, tasks=1):
    began = time.perf_counter()
    LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=str(work / "logs" / name)).run()
    stages[name] = time.perf_counter() - began

reader = lambda: JsonlReader(str(work / "near"))
run("signatures", [reader(), MinhashDedupSignature(output_folder=str(work / "signatures"), config=config)])
run("buckets", [MinhashDedupBuckets(input_folder=str(work / "signatures"), output_folder=str(work / "buckets"),
                                    config=config)], tasks=config.num_buckets)
run("clusters", [MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "remove"),
                                     config=config, save_cluster_id=True)])
run("filter", [reader(), MinhashDedupFilter(input_folder=str(work / "remove"), load_cluster_ids=True,
                                            exclusion_writer=JsonlWriter(str(work / "removed"), compression=None)),
               JsonlWriter(str(work / "kept"), compression=None)])
def written(folder):
    return [json.loads(line) for path in sorted((work / folder).glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()]
removed, kept = written("removed"), written("kept")
cluster = {doc["id"]: doc["metadata"].get("minhash_cluster_id", -1) for doc in removed + kept}

documents = [json.loads(line) for line in (work / "filters.jsonl").read_text(encoding="utf-8").splitlines()]
filters = {"gopher_quality": GopherQualityFilter(), "gopher_repetition": GopherRepetitionFilter(),
           "c4": C4QualityFilter(), "c4_tfds_thresholds": C4QualityFilter(min_num_sentences=3, min_words_per_line=5),
           "fineweb": FineWebQualityFilter()}
decided = {}
def decide(name, step):
    reasons, texts = {}, {}
    for doc in documents:
        document = Document(text=doc["text"], id=doc["id"])
        result = step.filter(document)
        reasons[doc["id"]] = None if result is True else (result[1] if isinstance(result, tuple) else "removed")
        texts[doc["id"]] = document.text
    return reasons, texts
for name, step in filters.items():
    reasons, texts = decide(name, step)  # the tokenizer warm before the clock starts
    decided[name] = {"reasons": reasons, "texts": texts if name.startswith("c4") else {},
                     "seconds": median_seconds(lambda: decide(name, step))}
print(json.dumps({"version": version("datatrove"), "signature_s": signature_s, "stages": stages,
                  "removed": sorted(doc["id"] for doc in removed), "cluster": cluster, "filters": decided}))
'''

# The filter corpus's degraded copies: what a crawl's pages add to running text, one kind per copy in turn.
DEGRADATIONS = ("repeated_lines", "bullets", "cut_with_ellipsis", "menu_lines", "hashtags", "curly_bracket",
                "lorem_ipsum", "cookie_notice", "no_punctuation", "paragraphs", "number_table", "first_line")
MENU = ("Home", "About us", "Contact", "Share this page", "Read more", "Sign in")


def degraded(lines: list[str], kind: str, rng: np.random.Generator) -> str:
    """One bundled document's lines turned into a page with the flaw ``kind`` (one of DEGRADATIONS)."""
    if kind == "repeated_lines":
        lines = lines + lines[:max(1, len(lines) // 2)]
    elif kind == "bullets":
        lines = [f"- {line}" for line in lines]
    elif kind == "cut_with_ellipsis":
        lines = [" ".join(line.split()[:max(1, len(line.split()) // 2)]) + "..." for line in lines]
    elif kind == "menu_lines":
        lines = [item for line in lines for item in (MENU[int(rng.integers(len(MENU)))], line)]
    elif kind == "hashtags":
        lines = lines + [" ".join(f"#{word.strip('.,;:()').lower()}" for word in " ".join(lines).split()[:30])]
    elif kind == "curly_bracket":
        lines = lines + ['var settings = {"theme": "dark", "items": 12};']
    elif kind == "lorem_ipsum":
        lines = lines + ["Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor."]
    elif kind == "cookie_notice":
        lines = ["This website uses cookies to give you the best experience."] + lines
    elif kind == "no_punctuation":
        lines = [line.rstrip(".!?\"'") for line in lines]
    elif kind == "paragraphs":
        return "\n\n".join(lines + lines[:1])
    elif kind == "number_table":
        lines = lines + [" ".join(str(int(value)) for value in rng.integers(0, 10 ** 4, 6)) for _ in range(8)]
    elif kind == "first_line":
        lines = lines[:1]
    return "\n".join(lines)


def filter_corpus(count: int, seed: int) -> list[tuple[str, str]]:
    """(id, text): the first ``count`` bundled documents, their lines kept, as ``w<i>``, and a degraded copy of
    each (the i-th by the i-th kind of DEGRADATIONS, cyclically) as ``d<i>``."""
    rng = np.random.default_rng(seed + 2)
    documents = [lines for lines in wikipedia_documents(count) if lines]
    return [(f"w{i}", "\n".join(lines)) for i, lines in enumerate(documents)] + [
        (f"d{i}", degraded(lines, DEGRADATIONS[i % len(DEGRADATIONS)], rng)) for i, lines in enumerate(documents)]


def planted_corpus(texts: list[str], edits: list[float], rng: np.random.Generator) -> list[tuple[str, str]]:
    """(id, text): each of ``texts`` as ``o<i>`` beside one copy edited by the i-th share of ``edits``
    (cyclically) as ``c<i>``."""
    copies = [edited(text, edits[i % len(edits)], rng) for i, text in enumerate(texts)]
    return [(f"{kind}{i}", text) for i, pair in enumerate(zip(texts, copies)) for kind, text in zip("oc", pair)]


def our_near_duplicates(documents: list[tuple[str, str]], settings: MinHashSettings) -> tuple[dict, dict]:
    """(removed id -> kept id, id -> its cluster's root for every document in a cluster): the `--dedup near`
    stage's rule without Beam (band groups, ``pairs_in_band``, connected components, the least seeded hash
    kept; here the hash of the id, where the pipeline hashes the document's file and index)."""
    groups = defaultdict(list)
    for document, text in documents:
        values = signature(text, settings)
        for key in band_keys(values, settings):
            groups[key].append((document, values))
    clusters = Clusters()
    for members in groups.values():
        for a, b in pairs_in_band(members, settings.min_jaccard, settings.seed):
            clusters.add_pair(a, b)
    grouped = clusters.groups()
    return (dict(kept_and_removed(grouped.values(), settings.seed)),
            {document: root for root, members in grouped.items() for document in members})


def agreement(ids: list[str], ours: set, peer: set) -> float:
    """The share of ``ids`` that both sides decide the same way (in both sets, or in neither)."""
    return sum((document in ours) == (document in peer) for document in ids) / len(ids) if ids else 1.0


def id_order(document: str) -> tuple[str, int]:
    """``w12`` after ``w9``: the letter, then the number."""
    return document[:1], int(document[1:]) if document[1:].isdigit() else -1


def differences(ours: dict, peer: dict) -> list[dict]:
    """The documents one side removes and the other keeps, grouped by (our reason, the peer's reason), None
    for kept; the largest group first. ``ours`` and ``peer`` map each id to its reason or None."""
    groups = defaultdict(list)
    for document in ours:
        if (ours[document] is None) != (peer[document] is None):
            groups[(ours[document], peer[document])].append(document)
    return [{"ours": key[0], "datatrove": key[1], "documents": len(ids), "ids": sorted(ids, key=id_order)}
            for key, ids in sorted(groups.items(), key=lambda item: (-len(item[1]), str(item[0])))]


def pair_caught(pairs: int, cluster: dict) -> list[bool]:
    """Whether each planted pair (o<i>, c<i>) is in one cluster: ``cluster`` maps an id to its cluster (absent,
    None or -1: in none)."""
    def of(document):
        value = cluster.get(document, -1)
        return None if value in (None, -1) else value
    return [of(f"o{i}") is not None and of(f"o{i}") == of(f"c{i}") for i in range(pairs)]


def run_peer(python: str, near: list[tuple[str, str]], documents: list[tuple[str, str]], settings: MinHashSettings,
             repeats: int) -> dict:
    """datatrove's MinHash pipeline on ``near`` and its filters on ``documents``, in the peer venv."""
    with tempfile.TemporaryDirectory(prefix="cleaning-peer-") as directory:
        work = Path(directory)
        (work / "near").mkdir()
        for path, rows in ((work / "near" / "near.jsonl", near), (work / "filters.jsonl", documents)):
            path.write_text("".join(json.dumps({"id": document, "text": text}) + "\n" for document, text in rows),
                            encoding="utf-8")
        (work / "request.json").write_text(json.dumps({
            "repeats": repeats, "shingle_words": settings.shingle_words, "bands": settings.bands,
            "rows": settings.rows}))
        out = subprocess.run([str(Path(python).absolute()), "-c", PEER_SCRIPT, str(work)], capture_output=True,
                             text=True, check=False, cwd=work)
    if out.returncode:
        raise SystemExit(f"the datatrove peer failed ({python}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


OUR_FILTERS = {"gopher_quality": quality_filters.gopher_quality, "gopher_repetition": quality_filters.gopher_repetition,
               "c4": lambda text: quality_filters.c4_clean(text)[0], "fineweb": quality_filters.fineweb_quality}


def peer_lines(python: str, texts: list[str], args: argparse.Namespace,
               settings: MinHashSettings) -> tuple[list[dict], str]:
    """Ours beside datatrove's: near duplicates on planted pairs, signatures' documents/s, the filters on a
    degraded corpus: (the lines to print, datatrove's version)."""
    near = planted_corpus(texts, args.edits, np.random.default_rng(args.seed + 3))
    documents = filter_corpus(args.documents, args.seed)
    peer = run_peer(python, near, documents, settings, args.repeats)
    ids = [document for document, _ in near]
    jaccards = [true_jaccard(near[2 * i][1], near[2 * i + 1][1], settings) for i in range(len(texts))]
    peer_caught = pair_caught(len(texts), peer["cluster"])
    peer_clustered = {document for document, value in peer["cluster"].items() if value not in (None, -1)}
    # ours as the stage runs (a candidate pair verified by its estimated Jaccard), and without the verification
    # (min_jaccard 0: any shared band makes a pair, as datatrove's buckets do)
    variants = {"caught_ours": settings, "caught_ours_unverified": dataclasses.replace(settings, min_jaccard=0.0)}
    decided = {name: our_near_duplicates(near, variant) for name, variant in variants.items()}
    caught = {name: pair_caught(len(texts), cluster) for name, (_, cluster) in decided.items()}
    same = np.equal(caught["caught_ours"], peer_caught)
    by_band = {name: band_lines("peer_near_duplicates", np.array(list(zip(jaccards, values))))
               for name, values in {**caught, "caught_datatrove": peer_caught, "decided_same": same}.items()}
    lines = [{**{key: line[key] for key in ("part", "jaccard_from", "jaccard_below", "pairs")},
              **{name: by_band[name][band]["caught"] for name in by_band}}
             for band, line in enumerate(by_band["caught_datatrove"])]
    for name, variant in variants.items():
        removed, cluster = decided[name]
        lines.append({"part": "peer_near_agreement", "min_jaccard": variant.min_jaccard, "documents": len(ids),
                      "removed_ours": len(removed), "removed_datatrove": len(peer["removed"]),
                      "duplicate_agreement": round(agreement(ids, set(cluster), peer_clustered), 4),
                      "removed_agreement": round(agreement(ids, set(removed), set(peer["removed"])), 4),
                      "pairs_decided_same": round(float(np.mean(np.equal(caught[name], peer_caught))), 4)})
    ours_rate = median_rate(lambda: [signature(text, settings) for _, text in near], len(near), args.repeats)
    lines.append({"part": "peer_minhash_signature", "documents": len(near),
                  "ours_documents_per_s": round(ours_rate, 1),
                  "datatrove_documents_per_s": round(len(near) / peer["signature_s"], 1),
                  "ratio": round(ours_rate * peer["signature_s"] / len(near), 2),
                  "datatrove_stages_s": {name: round(value, 2) for name, value in peer["stages"].items()}})
    for name, decided in peer["filters"].items():
        ours_filter = OUR_FILTERS[name.split("_tfds")[0]]
        ours = {document: ours_filter(text) for document, text in documents}
        theirs = decided["reasons"]
        ids = [document for document, _ in documents]
        line = {"part": "peer_filter", "filter": name, "documents": len(ids),
                "removed_ours": sum(reason is not None for reason in ours.values()),
                "removed_datatrove": sum(reason is not None for reason in theirs.values()),
                "agreement": round(agreement(ids, {d for d in ids if ours[d]}, {d for d in ids if theirs[d]}), 4),
                "ours_documents_per_s": round(median_rate(lambda: [ours_filter(text) for _, text in documents],
                                                          len(ids), args.repeats), 1),
                "datatrove_documents_per_s": round(len(ids) / decided["seconds"], 1)}
        if decided["texts"]:
            both = [(document, text) for document, text in documents if ours[document] is None and not theirs[document]]
            line["kept_text_same"] = round(sum(quality_filters.c4_clean(text)[1] == decided["texts"][document]
                                               for document, text in both) / len(both), 4) if both else None
        lines.append(line)
        lines.append({"part": "peer_filter_differences", "filter": name, "rules": differences(ours, theirs)})
    return lines, peer["version"]


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
    parser.add_argument("--peer-python", default=None,
                        help="the Python of a venv with datatrove (make datatrove-venv: .venv-datatrove/bin/python): "
                             "run it beside ours (default: no peer)")
    args = parser.parse_args(argv)
    if args.documents < 1 or args.repeats < 1 or not all(0 <= share < 1 for share in args.edits):
        parser.error("--documents and --repeats must be positive, --edits in [0, 1)")
    if args.pipeline_documents < 0 or args.workers < 1:
        parser.error("--pipeline-documents must be at least 0, --workers at least 1")
    if args.peer_python and not Path(args.peer_python).is_file():
        parser.error(f"--peer-python {args.peer_python}: no such file (make datatrove-venv builds .venv-datatrove)")
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
    peer_version = None
    if args.peer_python:
        lines, peer_version = peer_lines(args.peer_python, texts, args, settings)
        for line in lines:
            print(json.dumps(line), flush=True)
    if args.pipeline_documents:
        others = [" ".join(lines) for lines in wikipedia_documents((args.documents + args.pipeline_documents) * 20)]
        others = [text for text in others if len(text.split()) >= args.min_words]
        for line in through_the_pipeline(others[args.documents:args.documents + args.pipeline_documents], args,
                                         settings):
            print(json.dumps(line), flush=True)
    print(json.dumps({"part": "settings", "documents": len(texts), "edits": args.edits, "shingle_words":
                      settings.shingle_words, "bands": settings.bands, "rows": settings.rows,
                      "min_jaccard": settings.min_jaccard, "repeats": args.repeats,
                      "pipeline_documents": args.pipeline_documents, "peer": peer_version}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
