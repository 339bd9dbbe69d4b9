"""demo.py (`make demo`): its loss-curve helpers, its steps as README.md and docs/benchmarks.md list them,
a failed step named with the way to run the demo again from it, and (slow) a short end-to-end run."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", REPO / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_losses_writes_a_png(tmp_path):
    path = tmp_path / "loss.png"
    load_demo().plot_losses([(50, 8.5), (100, 7.25)], [(100, 7.5)], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_noise_filter_drops_tensorflow_startup_lines_only():
    noise = load_demo().NOISE
    assert noise.match("I0000 00:00:1795273013.106767   23412 port.cc:153] oneDNN custom operations are on.")
    assert noise.match("E0000 00:00:1795273017.095897   23412 cuda_platform.cc:52] failed call to cuInit")
    assert not noise.match("step 50/400 loss 8.4684 lr 0.0005 tokens/s 1279 ETA 0:04:00")


@pytest.mark.slow
def test_demo_runs_end_to_end_and_reports_losses_and_predictions(tmp_path):
    output = tmp_path / "demo_output"
    run = subprocess.run([sys.executable, str(REPO / "demo.py"), "--output", str(output), "--train-steps", "20",
                          "--eval-every", "10", "--finetune-steps", "20"], capture_output=True, text=True,
                         timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "final train loss:" in run.stdout and "final valid loss:" in run.stdout
    assert run.stdout.count("  <mask> 1: ") == 5
    # The demo indents what its steps print.
    continuation = re.search(r"^ +continuation of 'And God said, Let there be light: and': (.+)$", run.stdout, re.M)
    assert continuation and "\u2047" not in continuation.group(1)  # never <unk>, which decodes to " \u2047 "
    assert re.search(r"^ +perplexity of 'And God saw the light, that it was good.': \d+\.\d \(\d+ tokens\)$",
                     run.stdout, re.M)
    assert (output / "loss_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (output / "data_stats.png").read_bytes()[:4] == b"\x89PNG"
    assert "train stream 0, record 0" in run.stdout and "targets [[...]]:" in run.stdout
    assert (output / "serving" / "xlnet" / "1" / "saved_model.pb").is_file()
    assert list((output / "model" / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert "dev accuracy" in run.stdout and (output / "classifier" / "eval_results.json").is_file()
    assert run.stdout.count("project modules imported by the client: none") == 2
    assert sum(line.split()[0] in ("fresh", "rotten") for line in run.stdout.splitlines() if line.strip()
               and line.startswith("      ")) >= 4


def test_the_readme_and_the_benchmarks_transcript_list_the_demos_steps():
    """README.md's demo table has one row per step demo.py runs, and docs/benchmarks.md's transcript
    numbers the steps out of the same total; the plot of the data's statistics is named in the README."""
    demo = load_demo()
    steps = list(range(1, len(demo.demo_steps(demo.parse_args([]), Path("demo_output"))) + 1))
    assert steps[-1] == demo.Step.total
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| step | command |"):readme.index("It prints every step")]
    assert [int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)] == steps
    assert "xlnet inspect" in table and "data_stats.png" in table and "loss_curves.png" in table
    transcript = (REPO / "docs" / "benchmarks.md").read_text().split("## End-to-end demo", 1)[1]
    assert [int(n) for n in re.findall(r"=== \[(\d+)/(?:\d+)\]", transcript)] == steps
    assert set(re.findall(r"=== \[\d+/(\d+)\]", transcript)) == {str(demo.Step.total)}


@pytest.mark.slow  # about 15 s: demo.py's step 7 imports TensorFlow
def test_a_failed_step_names_itself_and_how_to_run_the_demo_again_from_it(tmp_path):
    output = tmp_path / "demo_output"
    for directory in ("vocab", "data", "model", "serving/xlnet"):  # what steps 1-6 write, as empty stand-ins
        (output / directory).mkdir(parents=True)
    (output / "data_stats.png").write_bytes(b"")
    # step 7 plots the losses of demo_output/model, which has none
    run = subprocess.run([sys.executable, str(REPO / "demo.py"), "--output", str(output), "--from-step", "7"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "=== [6/10]" not in run.stdout and "=== [7/10] loss curves" in run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("demo: step 7/10 (loss curves from the TensorBoard event files) failed: "), last
    assert last.endswith(f"run the demo again from this step: python demo.py --output {output} --from-step 7"), last
    assert (output / "vocab").is_dir() and (output / "data_stats.png").exists()  # what steps 1-6 wrote is kept


def test_a_command_killed_by_a_signal_fails_its_step_with_the_shells_status():
    demo = load_demo()
    with pytest.raises(demo.CommandFailed, match="was killed by signal 11") as failed:
        demo.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert failed.value.status == 139  # 128 + 11, as a shell reports it (not make's "Error 245")


def test_the_rerun_command_keeps_the_flags_and_offers_make_for_the_defaults():
    demo = load_demo()
    assert demo.rerun_command([], 4) == "make demo FROM=4 (or python demo.py --from-step 4)"
    assert demo.rerun_command(["--train-steps", "50", "--from-step", "2"], 4) == \
        "python demo.py --train-steps 50 --from-step 4"


def test_from_step_refuses_when_what_an_earlier_step_writes_is_missing(tmp_path, capsys):
    assert load_demo().main(["--output", str(tmp_path), "--from-step", "4"]) == 2
    error = capsys.readouterr().err
    assert f"--from-step 4 needs what the steps before it wrote under {tmp_path}; missing: {tmp_path / 'vocab'}" in error
