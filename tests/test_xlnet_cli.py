"""The `xlnet` command line: on/off flags in both forms, defaults in --help, quiet TensorFlow start-up."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import xlnet_cli
from pipeline.preprocess_command import add_arguments as preprocess_arguments
from pipeline.preprocess_command import config_from_args

from support.processes import start, wait_for

REPO = Path(__file__).resolve().parents[1]
REQUIRED = ["--input", "corpus.txt", "--output", "out", "--vocab", "spiece.model"]


def preprocess_config(*flags: str):
    parser = argparse.ArgumentParser()
    preprocess_arguments(parser)
    return config_from_args(parser.parse_args(REQUIRED + list(flags)))


@pytest.mark.parametrize("flag, field, default", [("bi-data", "bi_data", True), ("eod", "use_eod", True),
                                                  ("uncased", "uncased", False),
                                                  ("subword-spans", "subword_spans", False)])
def test_every_preprocess_switch_accepts_both_forms(flag, field, default):
    assert getattr(preprocess_config(), field) is default
    assert getattr(preprocess_config(f"--{flag}"), field) is True
    assert getattr(preprocess_config(f"--no-{flag}"), field) is False


def test_vocab_and_export_switches_accept_both_forms():
    from pipeline.vocab_command import add_arguments as vocab_arguments
    from trainer.commands.export import add_arguments as export_arguments

    vocab = argparse.ArgumentParser()
    vocab_arguments(vocab)
    assert vocab.parse_args(["--input", "c", "--output", "o", "--no-uncased"]).uncased is False
    assert vocab.parse_args(["--input", "c", "--output", "o", "--uncased"]).uncased is True
    export = argparse.ArgumentParser()
    export_arguments(export)
    base = ["--model-dir", "m", "--output", "o"]
    assert [export.parse_args(base + flags).uncased for flags in ([], ["--uncased"], ["--no-uncased"], ["--cased"])] \
        == [None, True, False, False]


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        xlnet_cli.main(["preprocess", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for expected in ("tokens per record (default: 512)", "(default: 256)", "--bi-data, --no-bi-data",
                     "(default: True)", "--num-streams NUM_STREAMS text streams per split"):
        assert expected in text, expected
    assert "(default: None)" not in text


def run_export_of_an_empty_directory(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`xlnet export` of a directory that exists but holds no model: refused once TensorFlow has loaded
    (a missing one is refused before, trainer/commands/flag_checks.py)."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | env
    (tmp_path / "empty").mkdir()
    return subprocess.run([sys.executable, "xlnet_cli.py", "export", "--model-dir", str(tmp_path / "empty"),
                           "--output", str(tmp_path / "out")], cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=300)


def test_tensorflow_start_up_noise_is_not_printed(tmp_path):
    result = run_export_of_an_empty_directory(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"xlnet export: error: --model-dir '{tmp_path / 'empty'}' lacks "
                                                  "model_config.json, spiece.model, special_ids.json (a model "
                                                  "directory is written by `xlnet train` or `xlnet import-checkpoint`)"]


def test_tensorflow_start_up_log_is_shown_when_the_user_sets_its_level(tmp_path):
    result = run_export_of_an_empty_directory(tmp_path, TF_CPP_MIN_LOG_LEVEL="0")
    assert result.returncode == 2
    assert "absl::InitializeLog" in result.stderr and "xlnet export: error:" in result.stderr


def test_the_subcommand_list_names_every_fine_tuning_task(capsys):
    with pytest.raises(SystemExit):
        xlnet_cli.main(["--help"])
    listing = " ".join(capsys.readouterr().out.split())
    assert "fine-tune a model for classification, regression, multiple choice or extractive QA (squad)" in listing


def test_python_m_trainer_task_is_xlnet_train_under_its_own_name():
    result = subprocess.run([sys.executable, "-m", "trainer.task", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: python -m trainer.task ")
    usage_flags = {"--data", "--model-dir", "--preset", "--config", "--set", "--strategy", "--tpu", "--init-checkpoint"}
    assert all(flag in result.stdout for flag in usage_flags)
    bad = subprocess.run([sys.executable, "-m", "trainer.task", "--model-dir", "m"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "the following arguments are required: --data" in bad.stderr


def test_ctrl_c_while_tensorflow_loads_ends_quietly_with_status_130(tmp_path):
    # As from a shell: Ctrl-C's default disposition (a test runner's worker may ignore SIGINT, and a
    # child inherits that, so Python would never raise KeyboardInterrupt).
    # (a --model-dir that exists: a missing one is refused before TensorFlow loads)
    process = start(["xlnet_cli.py", "export", "--model-dir", str(tmp_path), "--output", str(tmp_path / "out")],
                    stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # SIGINT once TensorFlow's library is mapped into the process: its import goes on for seconds after
    maps = Path(f"/proc/{process.pid}/maps")
    wait_for(lambda: "libtensorflow" in maps.read_text(), process, timeout=60, interval=0.005,
             what="importing TensorFlow")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "xlnet export: interrupted" in err


def test_xlnet_without_a_command_prints_its_usage_and_exits_2(capsys):
    assert xlnet_cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: xlnet ") and "exit status: 0 done" in err


def test_a_usage_error_exits_2_with_one_line_naming_the_flag(capsys):
    assert xlnet_cli.main(["plan", "--replicas", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == ["xlnet plan: error: --replicas must be at least 1, got 0"]


def test_a_reader_closing_the_pipe_ends_the_command_quietly(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line: every write meets a closed pipe
    try:
        result = subprocess.run([sys.executable, "xlnet_cli.py", "plan", "--format", "json"], cwd=REPO,
                                stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert result.returncode == xlnet_cli.EXIT_BROKEN_PIPE == 141
    assert result.stderr == ""


@pytest.mark.parametrize("command", ["inspect", "train", "finetune", "plan", "preprocess", "vocab", "export",
                                     "import-checkpoint"])
def test_help_writes_each_default_once_and_one_way(command, capsys):
    with pytest.raises(SystemExit):
        xlnet_cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("(default") == text.count("(default:"), "a default written without its colon"
    assert "(default: [])" not in text and "(default: None)" not in text
    for help_text in text.split("(default:")[1:]:
        assert "(default:" not in help_text.split(" --")[0], "a flag with two defaults"


def test_inspect_help_says_the_split_default_once(capsys):
    with pytest.raises(SystemExit):
        xlnet_cli.main(["inspect", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "split to decode (default: train)" in text and "(default train)" not in text


def test_a_misspelled_flag_is_named_first_with_the_nearest_flags(capsys):
    # Before: "the following arguments are required: --prompt" under a 7-line usage block.
    assert xlnet_cli.main(["generate", "--model-dir", "m", "--promt", "hello"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "xlnet generate: error: unrecognized argument --promt (did you mean --prompt or --prompts?); "
        "--help lists the flags"]


def test_an_argparse_error_is_one_line_without_the_usage_block(capsys):
    assert xlnet_cli.main(["plan", "--format", "jsn"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "xlnet plan: error: argument --format: invalid choice: 'jsn' (choose from 'text', 'json')"]
    assert xlnet_cli.main(["generate"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "xlnet generate: error: the following arguments are required: --model-dir"]


def test_an_unknown_command_is_one_line_with_the_nearest_commands(capsys):
    assert xlnet_cli.main(["trian", "--data", "d"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "xlnet: error: unknown command 'trian' (did you mean train?); xlnet --help lists them"]


def test_the_usage_block_comes_with_help_only(capsys):
    with pytest.raises(SystemExit) as exited:
        xlnet_cli.main(["plan", "--help"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("usage: xlnet plan ")


def preprocess_parser() -> argparse.ArgumentParser:
    parser = xlnet_cli.CommandParser(prog="xlnet preprocess")
    preprocess_arguments(parser)
    return parser


def test_preprocess_still_hands_the_flags_it_does_not_define_to_beam():
    args = xlnet_cli.parse_flags(preprocess_parser(), [*REQUIRED, "--project", "p", "--region=r"], runner_options=True)
    assert args.runner_options == ["--project", "p", "--region=r"] and args.output == "out"


def test_preprocess_names_a_misspelled_flag_when_the_parse_fails():
    # --ouput would go to Beam; the missing --output it was meant as makes it the likely cause.
    with pytest.raises(xlnet_cli.UsageError, match=r"^unrecognized argument --ouput \(did you mean --output"):
        xlnet_cli.parse_flags(preprocess_parser(), ["--input", "c", "--ouput", "o", "--vocab", "v"],
                              runner_options=True)


def test_an_abbreviated_flag_argparse_accepts_is_not_called_misspelled():
    parser = xlnet_cli.CommandParser()
    parser.add_argument("--prompt")
    parser.add_argument("--steps", type=int)
    assert vars(xlnet_cli.parse_flags(parser, ["--prom", "x", "--steps=-3"])) == {"prompt": "x", "steps": -3}
    # values that start with a dash, as argparse reads them
    assert vars(xlnet_cli.parse_flags(parser, ["--prompt", "-5 degrees", "--steps", "-3"])) == \
        {"prompt": "-5 degrees", "steps": -3}


def modules_after(argv: list[str]) -> set[str]:
    """The top-level modules loaded after `xlnet_cli.main(argv)` in a fresh process."""
    code = ("import sys, xlnet_cli\n"
            "try:\n    xlnet_cli.main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})), file=sys.__stderr__)")
    result = subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    return set(result.stderr.strip().splitlines()[-1].split())


@pytest.mark.parametrize("command", list(xlnet_cli.SUBCOMMANDS))
def test_help_imports_no_tensorflow(command):
    assert "tensorflow" not in modules_after([command, "--help"])


def test_plan_on_a_named_device_imports_no_tensorflow():
    loaded = modules_after(["plan", "--device", "v100-16gb", "--preset", "base", "--task", "classification"])
    assert "tensorflow" not in loaded and "trainer" in loaded  # it planned, without TensorFlow


def crash(command: str) -> subprocess.CompletedProcess:
    """A process that reports crashes as `xlnet COMMAND` does, then reads address 0."""
    return subprocess.run([sys.executable, "-c", f"import ctypes, xlnet_cli\nxlnet_cli.install_crash_report("
                           f"{command!r})\nctypes.string_at(0)"], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_native_crash_prints_the_python_stack_then_one_line_naming_the_command():
    result = crash("train")
    assert result.returncode == -signal.SIGSEGV
    lines = result.stderr.splitlines()
    assert lines[0] == "Fatal Python error: Segmentation fault"
    assert any("in string_at" in line for line in lines) and any('File "<string>", line 3' in line for line in lines)
    assert lines[-1] == ("xlnet train: crashed in native code (Segmentation fault, the Python stack above); exit "
                         "status 139 in a shell, -11 from Python's subprocess; run the same command again: it "
                         "resumes from the last checkpoint")


def test_a_native_crash_of_a_run_of_several_processes_says_to_restart_all_of_them(monkeypatch):
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    assert xlnet_cli.crash_line("train", "Fatal Python error: Aborted\n") == (
        "xlnet train: crashed in native code (Aborted, the Python stack above); exit status 134 in a shell, -6 from "
        "Python's subprocess; run the same command again on ALL 2 processes of the run (JAX ends them this way when "
        "one of them is lost): it resumes from the last checkpoint\n")


@pytest.mark.slow  # 10-25 s: imports TensorFlow
def test_a_native_crash_is_still_reported_after_tensorflow_has_loaded():
    # The crash seen in `make demo` came after TensorFlow's import, which must not replace the handler.
    code = ("import ctypes, xlnet_cli\nxlnet_cli.install_crash_report('train')\n"
            "from trainer.commands.tensorflow_startup import import_tensorflow_quietly\n"
            "import_tensorflow_quietly()\nimport tensorflow as tf\ntf.constant(1) + 1\nctypes.string_at(0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("xlnet train: crashed in native code (Segmentation fault")


def test_a_command_that_ends_without_a_crash_prints_nothing_more():
    result = subprocess.run([sys.executable, "xlnet_cli.py", "plan", "--device", "tpu-v4"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "" and "tpu-v4" in result.stdout


def test_output_that_fits_the_pipe_is_written_before_head_goes_so_the_status_is_0():
    # The README's `xlnet plan --format json | head`: 1.3 KB, one write into the pipe's 64 KiB (141 is
    # for a reader gone before the command has written everything: the test above). Python's default
    # buffering, as a user's shell runs it: PYTHONUNBUFFERED would write the last newline on its own.
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    result = subprocess.run(["bash", "-c", f"{sys.executable} xlnet_cli.py plan --format json | head -1; "
                             "exit ${PIPESTATUS[0]}"], cwd=REPO, env=environment, capture_output=True, text=True,
                            timeout=300)
    assert (result.returncode, result.stdout, result.stderr) == (0, "{\n", "")
