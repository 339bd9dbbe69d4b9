"""`make demo`: the whole system end to end on the bundled corpus, on the CPU, in about six minutes.

Runs the real commands a user runs, each as a subprocess with its output streamed:

1. ``xlnet vocab``       SentencePiece vocabulary (8000 pieces) from data/corpus/
2. ``xlnet preprocess``  Beam pipeline (FnApiRunner, 2 workers) -> TFRecord shards + manifest
3. ``xlnet inspect``     two records decoded (segments, label, memory-reuse part, targets), and
                         the data's statistics with their plot (data_stats.png)
4. ``xlnet train``       the tiny preset on the CPU, with periodic evaluation on the valid split
5. ``xlnet export``      serving SavedModel under demo_output/serving/xlnet/1/
6. predictions           the SavedModel loaded in a fresh Python that imports only tensorflow and
                         tensorflow_text, filling in masked sentences, continuing a prompt
                         (``generate``) and printing a text's perplexity (``score``)
7. loss curves           PNG plot of the train and valid loss read from the TensorBoard event files
8. ``xlnet finetune``    the pretrained model fine-tuned on the bundled Rotten Tomatoes snippets
                         (fresh / rotten), dev accuracy printed
9. ``xlnet export``      the classifier as a SavedModel with a ``classify`` signature
10. classify             sentences classified by that SavedModel in a fresh Python (tensorflow and
                         tensorflow_text only)

Everything goes under demo_output/ (replaced on every run). ``--train-steps`` and ``--finetune-steps``
change the training lengths. With the defaults the demo took 337 s on a quiet 2-core machine
(2026-11-27: training 75 s, the exports 53 s and 46 s, fine-tuning 100 s), and 1220 s on two cores
shared with other jobs (load average 9-28, 2026-11-27; training 474 s, the exports 213 s and 113 s, fine-tuning 195 s),
and prints each step's time at its end. Training was the longest step: 200 steps show the loss
falling and the unigram distribution learnt as 400 did (valid accuracy 0.0695 from step 50 on).

A step that fails names itself and how to go on: ``--from-step N`` (``make demo FROM=N``) runs steps
N to the last on what the steps before N wrote, and exits with the failed command's status (128 + N
for one killed by signal N, as a shell reports it).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent
CORPUS_GLOB = str(REPO / "data" / "corpus" / "*.txt.gz")
MAX_LENGTH = 64
TOP_K = 5
MASKED_SENTENCES = [
    "In the beginning God created the heaven and the <mask>.",
    "And God said, Let there be <mask>: and there was light.",
    "Paris is the capital and largest city of <mask>.",
    "The <mask> is the largest planet in the Solar System.",
    "Jazz is a music genre that originated in the African-American communities of New <mask>.",
]

# What a user of the exported model writes: only tensorflow and tensorflow_text are imported.
CLIENT = r"""
import json, math, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops the SavedModel uses

model = tf.saved_model.load(sys.argv[1])
out = model.signatures["predict_masked"](text=tf.constant(json.loads(sys.argv[2])))
project = sorted({m.split(".")[0] for m in sys.modules} & {"trainer", "pipeline", "tfrecords", "xlnet_cli"})
print("project modules imported by the client:", ", ".join(project) or "none")
for text, count, tokens, probs in zip(json.loads(sys.argv[2]), out["num_masks"].numpy(),
                                      out["top_k_tokens"].numpy(), out["top_k_probabilities"].numpy()):
    print(text)
    for slot in range(count):
        pieces = [t.decode("utf-8").replace("\u2581", "_") for t in tokens[slot]]
        print(f"  <mask> {slot + 1}: " + "  ".join(f"{p} {q:.3f}" for p, q in zip(pieces, probs[slot])))
# generate: greedy (temperature 0), in one call; score: the natural-order likelihood of a text.
prompt, text = "And God said, Let there be light: and", "And God saw the light, that it was good."
out = model.signatures["generate"](prompt=tf.constant([prompt]), max_new_tokens=tf.constant(20),
                                   temperature=tf.constant(0.0), top_k=tf.constant(0), top_p=tf.constant(1.0),
                                   seed=tf.constant(0, tf.int64))
