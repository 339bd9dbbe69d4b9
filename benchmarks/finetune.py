"""Does pretraining help? Fine-tunes the same data from pretrained and from random weights.

One pretraining run of the tiny preset on the bundled corpus (benchmarks/bundled_data.py) keeps
a checkpoint at each of ``--pretrain-steps``; each becomes a model directory of its own, and
`xlnet finetune` runs from it with the same task, steps and seed. Step 0 is the baseline from
random weights (the same architecture and vocabulary, `--vocab` instead of `--init-checkpoint`).
Every fine-tune is a real `xlnet finetune` process; one JSON line per fine-tune reports the
dev-set scores from its eval_results.json, plus the pretraining valid loss at that checkpoint.

    .venv/bin/python benchmarks/finetune.py [--task classification|squad] [--pretrain-steps 0 1000 3000]
        [--finetune-steps 600] [--seeds 0] [--workdir DIR] [--pretrained MODEL_DIR] [--train-paragraphs 20000]

classification: the bundled Rotten Tomatoes splits (data/finetune). squad: a cloze QA set
generated from the bundled Wikipedia text (tests/support/squad_cloze.py; one question per paragraph of
two sentences, ``--train-paragraphs`` (20000) paragraphs of the first 9000 documents for training,
300 of the last documents for eval), with one JSON line per trivial baseline (answers read off the
context without the question) before the fine-tunes.

``--pretrained MODEL_DIR`` skips the pretraining run and compares that model directory (e.g.
demo_output/model) with random weights.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from set_items import add_set_option, set_flags  # noqa: E402  (benchmarks/set_items.py: the --set option)
ROTTEN = REPO / "data" / "finetune" / "rotten_tomatoes"


def xlnet(*args: str) -> str:
    """Runs one `xlnet` command; returns its stdout, or exits with its output on failure."""
    completed = subprocess.run([sys.executable, "-m", "xlnet_cli", *args], cwd=REPO, capture_output=True,
                               text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if completed.returncode:
        sys.exit(f"xlnet {args[0]} failed ({completed.returncode}):\n{completed.stdout[-3000:]}"
                 f"{completed.stderr[-3000:]}")
    return completed.stdout


def pretrain(data_dir: str, model_dir: Path, steps: list[int], sets: tuple[str, ...] = ()) -> dict[int, float]:
    """Pretrains the tiny preset (with the ``sets`` --set items) to max(steps), keeping a checkpoint at
    each; step -> valid loss."""
    last = max(steps)
    every = math.gcd(*steps)
    xlnet("train", "--data", data_dir, "--model-dir", str(model_dir), "--preset", "tiny", *set_flags(sets),
          "--set", f"train_steps={last}", "--set", f"checkpoint_every={every}", "--set", f"eval_every={every}",
          "--set", f"keep_checkpoints={last // every + 1}", "--set", "steps_per_loop=50")
    return valid_losses(model_dir)


def valid_losses(model_dir: Path) -> dict[int, float]:
    """step -> valid loss from a pretraining run's TensorBoard eval events."""
    from trainer.runtime.model_dir import ModelDirectory

    return ModelDirectory(str(model_dir)).scalars("eval", "loss")


def dev_curve(task: str, out: Path) -> dict[str, dict[str, float]] | None:
    """Step -> dev scores at every evaluation of a fine-tune (tasks with ``curve_every``)."""
    if not TASKS[task]["curve_every"]:
        return None
    from trainer.runtime.model_dir import ModelDirectory

    scores = {key: ModelDirectory(str(out)).scalars("eval", key) for key in TASKS[task]["scores"]}
    steps = sorted(next(iter(scores.values())))
    return {str(step): {key: round(values[step], 4) for key, values in scores.items()} for step in steps}


