"""Long documents: what reading more segments of a text is worth, and what it costs.

Three parts, each printing JSON lines (docs/benchmarks.md, "Long documents"):

* ``accuracy``: a long-document classification task built from the bundled corpus (below). The
  same pretrained tiny model (a tiny-preset `xlnet train` run on the bundled corpus, or
  ``--pretrained MODEL_DIR``) is fine-tuned by real `xlnet finetune` processes with ``max_segments``
  N = 1, 2, 4, 8 at the same segment length L (``--segment-length``) and a memory of L states
  (N > 1), same steps, batch and seed. Per N: dev accuracy (eval_results.json), the median step
  time and the largest allocator peak over the run's windows after the first (its TensorBoard
  ``examples_per_sec`` and ``peak_memory_bytes``), and `xlnet plan`'s predicted peak.
* ``training_step``: one training step at Base shape (12 x 768, segments of 512 pieces, memory
  512, batch ``--step-batch``, float32, random weights, the bundled 8000-piece vocabulary) for
  each N, each N in a process of its own through `xlnet finetune`'s controller: one step to
  compile, then ``--timed-steps`` steps timed (median) under the allocator's peak, beside the
  planner's prediction.
* ``read_cost``: reading one document of 4,096 pieces at Base shape, forward only (inference): by
  recurrence (``XLNetNetwork.encode_segments`` over 8 segments of 512 with a memory of 512) and in
  one pass (``encode`` of 4,096 pieces), each in a process of its own: one call to compile, then
  the median of ``--repeats`` calls and the allocator's peak over them.

Then one ``goals`` line checks the figures against the issue's goals.

The task. Every document is 8 passages of L - 2 pieces, so that it fills 8 segments of L (the
last one ends with <sep> <cls>), each passage a run of consecutive sentences from a random place in
one of the two texts of data/corpus: the Wikipedia summaries (wiki_summaries_en.txt.gz) or the
King James Bible (kjv_bible.txt.gz). k of the 8 passages are Bible passages, k drawn uniformly
from {2, 3, 5, 6} and their places at random; the label is the majority source ("bible" when
k > 4, else "wikipedia"). One passage says little about the label: a reader of one passage that
guesses its source is right 68.75% of the time (k/8 or (8-k)/8 on average), one of all 8 always.
Training documents take their passages from the first 80% of each text's documents (Wikipedia
articles, Bible chapters), dev documents from the last 20%.

    .venv/bin/python benchmarks/long_documents.py                      # all three parts
    .venv/bin/python benchmarks/long_documents.py --parts accuracy --pretrained demo_output/model
    .venv/bin/python benchmarks/long_documents.py --parts read_cost --repeats 3
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CORPUS = REPO / "data" / "corpus"
SOURCES = {"wikipedia": CORPUS / "wiki_summaries_en.txt.gz", "bible": CORPUS / "kjv_bible.txt.gz"}
PASSAGES = 8
BIBLE_COUNTS = (2, 3, 5, 6)  # Bible passages per document: a majority either way, never a tie
TRAIN_SHARE = 0.8  # of each text's documents, for training passages; the rest for dev
PARTS = ("accuracy", "training_step", "read_cost")
# The goals (docs/benchmarks.md, "Long documents").
GOALS = {"accuracy_gain_points": 5.0, "peak_ratio_8_vs_1": 1.3, "step_time_vs_n_times_1": 1.2,
         "read_speedup": 2.0, "read_memory_cut": 4.0}


# ----------------------------------------------------------------------------------- the task
def source_documents(path: Path) -> list[list[str]]:
    """The documents of a corpus file (a blank line between documents), each a list of its lines."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [block.splitlines() for block in handle.read().split("\n\n") if block.strip()]


def pools(split: str) -> dict[str, list[str]]:
    """Per source, the lines of its documents for ``split``: the first TRAIN_SHARE of them for
    "train", the rest for "dev" (passages of dev documents come from text training never sees)."""
    result = {}
    for name, path in SOURCES.items():
        documents = source_documents(path)
        cut = int(len(documents) * TRAIN_SHARE)
        chosen = documents[:cut] if split == "train" else documents[cut:]
        result[name] = [line for document in chosen for line in document if line.strip()]
    return result


