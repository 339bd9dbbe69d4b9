"""Corpus cleaning (issue 46): how well near duplicates are found, and how fast, on planted pairs of real text.

Planted pairs: each of ``--documents`` bundled Wikipedia summaries (at least ``--min-words`` words) beside
a copy with a share of its words replaced by made-up ones, at each share of ``--edits``; each pair's true
Jaccard similarity of 5-word shingle sets is computed, and whether the stage's rule
(pipeline/near_duplicates.py: a shared LSH band, then the estimated Jaccard at least ``min_jaccard``)
takes it for a duplicate. Then the quality filters' and the signatures' throughput over the same
documents, timed ``--repeats`` times (the median).

Then the same through the Beam pipeline (``--pipeline-documents`` N > 0): a JSON-lines corpus run by the real
``xlnet preprocess`` (FnApiRunner, ``--workers``) without cleaning and with each of ``--pipeline-cleaning``
(``near``: ``--dedup near``; ``full``: ``--filters gopher,c4,fineweb --dedup exact,near``; ``lines``: the full
set and C4's line dedup, ``--dedup exact,near,lines``; ``near-lines``: ``--dedup near,lines``; each with
``--removed DIR``), all of them ``--pipeline-rounds`` times in turn (plain, near, full, plain, near, full, ...),
each run's seconds, CPU seconds (this process and its worker processes, ``cpu_seconds``) and peak resident
memory printed as it ends (``PeakMemory``: the launcher, this process, and the largest of its worker
processes, sampled from /proc); per cleaning the medians' ratio, what the audit
lists by stage, and a planted pair caught when the audit names one of the two as removed with the other as
the copy kept. The corpus (``--pipeline-corpus``):

- ``planted`` (default): N other summaries of at least ``--min-words`` words, each beside one planted copy
  (the i-th edited by the i-th share of ``--edits``, cyclically), one file, 2 + 1 shards;
- ``crawl``: N distinct documents (``unique_texts``: every bundled summary, then the Bible's chapters, then
  documents of lines drawn at random from those), of which ``--near-share`` each get one near copy and another
  ``--exact-share`` one exact copy (``crawl_corpus``), shuffled into 8 files, 8 + 1 shards; then each cleaning
  part's cost on one core over a sample, scaled to the corpus and the workers (``pipeline_part_costs``).

The vocabulary: ``--vocab``, or one of 2,000 pieces trained on the corpus first (for ``crawl`` its first 5,000
documents; not timed).

With ``--peer-python PATH`` (a venv with datatrove: ``make datatrove-venv`` builds .venv-datatrove), the
peer beside ours, datatrove run by that Python in a subprocess on files in a temporary folder:

- near duplicates: with ``--peer-corpus pairs`` (default) the ``--documents`` summaries (``o<i>``) each beside
  one planted copy (``c<i>``, edited by the i-th share of ``--edits``, cyclically); with ``--peer-corpus crawl``
  a corpus shaped like a crawl, mostly unique documents: every bundled summary of at least
  ``--crawl-min-words`` words (``o<i>``, its lines kept), ``--near-share`` of them each with one near copy
  (``c<i>``) and another ``--exact-share`` each with one exact copy (``e<i>``), shuffled; as one JSON-lines
  file; datatrove's four MinHash stages
  (signatures, buckets, clusters, filter; its LocalPipelineExecutor, one worker) with our settings (5-word
  shingles, 14 buckets of 8 hashes, 64-bit), against our stage's rule without Beam (``our_near_duplicates``:
  band groups, ``pairs_in_band``, connected components, one kept per cluster), and the same without its
  verification (``min_jaccard`` 0: a shared band makes a pair, as in datatrove's buckets). Printed: per
  Jaccard band the share of pairs each puts in one cluster, and the share ours and datatrove decide the same;
  per variant of ours, the share of documents decided the same (``duplicate_agreement``: in a cluster or
  not; ``removed_agreement``: removed or not, which also counts the two sides keeping different copies of a
  cluster; ``removed_agreement_same_copy_kept``: removed or not, datatrove's clusters keeping the copy ours
  keeps), the exact pairs each side caught, the documents each side removed that are in no planted pair, and
  the clusters joining documents of different planted groups (``mixed_clusters``); the signatures' documents/s
  on one core (the first 2 x ``--documents`` documents for ``crawl``), ours over datatrove's
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
the pipeline one per run (``pipeline_run``), per cleaning one per Jaccard band of its planted pairs and one
with the median seconds of the plain and the cleaned runs (``pipeline``), for ``crawl`` the parts' costs,
then the settings (``peer``: datatrove's version, or null).
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bundled_data import REPO, wikipedia_documents  # noqa: E402
from pipeline import quality_filters  # noqa: E402
from pipeline.beam_pipeline import SIGNATURE_BATCH  # noqa: E402
from pipeline.near_duplicates import (Clusters, MinHashSettings, band_keys,  # noqa: E402
                                      estimated_jaccard, exact_key, exact_key_of_words, kept_and_removed, line_hashes,
                                      minhash_words, pairs_in_band, signature, signatures_of, true_jaccard)

BIBLE = REPO / "data" / "corpus" / "kjv_bible.txt.gz"
BANDS = ((0.9, 1.01), (0.85, 0.9), (0.8, 0.85), (0.7, 0.8), (0.6, 0.7), (0.5, 0.6), (0.0, 0.5))
# --pipeline-corpus crawl: its files (a file is read whole by one worker) and its train shards (one worker writes each)
PIPELINE_FILES = 8
# --pipeline-cleaning: the `xlnet preprocess` settings each cleaned run adds (with --removed DIR) to the plain run's
CLEANINGS = {"near": {"dedup": ("near",)},
             "full": {"filters": ("gopher", "c4", "fineweb"), "dedup": ("exact", "near")},
             "lines": {"filters": ("gopher", "c4", "fineweb"), "dedup": ("exact", "near", "lines")},
             "near-lines": {"dedup": ("near", "lines")}}


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


def edited_lines(text: str, share: float, rng: np.random.Generator) -> str:
    """``edited`` keeping the text's lines: the share of all its words replaced, wherever they stand."""
    lines = [line.split() for line in text.split("\n")]
    places = [(row, column) for row, words in enumerate(lines) for column in range(len(words))]
    for index in rng.choice(len(places), int(round(share * len(places))), replace=False):
        row, column = places[index]
        lines[row][column] = f"zq{rng.integers(10 ** 9)}"
    return "\n".join(" ".join(words) for words in lines)