print(f"continuation of {prompt!r}: {out['text'].numpy()[0].decode('utf-8')!r}")
out = model.signatures["score"](text=tf.constant([text]))
tokens = int(out["num_tokens"][0])
print(f"perplexity of {text!r}: {math.exp(-float(out['log_likelihood'][0]) / tokens):.1f} ({tokens} tokens)")
"""


CLASSIFY_SENTENCES = [
    "A warm, funny and beautifully acted film that earns every one of its tears.",
    "Tedious, overlong and badly written; I checked my watch every ten minutes.",
    "The cast is game, but the script gives them nothing to do.",
    "One of the most exhilarating thrillers of the year.",
]
ROTTEN = REPO / "data" / "finetune" / "rotten_tomatoes"

# The fine-tuned classifier from a user's point of view: raw text in, label names out.
CLASSIFY_CLIENT = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops the SavedModel uses

model = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
out = model.signatures["classify"](text=tf.constant(texts))
project = sorted({m.split(".")[0] for m in sys.modules} & {"trainer", "pipeline", "tfrecords", "xlnet_cli"})
print("project modules imported by the client:", ", ".join(project) or "none")
for text, name, probabilities in zip(texts, out["label_names"].numpy(), out["probabilities"].numpy()):
    print(f"  {name.decode():8s} {probabilities.max():.3f}  {text}")
"""


class Step:
    """Numbered demo step with wall time (``seconds`` once it is done)."""

    total = 10

    def __init__(self, number: int, title: str):
        self.number, self.title = number, title
        self.seconds = 0.0

    def __enter__(self) -> "Step":
        self.began = time.time()
        print(f"\n=== [{self.number}/{self.total}] {self.title}", flush=True)
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.time() - self.began
        if exc[0] is None:
            print(f"=== [{self.number}/{self.total}] done in {self.seconds:.0f}s", flush=True)


def xlnet_command() -> list[str]:
    """The installed `xlnet` console script (falls back to the module for a non-installed checkout)."""
    script = Path(sys.executable).parent / "xlnet"
    return [str(script)] if script.exists() else [sys.executable, "-m", "xlnet_cli"]


# TensorFlow's start-up chatter (CUDA probing, oneDNN notices) says nothing about the demo.
NOISE = re.compile(r"^(?:[IWE]\d{4} [\d:. ]+\d+ \S+:\d+\]|WARNING: All log messages before absl|"
                   r"To enable the following instructions|Sharding callback duration)")