class PieceCounter:
    """Pieces of a text as the fine-tuning encoder cuts it: the model directory's SentencePiece
    model on the text normalised as preprocessing and serving normalise it."""

    def __init__(self, model_dir: Path):
        import sentencepiece as spm

        from trainer.runtime.model_dir import ModelDirectory

        directory = ModelDirectory(str(model_dir))
        self.uncased = bool(directory.uncased)
        self.processor = spm.SentencePieceProcessor(model_proto=directory.sp_model_proto)

    def __call__(self, text: str) -> int:
        from tfrecords.text_normalization import normalize_text

        return len(self.processor.encode(normalize_text(text, self.uncased)))


def passage(lines: list[str], start: int, pieces: int, count: PieceCounter) -> str:
    """The longest run of whole words from line ``start`` on (wrapping round) of at most ``pieces`` pieces."""
    words: list[str] = []
    line = start
    while count(" ".join(words)) <= pieces:
        words += lines[line % len(lines)].split()
        line += 1
    low, high = 0, len(words)  # count(words[:low]) <= pieces < count(words[:high])
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if count(" ".join(words[:middle])) <= pieces else (low, middle)
    return " ".join(words[:low])


def documents(split: str, count: int, segment_length: int, counter: PieceCounter, seed: int) -> list[dict]:
    """``count`` documents of PASSAGES passages of ``segment_length - 2`` pieces (module docstring)."""
    rng = random.Random(f"{split}-{seed}")
    lines = pools(split)
    rows = []
    for _ in range(count):
        bible = rng.choice(BIBLE_COUNTS)
        sources = ["bible"] * bible + ["wikipedia"] * (PASSAGES - bible)
        rng.shuffle(sources)
        texts = [passage(lines[name], rng.randrange(len(lines[name])), segment_length - 2, counter)
                 for name in sources]
        rows.append({"text": " ".join(texts), "label": "bible" if bible > PASSAGES // 2 else "wikipedia",
                     "bible_passages": bible})
    return rows


def write_task(workdir: Path, counter: PieceCounter, segment_length: int, train: int, dev: int,
               seed: int) -> tuple[Path, Path, dict]:
    """train.tsv and dev.tsv of the task (text, label), and a description of what they hold."""
    files, described = [], {}
    for split, count in (("train", train), ("dev", dev)):
        rows = documents(split, count, segment_length, counter, seed)
        path = workdir / f"long-{split}-L{segment_length}.tsv"
        path.write_text("text\tlabel\n" + "".join(f"{row['text']}\t{row['label']}\n" for row in rows))
        files.append(path)
        lengths = [counter(row["text"]) for row in rows]
        described[split] = {"documents": count, "bible_majority": sum(row["label"] == "bible" for row in rows),
                            "pieces_min": min(lengths), "pieces_max": max(lengths),
                            "pieces_mean": round(statistics.mean(lengths), 1)}
    return files[0], files[1], described


# ------------------------------------------------------------------------------ fine-tuning
def pretrained_model(args: argparse.Namespace, workdir: Path) -> Path:
    """--pretrained, or a tiny-preset pretraining run of ``--pretrain-steps`` on the bundled corpus
    (a finished one in --workdir is reused)."""
    if args.pretrained:
        return Path(args.pretrained)
    import bundled_data
    from finetune import xlnet

    run = workdir / "pretrain"
    if not (run / "checkpoints" / f"ckpt-{args.pretrain_steps}.index").exists():
        data = bundled_data.prepare(workdir / "bundled")
        xlnet("train", "--data", data, "--model-dir", str(run), "--preset", "tiny", "--set",
              f"train_steps={args.pretrain_steps}", "--set", f"checkpoint_every={args.pretrain_steps}",
              "--set", f"eval_every={args.pretrain_steps}", "--set", "steps_per_loop=50")
    return run


def segment_settings(segments: int, segment_length: int, mem_len: int) -> list[str]:
    """`xlnet finetune` flags of N segments of L with a memory of ``mem_len`` (none for one segment)."""
    flags = ["--max-seq-length", str(segment_length), "--set", f"max_segments={segments}"]
    return flags + (["--set", f"mem_len={mem_len}"] if segments > 1 else [])