@dataclasses.dataclass
class Corpus:
    """Documents (id, text) in the order they are written, and the planted (original, copy) id pairs."""
    documents: list[tuple[str, str]]
    near_pairs: list[tuple[str, str]]
    exact_pairs: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def planted(self) -> set[str]:
        return {document for pair in self.near_pairs + self.exact_pairs for document in pair}


def crawl_corpus(texts: list[str], near_share: float, exact_share: float, edits: list[float],
                 rng: np.random.Generator) -> Corpus:
    """A corpus shaped like a crawl: every one of ``texts`` as ``o<i>``; a random ``near_share`` of them each
    with one near copy ``c<i>`` (the j-th copy edited by the j-th share of ``edits``, cyclically, its lines
    kept), another ``exact_share`` each with one exact copy ``e<i>``; all in a random order."""
    order = rng.permutation(len(texts))
    near_count, exact_count = int(round(near_share * len(texts))), int(round(exact_share * len(texts)))
    near_of, exact_of = sorted(order[:near_count].tolist()), sorted(order[near_count:near_count + exact_count].tolist())
    documents = [(f"o{i}", text) for i, text in enumerate(texts)]
    documents += [(f"c{i}", edited_lines(texts[i], edits[j % len(edits)], rng)) for j, i in enumerate(near_of)]
    documents += [(f"e{i}", texts[i]) for i in exact_of]
    return Corpus([documents[k] for k in rng.permutation(len(documents))], [(f"o{i}", f"c{i}") for i in near_of],
                  [(f"o{i}", f"e{i}") for i in exact_of])


def crawl_texts(min_words: int = 0) -> list[str]:
    """Every bundled Wikipedia summary of at least ``min_words`` words, its lines kept."""
    return ["\n".join(lines) for lines in wikipedia_documents(10 ** 9)
            if len(" ".join(lines).split()) >= max(min_words, 1)]