class CommandFailed(Exception):
    """A step's command ended with a status other than 0 (``code``: its exit status, or -N when signal
    N killed it)."""

    def __init__(self, command: list[str], code: int):
        super().__init__(f"`{' '.join(Path(part).name if i == 0 else part for i, part in enumerate(command[:2]))}` "
                         + (f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"))
        self.code = code

    @property
    def status(self) -> int:
        """The demo's own exit status: the command's, or 128 + N for one killed by signal N (as a shell says)."""
        return 128 - self.code if self.code < 0 else self.code


def run(command: list[str], shown: str | None = None) -> None:
    """Runs one command with its output streamed; CommandFailed when it fails."""
    print("$ " + (shown or " ".join(command)), flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    with subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as process:
        for line in process.stdout:
            if not NOISE.match(line):
                print("    " + line, end="", flush=True)
    if process.returncode:
        raise CommandFailed(command, process.returncode)


def plot_losses(train: list[tuple[int, float]], valid: list[tuple[int, float]], path: Path) -> None:
    """Writes the train and valid loss curves as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    # A run's first loop is one step (it compiles), so its first point is that step's loss, not a mean.
    axes.plot(*zip(*train), label="train loss (mean of each loop's steps; a run's first point: its first step)")
    if valid:
        axes.plot(*zip(*valid), marker="o", label="valid loss")
    axes.set_xlabel("step")
    axes.set_ylabel("permutation LM cross-entropy")
    axes.set_title("XLNet tiny on the bundled corpus")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def report_losses(model_dir: Path, plot: Path) -> None:
    """Plots the train/valid loss of a run's TensorBoard logs and prints the final values."""
    from trainer.runtime.model_dir import ModelDirectory

    directory = ModelDirectory(str(model_dir))
    train = list(directory.scalars("train", "loss").items())
    valid = list(directory.scalars("eval", "loss").items())
    if not train:
        sys.exit(f"demo: no train loss in {directory.tensorboard('train')}")
    plot_losses(train, valid, plot)
    print(f"wrote {plot} ({len(train)} train points, {len(valid)} valid points)")
    print(f"final train loss: {train[-1][1]:.4f} (step {train[-1][0]}; first logged {train[0][1]:.4f})")
    if valid:
        print(f"final valid loss: {valid[-1][1]:.4f} (step {valid[-1][0]}; first {valid[0][1]:.4f})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(REPO / "demo_output"), help="where everything goes (replaced)")
    parser.add_argument("--train-steps", type=int, default=200, help="training steps of the tiny preset")
    parser.add_argument("--eval-every", type=int, default=50, help="steps between evaluations")
    parser.add_argument("--finetune-steps", type=int, default=300, help="fine-tuning steps on Rotten Tomatoes")
    parser.add_argument("--from-step", type=int, default=1, metavar="N",
                        help="run steps N to the last only, on what the steps before N wrote under --output "
                             "(make demo FROM=N); the outputs of steps N and later are replaced")
    parser.add_argument("--plot", nargs=2, metavar=("MODEL_DIR", "PNG"),
                        help="only plot the losses of MODEL_DIR's TensorBoard logs (step 7 runs this in its own "
                             "process)")
    args = parser.parse_args(argv)
    if not 1 <= args.from_step <= Step.total:
        parser.error(f"--from-step {args.from_step}: the demo's steps are 1 to {Step.total}")
    return args


def demo_steps(args: argparse.Namespace, out: Path) -> list[tuple[str, list[Path], Callable[[], None]]]:
    """The demo's steps in order: (title, what the step writes under ``out``, what it runs)."""
    vocab, data, model, serving = out / "vocab", out / "data", out / "model", out / "serving" / "xlnet"
    classifier, classifier_serving = out / "classifier", out / "serving" / "classifier"
    xlnet = xlnet_command()

    def inspect() -> None:
        run(xlnet + ["inspect", str(data), "--records", "2"])
        run(xlnet + ["inspect", str(data), "--stats", "--plot", str(out / "data_stats.png")])

    def train() -> None:
        run(xlnet + ["train", "--data", str(data), "--model-dir", str(model), "--preset", "tiny",
                     "--set", f"train.train_steps={args.train_steps}", "--set", f"train.eval_every={args.eval_every}",
                     "--set", f"train.checkpoint_every={args.eval_every}", "--set", "train.steps_per_loop=20"])

    def finetune() -> None:
        run(xlnet + ["finetune", "--task", "classification", "--train", str(ROTTEN / "train.tsv"),
                     "--eval", str(ROTTEN / "dev.tsv"), "--init-checkpoint", str(model),
                     "--model-dir", str(classifier), "--set", f"train_steps={args.finetune_steps}",
                     "--set", f"eval_every={args.finetune_steps}", "--set", f"checkpoint_every={args.finetune_steps}"])
        results = json.loads((classifier / "eval_results.json").read_text())
        print(f"dev accuracy {results['accuracy']:.4f}, macro F1 {results['macro_f1']:.4f} on "
              f"{results['examples']} reviews (half fresh, half rotten)")

    return [
        ("vocabulary: SentencePiece unigram, 8000 pieces, XLNet special symbols", [vocab], lambda: run(
            xlnet + ["vocab", "--input", CORPUS_GLOB, "--output", str(vocab / "spiece"), "--vocab-size", "8000",
                     "--input-sentence-size", "20000", "--num-threads", "2", "--seed", "0"])),
        ("preprocess: Apache Beam (FnApiRunner, 2 workers) -> TFRecord shards", [data], lambda: run(
            xlnet + ["preprocess", "--input", CORPUS_GLOB, "--output", str(data), "--vocab",
                     str(vocab / "spiece.model"), "--seq-len", "128", "--reuse-len", "64", "--num-predict", "21",
                     "--num-streams", "16", "--num-shards", "4", "--valid-shards", "2",
                     "--runner", "FnApiRunner", "--workers", "2"])),
        ("inspect: two records as the model sees them, and statistics of the data with their plot",
         [out / "data_stats.png"], inspect),
        (f"train: tiny preset, {args.train_steps} steps on the CPU, evaluation every {args.eval_every}", [model],
         train),
        (f"export: SavedModel (max_length {MAX_LENGTH}, top-{TOP_K}) for TF Serving", [serving], lambda: run(
            xlnet + ["export", "--model-dir", str(model), "--output", str(serving), "--max-length", str(MAX_LENGTH),
                     "--top-k", str(TOP_K)])),
        ("predict: load the SavedModel in a fresh process (tensorflow + tensorflow_text only): masked "
         "words, a continuation (generate) and a perplexity (score)", [], lambda: run(
             [sys.executable, "-c", CLIENT, str(serving / "1"), json.dumps(MASKED_SENTENCES)],
             shown=f"python -c CLIENT {serving / '1'} MASKED_SENTENCES   (CLIENT: see demo.py)")),
        ("loss curves from the TensorBoard event files", [out / "loss_curves.png"], lambda: run(
            [sys.executable, str(Path(__file__).resolve()), "--plot", str(model), str(out / "loss_curves.png")])),
        (f"fine-tune: Rotten Tomatoes fresh/rotten from the pretrained model, {args.finetune_steps} steps",
         [classifier], finetune),
        ("export: the classifier as a SavedModel with a `classify` signature", [classifier_serving], lambda: run(
            xlnet + ["export", "--model-dir", str(classifier), "--output", str(classifier_serving)])),
        ("classify: the classifier's SavedModel in a fresh process (tensorflow + tensorflow_text only)", [],
         lambda: run([sys.executable, "-c", CLASSIFY_CLIENT, str(classifier_serving / "1"),
                      json.dumps(CLASSIFY_SENTENCES)],
                     shown=f"python -c CLASSIFY_CLIENT {classifier_serving / '1'} CLASSIFY_SENTENCES   (see demo.py)")),
    ]


def rerun_command(argv: list[str], step: int) -> str:
    """How to run the demo again from ``step`` with the same flags as ``argv``."""
    kept = [arg for i, arg in enumerate(argv) if not arg.startswith("--from-step")
            and not (i and argv[i - 1] == "--from-step")]
    python = f"python demo.py {' '.join(kept + ['--from-step', str(step)])}"
    return f"make demo FROM={step} (or {python})" if not kept else python


def prepare_output(out: Path, steps: list[tuple[str, list[Path], Callable[[], None]]], first: int) -> str | None:
    """Makes ``out`` ready for steps ``first`` to the last: replaced whole from step 1; else what the
    steps before ``first`` wrote is kept and what the later ones write is removed. A message when
    something the steps before ``first`` write is missing."""
    if first == 1:
        if out.exists():
            print(f"removing the previous demo output {out}", flush=True)
            shutil.rmtree(out)
        out.mkdir(parents=True)
        return None
    missing = [str(path) for _, outputs, _ in steps[:first - 1] for path in outputs if not path.exists()]
    if missing:
        return (f"--from-step {first} needs what the steps before it wrote under {out}; missing: {', '.join(missing)}. "
                "Run the demo from the step that writes it, or from step 1")
    for _, outputs, _ in steps[first - 1:]:
        for path in outputs:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    print(f"from step {first}: keeping what steps 1-{first - 1} wrote under {out}", flush=True)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.plot:
        report_losses(Path(args.plot[0]), Path(args.plot[1]))
        return 0

    began = time.time()
    out = Path(args.output)
    steps = demo_steps(args, out)
    problem = prepare_output(out, steps, args.from_step)
    if problem:
        print(f"demo: {problem}", file=sys.stderr)
        return 2
    times = []
    for number, (title, _, action) in enumerate(steps, 1):
        if number < args.from_step:
            continue
        try:
            with Step(number, title) as step:
                action()
        except CommandFailed as failed:
            sys.stdout.flush()
            print(f"demo: step {number}/{Step.total} ({title.split(':')[0]}) failed: {failed}. What steps "
                  f"1-{number - 1} wrote is kept under {out}; once the cause is fixed, run the demo again from this "
                  f"step: {rerun_command(argv, number)}", file=sys.stderr, flush=True)
            return failed.status
        times.append(f"{number}: {step.seconds:.0f}s")

    print("\n=== where everything is")
    for label, path in (("vocabulary", out / "vocab" / "spiece.model"), ("TFRecord shards + manifest", out / "data"),
                        ("model directory (configs, checkpoints/)", out / "model"),
                        ("TensorBoard logs (tensorboard --logdir ...)", out / "model" / "tensorboard"),
                        ("SavedModel (TF Serving base path)", out / "serving" / "xlnet"),
                        ("loss curves", out / "loss_curves.png"),
                        ("statistics of the data (xlnet inspect --stats)", out / "data_stats.png"),
                        ("fine-tuned classifier (eval_results.json)", out / "classifier"),
                        ("classifier SavedModel", out / "serving" / "classifier")):
        print(f"  {label:45s} {path}")
    print(f"\ndemo finished in {time.time() - began:.0f}s (each step: {', '.join(times)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