def fine_tune(args: argparse.Namespace, segments: int, files: tuple[Path, Path], init: Path, out: Path) -> dict:
    """One `xlnet finetune` with ``segments``: dev scores, step time, peak memory, the plan's peak."""
    import shutil

    from finetune import xlnet  # benchmarks/finetune.py: one `xlnet` process, its output or an exit on failure

    from trainer.planning.plan import Workload, make_plan
    from trainer.runtime.model_dir import ModelDirectory

    memory = args.mem_len or args.segment_length
    shutil.rmtree(out, ignore_errors=True)
    began = time.time()
    log = xlnet("finetune", "--task", "classification", "--train", str(files[0]), "--eval", str(files[1]),
                "--model-dir", str(out), "--init-checkpoint", str(init),
                *segment_settings(segments, args.segment_length, memory),
                "--set", f"train_steps={args.steps}", "--set", f"eval_every={args.steps}",
                "--set", f"checkpoint_every={args.steps}", "--set", f"steps_per_loop={args.steps_per_loop}",
                "--set", f"train_batch_size={args.batch}", "--set", f"learning_rate={args.learning_rate}",
                "--set", f"warmup_steps={max(1, args.steps // 10)}", "--set", f"seed={args.seed}")
    seconds = time.time() - began
    directory = ModelDirectory(str(out))
    results = json.loads((out / "eval_results.json").read_text())
    config, model = directory.finetune_config, directory.model_config
    # the first window is the one compiling step: left out
    rates = list(directory.scalars("train", "examples_per_sec").items())[1:]
    peaks = list(directory.scalars("train", "peak_memory_bytes").values())[1:]
    step_s = statistics.median(config.examples_per_step / rate for _, rate in rates) if rates else None
    truncated = [line for line in log.splitlines() if line.endswith("are truncated")]  # the run's own count
    return {"benchmark": "long_documents", "part": "accuracy", "max_segments": segments,
            "segment_length": args.segment_length, "mem_len": memory if segments > 1 else 0,
            "steps": args.steps, "batch": args.batch, "seed": args.seed,
            "dev": {key: round(results[key], 4) for key in ("accuracy", "macro_f1", "loss")},
            "step_s": round(step_s, 4) if step_s else None, "timed_windows": len(rates),
            "measured_peak_bytes": int(max(peaks)) if peaks else None,
            "predicted_peak_bytes": make_plan(Workload(model, config)).predicted_peak_bytes,
            "truncated": truncated, "seconds": round(seconds, 1)}


# --------------------------------------------------------------------- a training step at Base
def step_child(segments: int, args: argparse.Namespace) -> dict:
    """One training step at Base shape with ``segments`` (run in a process of its own)."""
    import tensorflow as tf

    from trainer.launch.finetuning_run import FinetuneSettings, FinetuningRun, build_finetuning
    from trainer.planning.plan import Workload, make_plan

    workdir = Path(args.workdir)
    vocab, train = base_task(workdir, args)
    sets = (f"max_segments={segments}", *((f"mem_len={args.base_length}",) if segments > 1 else ()),
            *((f"n_layer={args.cost_n_layer}",) if args.cost_n_layer else ()),
            f"train_batch_size={args.step_batch}", "steps_per_loop=1", "train_steps=100", "eval_every=0",
            "checkpoint_every=100")
    settings = FinetuneSettings(task="classification", preset=args.cost_preset, overrides=sets,
                                max_seq_length=args.base_length)
    controller = build_finetuning(FinetuningRun(settings, train=str(train), eval=str(train),
                                                model_dir=tempfile.mkdtemp(dir=workdir), vocab=str(vocab)),
                                  log=lambda line: None)
    iterator = iter(controller.train_dataset())
    controller.run_steps(iterator, 1)  # traces and compiles
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    times = []
    for _ in range(args.timed_steps):
        start = time.perf_counter()
        controller.run_steps(iterator, 1)
        times.append(time.perf_counter() - start)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    plan = make_plan(Workload(controller.task.model_config, controller.config))
    return {"benchmark": "long_documents", "part": "training_step", "preset": args.cost_preset,
            "n_layer": controller.task.model_config.n_layer, "d_model": controller.task.model_config.d_model,
            "max_segments": segments,
            "segment_length": args.base_length, "mem_len": args.base_length if segments > 1 else 0,
            "batch": args.step_batch, "step_s": round(statistics.median(times), 3), "timed_steps": len(times),
            "measured_peak_bytes": int(peak), "measured_step_bytes": int(peak - before),
            "predicted_peak_bytes": plan.predicted_peak_bytes,
            "prediction_ratio": round(plan.predicted_peak_bytes / peak, 3)}