def unique_texts(count: int, seed: int) -> list[str]:
    """``count`` distinct documents, lines kept: every bundled Wikipedia summary, then the Bible's chapters, then
    as many as are still missing made of lines drawn at random (uniformly, with replacement) from all those
    documents' lines, as many lines as a summary drawn at random has."""
    with gzip.open(BIBLE, "rt", encoding="utf-8") as handle:
        chapters = [chapter.strip("\n") for chapter in handle.read().split("\n\n") if chapter.strip()]
    summaries = crawl_texts()
    texts = summaries + chapters
    if count > len(texts):
        pool = [line for text in texts for line in text.split("\n") if line.strip()]
        lengths = [text.count("\n") + 1 for text in summaries]
        rng = np.random.default_rng(seed + 4)
        seen = set(texts)
        while len(texts) < count:
            text = "\n".join(pool[j] for j in rng.integers(len(pool), size=lengths[rng.integers(len(lengths))]))
            if text not in seen:
                seen.add(text)
                texts.append(text)
    return texts[:count]


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Beam's worker processes), from /proc (empty where there is none)."""
    parents = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class PeakMemory:
    """While open, samples every ``every`` s the resident memory of this process (VmRSS: the launcher, with the
    benchmark's own data) and the peak (VmHWM) of each process below it (Beam's workers): ``launcher_mib`` and
    ``worker_mib`` (the largest worker's), None where /proc cannot tell (growth in a worker's last
    ``every`` s is missed)."""

    def __init__(self, every: float = 0.25):
        self.every, self.launcher, self.workers = every, 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.launcher = max(self.launcher, status_kib(os.getpid(), "VmRSS") or 0)
            for pid in descendants(os.getpid()):
                peak = status_kib(pid, "VmHWM")
                if peak:
                    self.workers[pid] = max(self.workers.get(pid, 0), peak)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def launcher_mib(self) -> float | None:
        return round(self.launcher / 1024, 1) if self.launcher else None

    @property
    def worker_mib(self) -> float | None:
        return round(max(self.workers.values()) / 1024, 1) if self.workers else None


