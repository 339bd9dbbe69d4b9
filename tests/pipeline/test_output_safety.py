"""`xlnet preprocess` and its --output: one writer per data directory, and every failure to write it
(a full disk, a read-only or misplaced directory, a signal) as one sentence, with nothing partial left.

Real processes, real Beam (FnApiRunner), real filesystems: a small tmpfs for a full disk and a
read-only one (mounting needs root: those tests are skipped otherwise), the GCS emulator for gs://.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import xlnet_cli
from pipeline.output_lock import LOCK_NAME, OutputInUseError, OutputLock
from support.bundled_data import TINY_DATA
from support.processes import exited_pid, output_of, start, stopped, wait_for

SMALL = ["--seq-len", "128", "--reuse-len", "64", "--num-predict", "21", "--num-streams", "4", "--num-shards", "2",
         "--valid-shards", "1"]
IN_PROCESS = ["--workers", "1", "--direct_running_mode", "in_memory"]


def preprocess_args(source: str, output: str, spm_model: str, *flags: str) -> list[str]:
    return ["-m", "xlnet_cli", "preprocess", "--input", source, "--output", output, "--vocab", spm_model, *SMALL,
            *flags]


def run_cli(source: str, output: str, spm_model: str, *flags: str) -> int:
    return xlnet_cli.main(["preprocess", "--input", source, "--output", output, "--vocab", spm_model, *SMALL,
                           *IN_PROCESS, *flags])


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


@contextlib.contextmanager
def tmpfs(directory: Path, options: str):
    """A tmpfs mounted on ``directory`` for the block (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


# ------------------------------------------------------------------------------ one writer per directory
def test_two_concurrent_runs_into_one_output_never_both_succeed(tmp_path, corpus_sample, spm_model):
    from tfrecords.manifest import load_manifest
    from tfrecords.verification import verify_data_directory

    output = str(tmp_path / "data")
    runs = [start(preprocess_args(corpus_sample, output, spm_model, *IN_PROCESS)) for _ in range(2)]
    outputs = output_of(*runs, timeout=180)
    codes = sorted(run.returncode for run in runs)
    assert codes == [0, 2], outputs
    loser = outputs[[run.returncode for run in runs].index(2)]
    assert "being written by another `xlnet preprocess`" in loser or "is not empty" in loser, loser
    assert "Traceback" not in "".join(outputs)
    report = verify_data_directory(load_manifest(output))
    assert not report.damaged, report.summary()
    assert LOCK_NAME not in names(Path(output))


def test_a_second_run_on_a_locked_output_stops_naming_the_owner(tmp_path, corpus_sample, spm_model, capsys):
    output = tmp_path / "data"
    output.mkdir()
    with OutputLock(str(output)):
        code = run_cli(corpus_sample, str(output), spm_model)
    err = capsys.readouterr().err
    assert code == 2
    assert f"--output {output} is being written by another `xlnet preprocess`" in err
    assert f"pid {os.getpid()}" in err and "Traceback" not in err
    assert names(output) == []  # the owner's lock is gone with it; the refused run wrote nothing


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path, corpus_sample, spm_model):
    output = tmp_path / "data"
    output.mkdir()
    (output / LOCK_NAME).write_text(json.dumps({"host": os.uname().nodename, "pid": exited_pid(),
                                                "started": time.time() - 60, "heartbeat": time.time() - 60,
                                                "token": "gone"}))
    assert run_cli(corpus_sample, str(output), spm_model) == 0
    assert "manifest.json" in names(output) and LOCK_NAME not in names(output)


def test_object_store_lock_refuses_a_live_owner_and_takes_over_a_dead_one(gcs_prefix):
    from apache_beam.io.filesystems import FileSystems

    output = gcs_prefix + "data"
    first = OutputLock(output, settle_seconds=0.1)
    with first:
        with pytest.raises(OutputInUseError, match=rf"--output {output} is being written .*pid {os.getpid()}"):
            OutputLock(output, settle_seconds=0.1).acquire()
    assert not FileSystems.exists(first.path)
    with FileSystems.create(first.path) as handle:  # a run on this host that is gone
        handle.write(json.dumps({"host": os.uname().nodename, "pid": exited_pid(), "started": 0,
                                 "heartbeat": time.time(), "token": "gone"}).encode())
    with OutputLock(output, settle_seconds=0.1) as taken:
        assert taken.is_ours()
    assert not FileSystems.exists(first.path)