def base_task(workdir: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The bundled vocabulary and a file of documents 8 segments of ``--base-length`` long (the task above)."""
    import bundled_data

    vocab = bundled_data.vocabulary(workdir / "bundled")  # the vocabulary only: no records are read
    train = workdir / f"base-L{args.base_length}.tsv"
    if not train.exists():
        counter = PieceCounter.__new__(PieceCounter)
        import sentencepiece as spm

        counter.uncased, counter.processor = False, spm.SentencePieceProcessor(model_file=str(vocab))
        rows = documents("train", 16, args.base_length, counter, args.seed)
        train.write_text("text\tlabel\n" + "".join(f"{row['text']}\t{row['label']}\n" for row in rows))
    return vocab, train


# ------------------------------------------------------------------- reading 4,096 pieces
def read_child(mode: str, args: argparse.Namespace) -> dict:
    """Forward time and peak memory of reading one document of segments x length pieces at Base
    shape: by recurrence ("recurrence") or in one pass ("one_pass"). Run in a process of its own."""
    import tensorflow as tf

    from trainer.models.config import model_preset, sequence_model_config
    from trainer.models.network import build_network

    segments, length = args.read_segments, args.base_length
    pieces = segments * length
    model = sequence_model_config(model_preset(args.cost_preset)).replace(vocab_size=8000)
    if args.cost_n_layer:
        model = model.replace(n_layer=args.cost_n_layer)
    if mode == "recurrence":
        model = model.replace(mem_len=length, reuse_len=0)
    network = build_network(model)
    ids = tf.random.stateless_uniform([1, pieces], seed=[args.seed, 0], minval=5, maxval=8000, dtype=tf.int32)
    zeros = tf.zeros_like(ids)
    if mode == "recurrence":
        shaped = [tf.reshape(tensor, [1, segments, length]) for tensor in (ids, zeros, tf.ones_like(ids))]

        @tf.function
        def read():
            return network.encode_segments(*shaped)[0][:, -1]
    else:
        @tf.function
        def read():
            return network.encode(ids, zeros, input_mask=tf.ones_like(ids))[0][:, -length:]
    read()  # traces and compiles
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        read().numpy()
        times.append(time.perf_counter() - start)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    return {"benchmark": "long_documents", "part": "read_cost", "mode": mode, "preset": args.cost_preset,
            "n_layer": model.n_layer, "d_model": model.d_model, "pieces": pieces,
            "segments": segments if mode == "recurrence" else 1,
            "segment_length": length if mode == "recurrence" else pieces,
            "mem_len": length if mode == "recurrence" else 0, "repeats": len(times),
            "seconds": round(statistics.median(times), 3), "measured_peak_bytes": int(peak),
            "measured_read_bytes": int(peak - before)}


def child(args: argparse.Namespace, *which: str) -> dict:
    """A part's measurement in a process of its own (allocator peaks start clean)."""
    command = [sys.executable, __file__, "--child", *which, "--workdir", args.workdir, "--seed", str(args.seed),
               "--repeats", str(args.repeats), "--timed-steps", str(args.timed_steps), "--step-batch",
               str(args.step_batch), "--base-length", str(args.base_length), "--read-segments",
               str(args.read_segments), "--cost-preset", args.cost_preset,
               *(["--cost-n-layer", str(args.cost_n_layer)] if args.cost_n_layer else [])]
    out = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        sys.exit(f"{' '.join(which)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


# ---------------------------------------------------------------------------------- goals
def goals(rows: list[dict]) -> dict:
    """The figures against the goals, from whichever parts ran."""
    found: dict = {"benchmark": "long_documents", "summary": "goals", "goals": GOALS}
    accuracy = {row["max_segments"]: row for row in rows if row.get("part") == "accuracy"}
    if 1 in accuracy and max(accuracy) > 1:
        most = max(accuracy)
        gain = 100 * (accuracy[most]["dev"]["accuracy"] - accuracy[1]["dev"]["accuracy"])
        found["accuracy_gain_points"] = {"segments": most, "value": round(gain, 2),
                                         "met": gain >= GOALS["accuracy_gain_points"]}
    for part in ("accuracy", "training_step"):
        steps = {row["max_segments"]: row for row in rows if row.get("part") == part}
        if 1 not in steps or max(steps) == 1:
            continue
        most = max(steps)
        peak = steps[most]["measured_peak_bytes"] / steps[1]["measured_peak_bytes"]
        found[f"{part}_peak_ratio"] = {"segments": most, "value": round(peak, 3),
                                       "met": peak <= GOALS["peak_ratio_8_vs_1"]}
        if all(row.get("step_s") for row in steps.values()):
            found[f"{part}_step_time_vs_n_times_1"] = {
                str(n): round(row["step_s"] / (n * steps[1]["step_s"]), 3) for n, row in sorted(steps.items())}
            limit = GOALS["step_time_vs_n_times_1"] * steps[1]["step_s"]
            found[f"{part}_step_time_met"] = all(row["step_s"] <= limit * n for n, row in steps.items())
    reads = {row["mode"]: row for row in rows if row.get("part") == "read_cost"}
    if len(reads) == 2:
        speedup = reads["one_pass"]["seconds"] / reads["recurrence"]["seconds"]
        cut = reads["one_pass"]["measured_peak_bytes"] / reads["recurrence"]["measured_peak_bytes"]
        found["read_speedup"] = {"value": round(speedup, 3), "met": speedup >= GOALS["read_speedup"]}
        found["read_memory_cut"] = {"value": round(cut, 3), "met": cut >= GOALS["read_memory_cut"]}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--segments", type=int, nargs="+", default=[1, 2, 4, 8], help="max_segments values")
    parser.add_argument("--segment-length", type=int, default=64, help="accuracy: pieces per segment (L)")
    parser.add_argument("--mem-len", type=int, default=None,
                        help="accuracy: the memory of N > 1 (default: one segment, --segment-length)")
    parser.add_argument("--train-documents", type=int, default=3000)
    parser.add_argument("--dev-documents", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=400, help="fine-tuning steps of every run")
    parser.add_argument("--steps-per-loop", type=int, default=25, help="steps per timed window")
    parser.add_argument("--batch", type=int, default=16, help="fine-tuning batch")
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pretrained", help="a model directory to fine-tune instead of a new pretraining run")
    parser.add_argument("--pretrain-steps", type=int, default=2000, help="steps of the tiny pretraining run")
    parser.add_argument("--base-length", type=int, default=512, help="training_step, read_cost: segment length (L)")
    parser.add_argument("--step-batch", type=int, default=1, help="training_step: documents per step")
    parser.add_argument("--timed-steps", type=int, default=3, help="training_step: timed steps (median)")
    parser.add_argument("--read-segments", type=int, default=8, help="read_cost: segments of the document")
    parser.add_argument("--cost-preset", default="base",
                        help="training_step, read_cost: the model's shape (tiny for a smoke run)")
    parser.add_argument("--cost-n-layer", type=int, default=None,
                        help="training_step, read_cost: layers of that model (default: the preset's; fewer for a "
                             "smoke run)")
    parser.add_argument("--repeats", type=int, default=3, help="read_cost: timed calls (median)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "long-docs-bench"))
    parser.add_argument("--child", nargs=2, metavar=("PART", "WHICH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.child:
        part, which = args.child
        row = step_child(int(which), args) if part == "training_step" else read_child(which, args)
        print(json.dumps(row), flush=True)
        return 0
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)

    if "accuracy" in args.parts:
        init = pretrained_model(args, workdir)
        train, dev, described = write_task(workdir, PieceCounter(init), args.segment_length, args.train_documents,
                                           args.dev_documents, args.seed)
        emit({"benchmark": "long_documents", "part": "task", "segment_length": args.segment_length,
              "passages": PASSAGES, "passage_pieces": args.segment_length - 2, "bible_counts": BIBLE_COUNTS,
              "pretrained": str(init), **described})
        for segments in args.segments:
            out = workdir / (f"finetune-N{segments}" + (f"-M{args.mem_len}" if args.mem_len else ""))
            emit(fine_tune(args, segments, (train, dev), init, out))
    if "training_step" in args.parts:
        for segments in args.segments:
            emit(child(args, "training_step", str(segments)))
    if "read_cost" in args.parts:
        for mode in ("recurrence", "one_pass"):
            emit(child(args, "read_cost", mode))
    emit(goals(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