def pipeline_run(inputs: list[Path], vocab: str, output: Path, workers: int, shards: tuple[int, int],
                 **cleaning) -> float:
    """Seconds of one real `xlnet preprocess` of ``inputs`` (small records, so that the corpus fills them)."""
    from pipeline.preprocess_command import preprocess
    from pipeline.preprocess_config import PreprocessConfig

    config = PreprocessConfig(inputs=tuple(map(str, inputs)), output=str(output), vocab=vocab, seq_len=128,
                              reuse_len=64, num_predict=21, num_streams=8, num_shards=shards[0],
                              valid_shards=shards[1], **cleaning)
    began = time.perf_counter()
    preprocess(config, workers=workers,
               runner_options=["--direct_running_mode=in_memory"] if workers == 1 else [])
    return time.perf_counter() - began


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and of its children waited for (FnApiRunner's worker
    processes, once a run has ended)."""
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def planted_pipeline_corpus(texts: list[str], args: argparse.Namespace) -> Corpus:
    """``texts`` (``o<i>``), each followed by one planted copy (``c<i>``, the i-th edited by the i-th share of
    ``--edits``, cyclically)."""
    rng = np.random.default_rng(args.seed + 1)
    copies = [edited(text, args.edits[i % len(args.edits)], rng) for i, text in enumerate(texts)]
    return Corpus([(f"{kind}{i}", text) for i, pair in enumerate(zip(texts, copies)) for kind, text in zip("oc", pair)],
                  [(f"o{i}", f"c{i}") for i in range(len(texts))])


def readers_dedup_keys(texts: list[str], settings: MinHashSettings) -> list[tuple[list[bytes], np.ndarray]]:
    """The exact keys and signatures as ReadDocuments computes them: one split into words per document, the
    signatures SIGNATURE_BATCH documents at a time."""
    keys = []
    for start in range(0, len(texts), SIGNATURE_BATCH):
        words = [minhash_words(text) for text in texts[start:start + SIGNATURE_BATCH]]
        keys.append(([exact_key_of_words(each, settings.seed) for each in words], signatures_of(words, settings)))
    return keys


def part_costs(corpus: Corpus, workers: int, repeats: int, sample: int = 1000) -> dict:
    """Each cleaning part's seconds on one core over a sample of the corpus, scaled to the whole corpus and
    shared by ``workers``: what it would add to a run if every document passed every part."""
    texts = [text for _, text in corpus.documents[:sample]]
    parts = {"minhash_signature": lambda: [signature(text, MinHashSettings()) for text in texts],
             "exact_key": lambda: [exact_key(text) for text in texts],
             "exact_key_and_signatures_batched": lambda: readers_dedup_keys(texts, MinHashSettings()),
             "line_hashes": lambda: [line_hashes(text.split("\n")) for text in texts],
             "gopher_repetition": lambda: [quality_filters.gopher_repetition(text) for text in texts],
             "gopher_quality": lambda: [quality_filters.gopher_quality(text) for text in texts],
             "c4": lambda: [quality_filters.c4_clean(text) for text in texts],
             "fineweb": lambda: [quality_filters.fineweb_quality(text) for text in texts]}
    scale = len(corpus.documents) / len(texts) / workers
    return {name: round(scale * len(texts) / median_rate(action, len(texts), repeats), 2)
            for name, action in parts.items()}


def through_the_pipeline(corpus: Corpus, args: argparse.Namespace, settings: MinHashSettings,
                         vocab_texts: list[str], files: int, shards: tuple[int, int]) -> list[dict]:
    """``corpus`` through `xlnet preprocess`, ``--pipeline-rounds`` times plain then each of
    ``--pipeline-cleaning`` in turn (A B A B), each run's line printed as it ends: the lines to print after."""
    lines, seconds, memory, audits, cpu = [], defaultdict(list), defaultdict(list), {}, defaultdict(list)
    count = len(corpus.documents)
    with tempfile.TemporaryDirectory(prefix="cleaning-benchmark-") as directory:
        work = Path(directory)
        inputs = [work / ("planted.jsonl" if files == 1 else f"crawl-{k:02d}.jsonl") for k in range(files)]
        per_file = -(-count // files)
        for k, path in enumerate(inputs):
            path.write_text("".join(json.dumps({"id": document, "text": text}) + "\n"
                                    for document, text in corpus.documents[k * per_file:(k + 1) * per_file]),
                            encoding="utf-8")
        vocab = args.vocab or trained_vocab(vocab_texts, work)
        for round_ in range(args.pipeline_rounds):
            for cleaning in ["plain"] + args.pipeline_cleaning:
                output, removed = work / f"{cleaning}-{round_}", work / f"removed-{cleaning}-{round_}"
                options = {} if cleaning == "plain" else {**CLEANINGS[cleaning], "removed": str(removed)}
                began = cpu_seconds()
                with PeakMemory() as peak:
                    took = pipeline_run(inputs, vocab, output, args.workers, shards, **options)
                seconds[cleaning].append(took)
                cpu[cleaning].append(cpu_seconds() - began)
                memory[cleaning].append(peak.worker_mib)
                print(json.dumps({"part": "pipeline_run", "round": round_, "cleaning": cleaning,
                                  "seconds": round(took, 2), "cpu_s": round(cpu[cleaning][-1], 2),
                                  "documents_per_s": round(count / took, 1),
                                  "launcher_peak_mib": peak.launcher_mib, "worker_peak_mib": peak.worker_mib}),
                      flush=True)
                if cleaning != "plain":
                    audits[cleaning] = [json.loads(line) for path in sorted(removed.glob("*.jsonl"))
                                        for line in path.read_text(encoding="utf-8").splitlines()]
                shutil.rmtree(output, ignore_errors=True)
                shutil.rmtree(removed, ignore_errors=True)
    texts = dict(corpus.documents)
    jaccards = [true_jaccard(texts[a], texts[b], settings) for a, b in corpus.near_pairs]
    planted = corpus.planted()
    summaries = []
    for cleaning in args.pipeline_cleaning:
        named = {(line["id"], line.get("kept")) for line in audits[cleaning]}
        caught = [(a, b) in named or (b, a) in named for a, b in corpus.near_pairs]
        lines += [{**line, "cleaning": cleaning} for line in
                  band_lines("pipeline_near_duplicates", np.array(list(zip(jaccards, caught))).reshape(-1, 2))]
        plain_s, cleaned_s = statistics.median(seconds["plain"]), statistics.median(seconds[cleaning])
        outside = [[line["id"], line["kept"]] for line in audits[cleaning]
                   if line["stage"] in ("exact", "near") and line["id"] not in planted]
        summaries.append({
            "part": "pipeline", "cleaning": cleaning, "corpus": args.pipeline_corpus, "documents": count,
            "workers": args.workers, "rounds": args.pipeline_rounds, "plain_s": round(plain_s, 2),
            "cleaned_s": round(cleaned_s, 2), "ratio": round(cleaned_s / plain_s, 3),
            "plain_cpu_s": round(statistics.median(cpu["plain"]), 2),
            "cleaned_cpu_s": round(statistics.median(cpu[cleaning]), 2),
            "plain_documents_per_s": round(count / plain_s, 1), "cleaned_documents_per_s": round(count / cleaned_s, 1),
            "plain_worker_peak_mib": max(memory["plain"], key=lambda value: value or 0),
            "cleaned_worker_peak_mib": max(memory[cleaning], key=lambda value: value or 0),
            "removed": len(audits[cleaning]),
            "removed_by_stage": dict(sorted(Counter(line["stage"] for line in audits[cleaning]).items())),
            "near_pairs": len(corpus.near_pairs), "near_pairs_caught": sum(caught),
            "exact_pairs": len(corpus.exact_pairs),
            "exact_pairs_caught": sum((a, b) in named or (b, a) in named for a, b in corpus.exact_pairs),
            "deduplicated_outside_planted": len(outside),
            "deduplicated_outside_planted_first": sorted(outside, key=lambda pair: id_order(pair[0]))[:10]})
    if args.pipeline_corpus == "crawl":
        summaries.append({"part": "pipeline_part_costs", "documents": count, "workers": args.workers,
                          "seconds_per_worker": part_costs(corpus, args.workers, args.repeats)})
    return lines + summaries


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
timed = near[:request["timed"]]
signature_s = median_seconds(lambda: [signer.get_signature(signer.get_shingles(doc["text"])) for doc in timed])

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


def in_cluster(cluster: dict, document: str):
    """``document``'s cluster in ``cluster`` (an id -> cluster map; absent, None or -1: in none, None)."""
    value = cluster.get(document, -1)
    return None if value in (None, -1) else value


def cluster_members(cluster: dict) -> list[list[str]]:
    """The documents of each cluster of ``cluster`` (an id -> cluster map), in the map's order."""
    members = defaultdict(list)
    for document in cluster:
        if in_cluster(cluster, document) is not None:
            members[in_cluster(cluster, document)].append(document)
    return list(members.values())


def removed_by_our_rule(cluster: dict, seed: int) -> set:
    """The documents removed if every cluster of ``cluster`` (an id -> cluster map) kept the copy our stage keeps
    (the least seeded hash of the id): the peer's clusters under our choice of copy."""
    return set(kept_and_removed([group for group in cluster_members(cluster) if len(group) > 1], seed))


def pair_caught(pairs: list[tuple[str, str]], cluster: dict) -> list[bool]:
    """Whether each planted pair (two ids) is in one cluster: ``cluster`` maps an id to its cluster."""
    return [in_cluster(cluster, a) is not None and in_cluster(cluster, a) == in_cluster(cluster, b) for a, b in pairs]


def mixed_clusters(cluster: dict) -> list[list[str]]:
    """The clusters of ``cluster`` (an id -> cluster map) holding documents of more than one planted group (the
    number after an id's letter: ``o7``, its copies ``c7`` and ``e7``), each as its sorted ids: clusters that
    join documents no copy was planted between."""
    return sorted((sorted(ids, key=id_order) for ids in cluster_members(cluster) if len({d[1:] for d in ids}) > 1),
                  key=lambda ids: id_order(ids[0]))


def run_peer(python: str, near: list[tuple[str, str]], documents: list[tuple[str, str]], settings: MinHashSettings,
             repeats: int, timed: int) -> dict:
    """datatrove's MinHash pipeline on ``near`` (its signatures timed on the first ``timed``) and its filters on
    ``documents``, in the peer venv."""
    with tempfile.TemporaryDirectory(prefix="cleaning-peer-") as directory:
        work = Path(directory)
        (work / "near").mkdir()
        for path, rows in ((work / "near" / "near.jsonl", near), (work / "filters.jsonl", documents)):
            path.write_text("".join(json.dumps({"id": document, "text": text}) + "\n" for document, text in rows),
                            encoding="utf-8")
        (work / "request.json").write_text(json.dumps({
            "repeats": repeats, "shingle_words": settings.shingle_words, "bands": settings.bands,
            "rows": settings.rows, "timed": timed}))
        out = subprocess.run([str(Path(python).absolute()), "-c", PEER_SCRIPT, str(work)], capture_output=True,
                             text=True, check=False, cwd=work)
    if out.returncode:
        raise SystemExit(f"the datatrove peer failed ({python}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


OUR_FILTERS = {"gopher_quality": quality_filters.gopher_quality, "gopher_repetition": quality_filters.gopher_repetition,
               "c4": lambda text: quality_filters.c4_clean(text)[0], "fineweb": quality_filters.fineweb_quality}


def peer_lines(python: str, texts: list[str], args: argparse.Namespace,
               settings: MinHashSettings) -> tuple[list[dict], str]:
    """Ours beside datatrove's: near duplicates on planted pairs (``--peer-corpus pairs``) or on a crawl-shaped
    corpus (``crawl``), signatures' documents/s, the filters on a degraded corpus: (the lines to print,
    datatrove's version)."""
    rng = np.random.default_rng(args.seed + 3)
    if args.peer_corpus == "pairs":
        corpus = Corpus(planted_corpus(texts, args.edits, rng), [(f"o{i}", f"c{i}") for i in range(len(texts))])
    else:
        corpus = crawl_corpus(crawl_texts(args.crawl_min_words), args.near_share, args.exact_share, args.edits, rng)
    near = corpus.documents
    timed = len(near) if args.peer_corpus == "pairs" else min(len(near), 2 * args.documents)
    documents = filter_corpus(args.documents, args.seed)
    peer = run_peer(python, near, documents, settings, args.repeats, timed)
    ids = [document for document, _ in near]
    text_of = dict(near)
    jaccards = [true_jaccard(text_of[a], text_of[b], settings) for a, b in corpus.near_pairs]
    peer_caught = pair_caught(corpus.near_pairs, peer["cluster"])
    peer_clustered = {document for document in peer["cluster"] if in_cluster(peer["cluster"], document) is not None}
    # ours as the stage runs (a candidate pair verified by its estimated Jaccard), and without the verification
    # (min_jaccard 0: any shared band makes a pair, as datatrove's buckets do)
    variants = {"caught_ours": settings, "caught_ours_unverified": dataclasses.replace(settings, min_jaccard=0.0)}
    decided = {name: our_near_duplicates(near, variant) for name, variant in variants.items()}
    caught = {name: pair_caught(corpus.near_pairs, cluster) for name, (_, cluster) in decided.items()}
    same = np.equal(caught["caught_ours"], peer_caught)
    by_band = {name: band_lines("peer_near_duplicates", np.array(list(zip(jaccards, values))).reshape(-1, 2))
               for name, values in {**caught, "caught_datatrove": peer_caught, "decided_same": same}.items()}
    lines = [{**{key: line[key] for key in ("part", "jaccard_from", "jaccard_below", "pairs")},
              **{name: by_band[name][band]["caught"] for name in by_band}}
             for band, line in enumerate(by_band["caught_datatrove"])]
    planted = corpus.planted()
    peer_mixed = mixed_clusters(peer["cluster"])
    for name, variant in variants.items():
        removed, cluster = decided[name]
        mixed = mixed_clusters(cluster)
        lines.append({"part": "peer_near_agreement", "corpus": args.peer_corpus, "min_jaccard": variant.min_jaccard,
                      "documents": len(ids), "near_pairs": len(corpus.near_pairs),
                      "exact_pairs": len(corpus.exact_pairs),
                      "removed_ours": len(removed), "removed_datatrove": len(peer["removed"]),
                      "duplicate_agreement": round(agreement(ids, set(cluster), peer_clustered), 4),
                      "removed_agreement": round(agreement(ids, set(removed), set(peer["removed"])), 4),
                      "removed_agreement_same_copy_kept": round(agreement(
                          ids, set(removed), removed_by_our_rule(peer["cluster"], variant.seed)), 4),
                      "pairs_decided_same": round(float(np.mean(np.equal(caught[name], peer_caught))), 4)
                      if corpus.near_pairs else None,
                      "exact_caught_ours": sum(pair_caught(corpus.exact_pairs, cluster)),
                      "exact_caught_datatrove": sum(pair_caught(corpus.exact_pairs, peer["cluster"])),
                      "removed_unplanted_ours": sorted((d for d in removed if d not in planted), key=id_order),
                      "removed_unplanted_datatrove": sorted((d for d in peer["removed"] if d not in planted),
                                                            key=id_order),
                      "mixed_clusters_ours": mixed, "mixed_clusters_datatrove": peer_mixed})
    timed_texts = [text for _, text in near[:timed]]
    ours_rate = median_rate(lambda: [signature(text, settings) for text in timed_texts], timed, args.repeats)
    lines.append({"part": "peer_minhash_signature", "documents": timed,
                  "ours_documents_per_s": round(ours_rate, 1),
                  "datatrove_documents_per_s": round(timed / peer["signature_s"], 1),
                  "ratio": round(ours_rate * peer["signature_s"] / timed, 2),
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
                        help="documents run through `xlnet preprocess` (0: not run): with --pipeline-corpus planted, "
                             "other summaries planted with one copy each; with crawl, unique documents of which "
                             "--near-share and --exact-share get a copy")
    parser.add_argument("--pipeline-corpus", choices=("planted", "crawl"), default="planted",
                        help="planted: summaries of at least --min-words words, each with one near copy, one file; "
                             "crawl: every summary, the Bible's chapters, then documents of lines drawn at random, "
                             f"in {PIPELINE_FILES} files")
    parser.add_argument("--pipeline-cleaning", nargs="+", choices=tuple(CLEANINGS), default=["near"],
                        help="the cleaned runs timed beside the plain one: near (--dedup near), full (--filters "
                             "gopher,c4,fineweb --dedup exact,near)")
    parser.add_argument("--pipeline-rounds", type=int, default=1,
                        help="times the plain run and each cleaned one run, alternately (the medians compared)")
    parser.add_argument("--peer-corpus", choices=("pairs", "crawl"), default="pairs",
                        help="the near-duplicate corpus compared with datatrove: pairs (--documents summaries, each "
                             "with one copy) or crawl (every summary of at least --crawl-min-words words, "
                             "--near-share and --exact-share of them with a copy)")
    parser.add_argument("--crawl-min-words", type=int, default=50,
                        help="--peer-corpus crawl: the shortest summary used, in words")
    parser.add_argument("--near-share", type=float, default=0.1,
                        help="crawl corpora: the share of documents given one near copy (edited by --edits in turn)")
    parser.add_argument("--exact-share", type=float, default=0.01,
                        help="crawl corpora: the share of other documents given one exact copy")
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
    if args.pipeline_rounds < 1 or args.crawl_min_words < 0:
        parser.error("--pipeline-rounds must be at least 1, --crawl-min-words at least 0")
    if not (0 <= args.near_share <= 1 and 0 <= args.exact_share <= 1 and args.near_share + args.exact_share <= 1):
        parser.error("--near-share and --exact-share must be in [0, 1], their sum at most 1")
    if args.peer_corpus == "crawl" and not args.peer_python:
        parser.error("--peer-corpus crawl compares with datatrove: give --peer-python")
    if args.pipeline_corpus == "crawl" and not args.pipeline_documents:
        parser.error("--pipeline-corpus crawl: give --pipeline-documents N (the unique documents)")
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
        if args.pipeline_corpus == "planted":
            others = [" ".join(lines) for lines in wikipedia_documents((args.documents + args.pipeline_documents) * 20)]
            others = [text for text in others if len(text.split()) >= args.min_words]
            corpus = planted_pipeline_corpus(others[args.documents:args.documents + args.pipeline_documents], args)
            vocab_texts = [text for kind in "oc" for document, text in corpus.documents if document[0] == kind]
            files, shards = 1, (2, 1)
        else:
            unique = unique_texts(args.pipeline_documents, args.seed)
            corpus = crawl_corpus(unique, args.near_share, args.exact_share, args.edits,
                                  np.random.default_rng(args.seed + 5))
            vocab_texts, files, shards = unique[:5000], PIPELINE_FILES, (PIPELINE_FILES, 1)
        for line in through_the_pipeline(corpus, args, settings, vocab_texts, files, shards):
            print(json.dumps(line), flush=True)
    print(json.dumps({"part": "settings", "documents": len(texts), "edits": args.edits, "shingle_words":
                      settings.shingle_words, "bands": settings.bands, "rows": settings.rows,
                      "min_jaccard": settings.min_jaccard, "repeats": args.repeats,
                      "pipeline_documents": args.pipeline_documents, "pipeline_corpus": args.pipeline_corpus,
                      "pipeline_cleaning": args.pipeline_cleaning, "pipeline_rounds": args.pipeline_rounds,
                      "peer_corpus": args.peer_corpus, "near_share": args.near_share, "exact_share": args.exact_share,
                      "crawl_min_words": args.crawl_min_words, "peer": peer_version}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