def test_no_manifest_is_published_in_a_directory_another_run_has_taken(tmp_path, corpus_sample, spm_model):
    import apache_beam as beam

    from pipeline.beam_pipeline import build_pipeline
    from pipeline.corpus import expand_inputs
    from pipeline.data_directory import take_report
    from pipeline.preprocess_command import pipeline_options
    from pipeline.preprocess_config import PreprocessConfig
    from pipeline.vocab import load_vocab

    output = tmp_path / "data"
    output.mkdir()
    config = PreprocessConfig(inputs=(corpus_sample,), output=str(output), vocab=spm_model, **TINY_DATA)
    with OutputLock(str(output)):  # the run that has taken the directory meanwhile
        pipeline = beam.Pipeline(options=pipeline_options("FnApiRunner", 1, ["--direct_running_mode=in_memory"]))
        report_path = build_pipeline(pipeline, config, load_vocab(spm_model), expand_inputs(config.inputs),
                                     lock_token="this run's")
        pipeline.run().wait_until_finish()
        report = take_report(report_path)
    assert f"pid {os.getpid()}" in report["lost_lock"] and report["manifest"] is None
    assert "manifest.json" not in names(output)


# ------------------------------------------------------------------------------ an output that cannot be written
def test_a_full_disk_is_one_sentence_exit_3_and_leaves_nothing(tmp_path, corpus_sample, spm_model, capfd):
    with tmpfs(tmp_path / "small", "size=1m") as disk:
        output = disk / "data"
        code = run_cli(corpus_sample, str(output), spm_model, "--num-streams", "16", "--num-shards", "4",
                       "--valid-shards", "2")
        err = capfd.readouterr().err
        assert code == 3, err
        assert f"error: the disk holding --output {output} is full (No space left on device" in err
        assert "free space there or choose another --output" in err and "what the run wrote was removed" in err
        assert "Traceback" not in err
        assert names(output) == []


@pytest.mark.slow
def test_a_full_disk_under_worker_processes_prints_no_traceback(tmp_path, corpus_sample, spm_model):
    with tmpfs(tmp_path / "small", "size=1m") as disk:
        output = disk / "data"
        run = start(preprocess_args(corpus_sample, str(output), spm_model, "--num-streams", "16", "--num-shards",
                                    "4", "--valid-shards", "2", "--workers", "2"))
        (text,) = output_of(run, timeout=180)
        assert run.returncode == 3, text
        assert f"error: the disk holding --output {output} is full (No space left on device" in text
        assert "Traceback" not in text
        assert names(output) == []


def test_a_read_only_output_is_a_usage_error_naming_output(tmp_path, corpus_sample, spm_model, capsys):
    with tmpfs(tmp_path / "ro", "ro,size=1m") as disk:
        for output in (disk, disk / "new"):
            assert run_cli(corpus_sample, str(output), spm_model) == 2
            err = capsys.readouterr().err
            assert f"error: --output {output} is on a read-only filesystem" in err
            assert "Traceback" not in err


def test_an_output_that_is_a_file_is_a_usage_error_naming_output(tmp_path, corpus_sample, spm_model, capsys):
    (tmp_path / "file").write_text("not a directory")
    assert run_cli(corpus_sample, str(tmp_path / "file"), spm_model) == 2
    assert f"error: --output {tmp_path / 'file'} is a file, not a directory" in capsys.readouterr().err
    assert run_cli(corpus_sample, str(tmp_path / "file" / "data"), spm_model) == 2
    assert "a part of its path is a file, not a directory" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "not a directory"