def snapshot(model_dir: Path, step: int, target: Path) -> Path:
    """A model directory holding ``model_dir``'s files and only its checkpoint of ``step``."""
    shutil.copytree(model_dir, target, ignore=shutil.ignore_patterns("checkpoints", "tensorboard", "*.jsonl"))
    (target / "checkpoints").mkdir()
    for path in (model_dir / "checkpoints").glob(f"ckpt-{step}.*"):
        shutil.copy(path, target / "checkpoints" / path.name)
    # TensorFlow's checkpoint state file (text format), written here without importing TensorFlow
    # (an import costs this process 7 CPU seconds, 20 s and more of wall time on a loaded 2-core machine)
    (target / "checkpoints" / "checkpoint").write_text(
        f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n')
    return target


# What each task fine-tunes on, the dev scores reported and the fine-tuning settings.
TASKS = {
    "classification": {"data": "rotten_tomatoes dev (1000, balanced)",
                       "scores": ("accuracy", "macro_f1", "mcc", "loss"), "steps": 600, "curve_every": None,
                       "flags": []},
    "squad": {"data": "cloze QA from the bundled Wikipedia text: {train} train / 300 held-out paragraphs of "
                      "2 sentences, 1-2 word answers, questions of 5 words each side of the blank",
              "scores": ("exact", "f1"), "steps": 1500, "curve_every": 250,
              # the paragraphs and questions fit one window. Without dropout, and at 2e-3, a model
              # from random weights learns to find the question in the context within the run
              # (its dev exact match leaves the baselines' level after 250-500 steps).
              "flags": ["--max-seq-length", "96", "--doc-stride", "64", "--max-query-length", "24",
                        "--set", "learning_rate=2e-3", "--set", "warmup_steps=100", "--set", "dropout=0",
                        "--set", "dropatt=0"]},
}


def task_files(task: str, workdir: Path, train_paragraphs: int) -> list[str]:
    """--train/--eval of ``task``: the bundled Rotten Tomatoes splits, or a cloze QA set generated
    from the bundled Wikipedia text (``train_paragraphs`` for training; held-out paragraphs, from
    documents training never sees, for eval)."""
    if task == "classification":
        return ["--train", str(ROTTEN / "train.tsv"), "--eval", str(ROTTEN / "dev.tsv")]
    from bundled_data import wikipedia_documents

    from tests.support.squad_cloze import held_out_cloze

    train_set, dev_set = held_out_cloze(wikipedia_documents(10000), held_out_from=9000,
                                        train_paragraphs=train_paragraphs, eval_paragraphs=300)
    train, dev = workdir / "cloze-train.json", workdir / "cloze-dev.json"
    train.write_text(json.dumps(train_set))
    dev.write_text(json.dumps(dev_set))
    return ["--train", str(train), "--eval", str(dev)]


def trivial_baselines(dev: Path) -> list[dict]:
    """The scores of answers that read only the context (tests.support.squad_cloze.trivial_answers):
    its first 1 or 2 words, or 1 or 2 words at a seeded random place."""
    from trainer.evaluation.squad_official import squad_evaluate
    from tests.support.squad_cloze import SHORT_CLOZE, trivial_answers

    # the gold answers straight from the JSON this script wrote (trainer.inputs.squad would import
    # TensorFlow into this process; `xlnet finetune` reads and checks the same file)
    dataset = json.loads(dev.read_text())
    gold = {str(qa["id"]): [answer["text"] for answer in qa["answers"]]
            for article in dataset["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    rows = []
    for words in range(1, SHORT_CLOZE["max_span_words"] + 1):
        for seed, place in ((None, "first"), (0, "random")):
            scores = squad_evaluate(gold, trivial_answers(dataset, words, seed))
            rows.append({"baseline": f"{place} {words} word{'s' * (words > 1)}",
                         "dev": {key: round(scores[key], 4) for key in ("exact", "f1")}})
    return rows


def finetune(task: str, files: list[str], out: Path, steps: int, seed: int, init: Path | None,
             vocab: Path, sets: tuple[str, ...] = (), preset: str | None = "tiny") -> tuple[dict, float]:
    """One `xlnet finetune` of ``task`` (with the ``sets`` --set items first); (its eval_results.json, seconds).
    ``preset``: the fine-tuning defaults (None: those `xlnet finetune` picks for ``init``'s architecture)."""
    source = ["--init-checkpoint", str(init)] if init else ["--vocab", str(vocab)]
    source += ["--preset", preset] if preset else []
    every = TASKS[task]["curve_every"] or steps
    began = time.time()
    xlnet("finetune", "--task", task, *files, *TASKS[task]["flags"], "--model-dir", str(out), *source,
          *set_flags(sets), "--set", f"train_steps={steps}", "--set", f"eval_every={min(every, steps)}",
          "--set", f"seed={seed}", "--set", f"checkpoint_every={steps}")
    return json.loads((out / "eval_results.json").read_text()), time.time() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="classification", help="what to fine-tune")
    parser.add_argument("--pretrain-steps", type=int, nargs="+", default=[0, 1000, 3000],
                        help="pretraining checkpoints to fine-tune from (0: random weights)")
    parser.add_argument("--finetune-steps", type=int, default=None,
                        help="fine-tuning steps of every run (default: " + ", ".join(
                            f"{spec['steps']} {task}" for task, spec in TASKS.items()) + ")")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="fine-tuning seeds")
    parser.add_argument("--pretrained", help="an existing model directory instead of the pretraining run")
    parser.add_argument("--workdir", default=None, help="where data and models go (default: a temporary dir)")
    parser.add_argument("--train-paragraphs", type=int, default=20000,
                        help="squad: training paragraphs of the cloze set (fewer: a quick run)")
    add_set_option(parser, "more --set items of the pretraining run and every fine-tune (e.g. n_layer=1 for a "
                           "smoke run; a finished pretraining run in --workdir is reused as it is)")
    args = parser.parse_args(argv)
    data = TASKS[args.task]["data"].format(train=args.train_paragraphs)

    import bundled_data

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="finetune-bench-"))
    data_dir = bundled_data.prepare(workdir / "bundled")
    vocab = workdir / "bundled" / "spiece.model"
    sources: dict[int | str, Path | None] = {0: None}
    valid: dict[int, float] = {}
    if args.pretrained:
        pretrained = Path(args.pretrained)
        vocab = pretrained / "spiece.model"
        sources[args.pretrained] = pretrained
    elif any(args.pretrain_steps):
        steps = [step for step in args.pretrain_steps if step > 0]
        run = workdir / "pretrain"
        if (run / "checkpoints" / f"ckpt-{max(steps)}.index").exists():  # a finished run in --workdir
            valid = valid_losses(run)
        else:
            shutil.rmtree(run, ignore_errors=True)
            valid = pretrain(data_dir, run, steps, tuple(args.sets))
        for step in steps:
            target = workdir / f"pretrained-{step}"
            shutil.rmtree(target, ignore_errors=True)
            sources[step] = snapshot(run, step, target)
    files = task_files(args.task, workdir, args.train_paragraphs)
    steps = args.finetune_steps or TASKS[args.task]["steps"]
    if args.task == "squad":
        for row in trivial_baselines(workdir / "cloze-dev.json"):
            print(json.dumps({"benchmark": "finetune", "task": "squad", "data": data, **row}),
                  flush=True)
    for seed in args.seeds:
        for name, init in sources.items():
            out = workdir / f"finetune-{args.task}-{name if isinstance(name, int) else 'given'}-seed{seed}"
            shutil.rmtree(out, ignore_errors=True)
            # the tiny preset's fine-tuning defaults for random weights and this script's tiny pretraining
            # alike (what `xlnet finetune` picks for its checkpoints by itself, unless --set changes the
            # architecture); --pretrained's own
            results, seconds = finetune(args.task, files, out, steps, seed, init, vocab, tuple(args.sets),
                                        preset=None if name == args.pretrained else "tiny")
            print(json.dumps({
                "benchmark": "finetune", "task": args.task, "data": data,
                "init": "random" if init is None else "pretrained",
                "pretrain_steps": name if isinstance(name, int) else None,
                "pretrained_model": str(init) if init is not None else None,
                "pretrain_valid_loss": valid.get(name) if isinstance(name, int) else None,
                "finetune_steps": steps, "seed": seed,
                "dev": {key: round(results[key], 4) for key in TASKS[args.task]["scores"]},
                "dev_curve": dev_curve(args.task, out),
                "seconds": round(seconds, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