def test_an_object_store_output_that_is_a_file_is_a_usage_error_naming_output(gcs_prefix, corpus_sample, spm_model,
                                                                              capsys):
    from apache_beam.io.filesystems import FileSystems

    output = gcs_prefix + "data"
    with FileSystems.create(output) as handle:
        handle.write(b"not a directory")
    assert run_cli(corpus_sample, output, spm_model) == 2
    assert f"error: --output {output} is a file, not a directory" in capsys.readouterr().err
    assert [m.path for m in FileSystems.match([gcs_prefix + "*"])[0].metadata_list] == [output]


# ------------------------------------------------------------------------------ signals
def worker_processes(pid: int) -> list[int]:
    """The live Beam SDK worker processes descended from ``pid``."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(name))
    found, pending = [], list(children.get(pid, []))
    while pending:
        each = pending.pop()
        with contextlib.suppress(OSError):
            if b"sdk_worker_main" in Path(f"/proc/{each}/cmdline").read_bytes():
                found.append(each)
        pending += children.get(each, [])
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_local_workers_promptly_and_publishes_nothing(tmp_path, corpus_files, spm_model, signum):
    output, log = tmp_path / "data", tmp_path / "log.txt"
    with log.open("w") as handle:
        run = start(preprocess_args(str(Path(corpus_files[0]).parent / "*.txt.gz"), str(output), spm_model,
                                    "--num-streams", "16", "--num-shards", "4", "--valid-shards", "2",
                                    "--workers", "2"), stdout=handle)
    with stopped(run):
        wait_for(lambda: "xlnet.worker INFO read " in log.read_text(), run, timeout=120, what="the workers reading")
        workers = worker_processes(run.pid)
        assert len(workers) >= 2  # each a shell and the Python it started
        sent = time.monotonic()
        run.send_signal(signum)
        run.wait(timeout=15)
        took = time.monotonic() - sent
    time.sleep(1.0)  # a worker left behind would go on logging
    text = log.read_text()
    assert run.returncode == 128 + signum, text
    assert took < 5, f"{took:.1f} s"
    assert not [pid for pid in workers if alive(pid)]
    assert text.rstrip().endswith(f"xlnet preprocess: interrupted by {signal.Signals(signum).name}; nothing was "
                                  f"published in {output} and its partial shards were removed"), text
    assert "Traceback" not in text and "grpc" not in text.lower()
    assert names(output) == []


# ------------------------------------------------------------------------------ --input
@pytest.mark.parametrize("suffix", ["", "/"])
def test_an_input_directory_is_a_usage_error_naming_input(tmp_path, corpus_sample, spm_model, capsys, suffix):
    directory = str(Path(corpus_sample).parent) + suffix
    assert run_cli(directory, str(tmp_path / "data"), spm_model) == 2
    err = capsys.readouterr().err
    assert f"error: --input '{directory}' is a directory; give its files or a glob, e.g. --input '" in err
    assert "/*.txt'" in err and "unreadable" not in err
    assert not (tmp_path / "data").exists()


# ------------------------------------------------------------------------------ the run's staging place
def test_a_worker_writes_nothing_once_its_runs_staging_place_is_closed(tmp_path):
    from pipeline.data_directory import RunClosedError, close_staging, create_in_run, open_staging, staging_directory

    staging = staging_directory(str(tmp_path), "run")
    open_staging(staging)
    close_staging(staging)  # the launcher has ended the run
    with pytest.raises(RunClosedError):
        with create_in_run(f"{staging}/train-00000-of-00001.tfrecord", staging) as handle:
            handle.write(b"late")
    assert names(tmp_path) == []  # the staging place did not come back


def test_a_file_finished_after_its_run_closed_is_removed_by_its_writer(tmp_path):
    from pipeline.data_directory import (OPEN_MARKER, RunClosedError, create_in_run, open_staging,
                                         staging_directory)

    staging = staging_directory(str(tmp_path), "run")
    open_staging(staging)
    with pytest.raises(RunClosedError):
        with create_in_run(f"{staging}/train-00000-of-00001.tfrecord", staging) as handle:
            os.remove(os.path.join(staging, OPEN_MARKER))  # the run closes while the file is written
            handle.write(b"late")
    assert os.listdir(staging) == []
