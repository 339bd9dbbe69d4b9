"""`xlnet preprocess --runner dask`: a real Dask cluster on 127.0.0.1 (a `dask scheduler` and `dask worker`
processes, tests/support/dask_cluster.py) against FnApiRunner, on several small input files.

Killing a worker or the scheduler mid-run needs the run to be mid-run when it happens: one input is
a FIFO, whose reader blocks until the test feeds it, so the test knows which worker is reading.
"""
from __future__ import annotations

import contextlib
import http.server
import json
import logging
import os
import shutil
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import xlnet_cli
from pipeline.dask_cluster import DaskCluster, DaskError, partition_size
from pipeline.preprocess_command import preprocess, summary
from pipeline.preprocess_config import PreprocessConfig
from support.bundled_data import WIKI_SUMMARIES, read_corpus_documents
from support.dask_cluster import DaskTestCluster, blocked_reader, feed_fifo
from support.processes import free_ports, output_of, start
from support.small_disk import small_tmpfs

SETTINGS = dict(seq_len=128, reuse_len=64, num_predict=21, bi_data=True, num_streams=8, num_shards=4, valid_shards=2,
                valid_fraction=0.1, seed=0)
FLAGS = ["--seq-len", "128", "--reuse-len", "64", "--num-predict", "21", "--num-streams", "8", "--num-shards", "4",
         "--valid-shards", "2", "--valid-fraction", "0.1", "--seed", "0"]
FILES = 6
IN_PROCESS = ["--direct_running_mode=in_memory"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Six small text files (120 documents in all)."""
    directory = tmp_path_factory.mktemp("dask_corpus")
    documents = read_corpus_documents(WIKI_SUMMARIES, 120)
    for index in range(FILES):
        part = documents[index::FILES]
        (directory / f"part-{index}.txt").write_text("\n\n".join("\n".join(d) for d in part) + "\n", encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus, spm_model) -> dict[str, bytes]:
    """What FnApiRunner writes from the corpus: every file's bytes but the manifest's output path."""
    output = tmp_path_factory.mktemp("dask_reference") / "data"
    config = PreprocessConfig(inputs=(str(corpus / "*.txt"),), output=str(output), vocab=spm_model, **SETTINGS)
    preprocess(config, workers=1, runner_options=IN_PROCESS)
    return written(output)


def written(output: Path) -> dict[str, bytes]:
    """The files of a data directory; of the manifest, all but the paths of --input and --output."""
    files = {p.name: p.read_bytes() for p in sorted(output.iterdir())}
    manifest = json.loads(files["manifest.json"])
    del manifest["config"]["inputs"], manifest["config"]["output"]
    files["manifest.json"] = json.dumps(manifest, sort_keys=True).encode("utf-8")
    return files


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def run_on(cluster_address: str | None, corpus: Path, output: Path, spm_model: str, workers: int = 1, **kwargs):
    config = PreprocessConfig(inputs=(str(corpus / "*.txt"),), output=str(output), vocab=spm_model, **SETTINGS)
    return preprocess(config, runner="dask", workers=workers, dask_scheduler=cluster_address, **kwargs)


def cli_args(corpus: Path, output: Path, spm_model: str, *flags: str) -> list[str]:
    return ["-m", "xlnet_cli", "preprocess", "--input", str(corpus / "*.txt"), "--output", str(output), "--vocab",
            spm_model, *FLAGS, "--runner", "dask", *flags]


def worker_names(cluster: DaskTestCluster) -> set[str]:
    """host:pid of every worker the cluster started, also one that has exited since (seen once in a
    loaded CI run: a worker that read and wrote its share had gone by the time the run returned)."""
    return {f"{socket.gethostname()}:{worker.pid}" for worker in cluster.workers}


@pytest.fixture(scope="module")
def two_workers():
    with DaskTestCluster(2) as cluster:
        yield cluster


@pytest.fixture
def fifo_corpus(tmp_path, corpus) -> tuple[Path, bytes]:
    """The corpus with its first file replaced by a FIFO (same name, so the same document keys);
    returns its directory and the bytes to feed the FIFO."""
    directory = tmp_path / "fifo_corpus"
    shutil.copytree(corpus, directory)
    first = directory / "part-0.txt"
    data = first.read_bytes()
    first.unlink()
    os.mkfifo(first)
    return directory, data


# ------------------------------------------------------------------------------ the same bytes, the work spread
@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 3])
def test_each_of_one_or_three_dask_workers_reads_and_writes_and_the_bytes_are_fnapirunners(
        tmp_path, corpus, spm_model, reference, workers):
    with DaskTestCluster(workers) as cluster:
        manifest, counters = run_on(cluster.address, corpus, tmp_path / "data", spm_model)
        names = worker_names(cluster)
        writers = set(counters.report.writes)
    assert set(counters.report.reads) == names
    # Which worker runs a shard's write is the Dask scheduler's choice (it favours the worker holding the
    # grouped data): seen in a loaded CI run, three workers read and two of them wrote the 6 shards.
    assert writers <= names and len(writers) >= min(2, workers)
    assert sum(counters.report.writes.values()) == 4 + 2
    assert written(tmp_path / "data") == reference
    assert counters["files"] == FILES and manifest.counters["files"] == FILES


def test_two_dask_workers_each_read_and_write_and_write_the_same_bytes(tmp_path, corpus, spm_model, reference,
                                                                        two_workers):
    manifest, counters = run_on(two_workers.address, corpus, tmp_path / "data", spm_model)
    assert written(tmp_path / "data") == reference
    report = counters.report
    assert set(report.reads) == set(report.writes) == worker_names(two_workers)
    assert sum(report.reads.values()) == FILES and sum(report.writes.values()) == 4 + 2
    line = summary(manifest, counters, 1.0).splitlines()[-1]
    assert line.startswith(f"  work: {FILES} file(s) read by 2 worker(s)")
    assert "6 shard(s) written by 2 worker(s)" in line


@pytest.mark.slow
def test_without_a_scheduler_a_local_cluster_of_worker_processes_runs_and_ends(tmp_path, corpus, spm_model,
                                                                              reference):
    run = start(cli_args(corpus, tmp_path / "data", spm_model, "--workers", "2"))
    (text,) = output_of(run, timeout=240)
    assert run.returncode == 0, text
    assert written(tmp_path / "data") == reference
    work = next(line for line in text.splitlines() if line.startswith("  work:"))
    pids = {int(name.split(":")[1].split()[0]) for name in work.split("[")[1].split("]")[0].split(", ")}
    assert len(pids) == 2 and run.pid not in pids  # two worker processes, not threads of the launcher
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]  # shut down at the end


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_fnapirunner_worker_processes_write_the_same_bytes_from_several_files(tmp_path, corpus, spm_model, reference,
                                                                              workers):
    config = PreprocessConfig(inputs=(str(corpus / "*.txt"),), output=str(tmp_path / "data"), vocab=spm_model,
                              **SETTINGS)
    _, counters = preprocess(config, workers=workers)  # multi-processing: `workers` worker processes
    assert written(tmp_path / "data") == reference
    assert sum(counters.report.reads.values()) == FILES and os.getpid() not in {
        int(name.split(":")[1]) for name in counters.report.reads}


def test_partitions_spread_files_and_shards_over_twice_the_workers():
    for elements, workers in ((12, 2), (9, 2), (12, 3), (40, 4), (3, 2)):
        size = partition_size(elements, workers)
        assert -(-elements // size) >= min(elements, 2 * workers)
    cluster = DaskCluster("tcp://127.0.0.1:1", ["a", "b"], local=False, client=None)
    assert "--dask_partition_size=3" in cluster.runner_options([], 12)
    chosen = cluster.runner_options(["--dask_npartitions=7"], 12)
    assert "--dask_npartitions=7" in chosen and not any(f.startswith("--dask_partition_size") for f in chosen)


# ------------------------------------------------------------------------------ a lost worker, a lost scheduler
@pytest.mark.slow
def test_a_worker_killed_mid_run_is_replaced_and_the_bytes_are_the_same(tmp_path, fifo_corpus, spm_model, reference):
    directory, data = fifo_corpus
    with DaskTestCluster(2) as cluster:
        run = start(cli_args(directory, tmp_path / "data", spm_model, "--dask-scheduler", cluster.address))
        with blocked_reader(str(directory / "part-0.txt"), cluster.worker_pids()) as held:
            reader = held.pid
            cluster.kill(next(w for w in cluster.workers if w.pid == reader))
        feed_fifo(str(directory / "part-0.txt"), data)  # the read, re-run on the other worker
        (text,) = output_of(run, timeout=240)
    assert run.returncode == 0, text
    assert written(tmp_path / "data") == reference
    assert f"{socket.gethostname()}:{reader}" not in text.splitlines()[-1]


@pytest.mark.slow
def test_a_run_whose_only_worker_is_killed_fails_in_one_line_and_publishes_nothing(tmp_path, fifo_corpus,
                                                                                   spm_model):
    directory, _ = fifo_corpus
    with DaskTestCluster(1) as cluster:
        run = start(cli_args(directory, tmp_path / "data", spm_model, "--dask-scheduler", cluster.address))
        with blocked_reader(str(directory / "part-0.txt"), cluster.worker_pids()):
            cluster.kill(cluster.workers[0])
            (text,) = output_of(run, timeout=120)
    assert run.returncode == 3, text
    assert f"error: --dask-scheduler {cluster.address}: no Dask worker was left" in text, text
    assert "Traceback" not in text and names(tmp_path / "data") == [], text


def test_an_unreachable_scheduler_is_one_line_naming_dask_scheduler(tmp_path, corpus, spm_model, capsys):
    (port,) = free_ports(1)
    began = time.monotonic()
    code = xlnet_cli.main(["preprocess", "--input", str(corpus / "*.txt"), "--output", str(tmp_path / "data"),
                           "--vocab", spm_model, *FLAGS, "--runner", "dask", "--dask-scheduler",
                           f"tcp://127.0.0.1:{port}", "--dask_connection_timeout", "2"])
    err = capsys.readouterr().err
    assert code == 3 and time.monotonic() - began < 30
    assert f"error: --dask-scheduler tcp://127.0.0.1:{port}: cannot reach the Dask scheduler" in err
    assert len(err.strip().splitlines()) == 1 and names(tmp_path / "data") == []


@pytest.mark.slow
def test_a_scheduler_gone_mid_run_is_one_line_naming_dask_scheduler(tmp_path, fifo_corpus, spm_model):
    directory, _ = fifo_corpus
    with DaskTestCluster(1) as cluster:
        run = start(cli_args(directory, tmp_path / "data", spm_model, "--dask-scheduler", cluster.address))
        with blocked_reader(str(directory / "part-0.txt"), cluster.worker_pids()):
            began = time.monotonic()
            cluster.kill(cluster.scheduler)
            (text,) = output_of(run, timeout=120)
    assert run.returncode == 3, text
    assert time.monotonic() - began < 60
    assert f"error: --dask-scheduler {cluster.address}: lost the connection to the Dask scheduler" in text, text
    assert "nothing was published" in text
    assert "Traceback" not in text and names(tmp_path / "data") == [], text


# ------------------------------------------------------------------------------ workers and options checked first
@pytest.mark.slow
def test_a_worker_without_sentencepiece_is_named_with_the_missing_package(tmp_path, corpus, spm_model):
    site = tmp_path / "site"
    site.mkdir()  # a worker where `import sentencepiece` fails as when it is not installed
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['sentencepiece'] = None\n")
    with DaskTestCluster(0) as cluster:
        cluster.add_worker("bare", env={"PYTHONPATH": str(site)})
        cluster.wait_for_workers(1)
        with pytest.raises(DaskError, match=r"worker tcp://127\.0\.0\.1:\d+ lacks the package 'sentencepiece'; "
                                            r"install the project on every worker"):
            run_on(cluster.address, corpus, tmp_path / "data", spm_model)
    assert names(tmp_path / "data") == []


@pytest.mark.parametrize("flags, named", [
    (["--runner", "dask", "--dask_npartition", "3"], "--dask_npartition"),
    (["--runner", "dask", "--dask_npartitions", "many"], "--dask_npartitions"),
    (["--dask_npartitions", "3"], "--dask_npartitions"),  # a Dask option for FnApiRunner
    (["--dask-scheduler", "tcp://127.0.0.1:1"], "--dask-scheduler"),
])
def test_misspelled_or_misplaced_dask_options_are_usage_errors(tmp_path, spm_model, capsys, flags, named):
    code = xlnet_cli.main(["preprocess", "--input", "x", "--output", str(tmp_path / "o"), "--vocab", spm_model,
                           *flags])
    err = capsys.readouterr().err
    assert code == 2 and named in err and "Traceback" not in err


# ------------------------------------------------------------------------------ write errors and a lost lock
@pytest.mark.slow
def test_a_full_disk_under_dask_is_one_sentence_exit_3_and_leaves_nothing(tmp_path, corpus, spm_model, capfd,
                                                                          two_workers):
    with small_tmpfs(tmp_path / "small", 64 * 1024) as disk:
        output = disk / "data"
        code = xlnet_cli.main(["preprocess", "--input", str(corpus / "*.txt"), "--output", str(output), "--vocab",
                               spm_model, *FLAGS, "--runner", "dask", "--dask-scheduler", two_workers.address])
        err = capfd.readouterr().err
        assert code == 3, err
        assert f"error: the disk holding --output {output} is full (No space left on device" in err
        assert "Traceback" not in err and names(output) == []


@pytest.mark.slow
def test_no_manifest_is_published_under_dask_in_a_directory_another_run_has_taken(tmp_path, corpus, spm_model,
                                                                                  two_workers):
    import apache_beam as beam

    from pipeline.beam_pipeline import build_pipeline
    from pipeline.corpus import expand_inputs
    from pipeline.data_directory import take_report
    from pipeline.output_lock import OutputLock
    from pipeline.preprocess_command import pipeline_options
    from pipeline.dask_cluster import wait_for_run
    from pipeline.vocab import load_vocab

    output = tmp_path / "data"
    output.mkdir()
    config = PreprocessConfig(inputs=(str(corpus / "*.txt"),), output=str(output), vocab=spm_model, **SETTINGS)
    cluster = DaskCluster(two_workers.address, ["a", "b"], local=False, client=None)
    with OutputLock(str(output)):  # the run that has taken the directory meanwhile
        options = pipeline_options("dask", 2, cluster.runner_options([], FILES + 6))
        pipeline = beam.Pipeline(options=options)
        path = build_pipeline(pipeline, config, load_vocab(spm_model), expand_inputs(config.inputs),
                              lock_token="this run's")
        wait_for_run(pipeline.run(), cluster)
        report = take_report(path)
    assert f"pid {os.getpid()}" in report["lost_lock"] and report["manifest"] is None
    assert "manifest.json" not in names(output)


# ------------------------------------------------------------------------------ nothing after a lost scheduler
def every_path(directory: Path) -> list[str]:
    """Everything under ``directory``, hidden files and subdirectories too."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")) if directory.exists() else []


@pytest.mark.slow
def test_workers_left_running_by_a_killed_scheduler_write_nothing_into_output(tmp_path, corpus, spm_model):
    """The scheduler is killed while its worker waits, inside the shard stage, for the vocabulary
    (a FIFO); once the command has failed the worker is let go: for 30 s nothing appears in --output,
    and a second run into it succeeds."""
    vocab = tmp_path / "spiece.model"
    os.mkfifo(vocab)
    data = Path(spm_model).read_bytes()
    output = tmp_path / "data"
    with DaskTestCluster(1) as cluster:
        run = start(cli_args(corpus, output, str(vocab), "--dask-scheduler", cluster.address))
        feed_fifo(str(vocab), data)  # the launcher's read; the worker's comes in the shard stage
        with blocked_reader(str(vocab), cluster.worker_pids(), timeout=120) as worker:
            cluster.kill(cluster.scheduler)
            (text,) = output_of(run, timeout=120)
            before = every_path(output)
            worker.feed(data)  # the orphaned worker now writes its shards, if it may
        assert run.returncode == 3 and "nothing was published" in text, text
        seen = set(before)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen |= set(every_path(output))
            time.sleep(0.1)
    assert seen == set(before) == set(), seen
    with DaskTestCluster(1) as cluster:
        run_on(cluster.address, corpus, output, spm_model)
    assert "manifest.json" in names(output)


# ------------------------------------------------------------------------------ what is not a Dask scheduler
class _SilentHttp(socketserver.ThreadingTCPServer):
    """A web server: says nothing until it has read a request (a dashboard, a plain HTTP server)."""

    daemon_threads = True
    allow_reuse_address = True


@contextlib.contextmanager
def serving(handler) -> Iterator[int]:
    server = _SilentHttp(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _Greeter(socketserver.BaseRequestHandler):
    """A server that speaks first, not Dask's protocol (an SSH server, say)."""

    def handle(self) -> None:
        self.request.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        time.sleep(1)


@pytest.mark.parametrize("handler", [http.server.SimpleHTTPRequestHandler, _Greeter], ids=["http", "greets-first"])
def test_a_port_that_is_not_a_dask_scheduler_is_refused_in_one_line_and_the_lock_released(
        tmp_path, corpus, spm_model, capsys, handler):
    from pipeline.dask_cluster import CONNECT_SECONDS, HANDSHAKE_SECONDS

    with serving(handler) as port:
        began = time.monotonic()
        code = xlnet_cli.main(["preprocess", "--input", str(corpus / "*.txt"), "--output", str(tmp_path / "data"),
                               "--vocab", spm_model, *FLAGS, "--runner", "dask", "--dask-scheduler",
                               f"tcp://127.0.0.1:{port}"])
        took = time.monotonic() - began
    err = capsys.readouterr().err
    assert code == 3, err
    assert took < CONNECT_SECONDS + HANDSHAKE_SECONDS + 5
    assert f"error: --dask-scheduler tcp://127.0.0.1:{port} is not a Dask scheduler" in err
    assert len(err.strip().splitlines()) == 1 and every_path(tmp_path / "data") == []  # no lock left


@pytest.mark.parametrize("flags, named", [
    (["--dask-scheduler", "foo://127.0.0.1:8786"], "--dask-scheduler"),
    (["--dask-scheduler", "not a url"], "--dask-scheduler"),
    (["--dask-scheduler", "tcp://127.0.0.1:notaport"], "--dask-scheduler"),
    (["--dask_client_address", "tcp://127.0.0.1:99999"], "--dask_client_address"),
    (["--dask_connection_timeout", "-1"], "--dask_connection_timeout"),
    (["--dask_connection_timeout", "inf"], "--dask_connection_timeout"),
    (["--dask_npartitions", "-3"], "--dask_npartitions"),
    (["--dask_partition_size", "0"], "--dask_partition_size"),
])
def test_bad_scheduler_addresses_timeouts_and_partitions_are_usage_errors_naming_the_flag(
        tmp_path, spm_model, capsys, flags, named):
    code = xlnet_cli.main(["preprocess", "--input", "x", "--output", str(tmp_path / "o"), "--vocab", spm_model,
                           "--runner", "dask", *flags])
    err = capsys.readouterr().err
    assert code == 2 and f"error: {named}" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()  # before any work


# ------------------------------------------------------------------------------ progress lines
def test_a_dask_run_logs_each_files_read_line_and_each_shards_written_line(tmp_path, corpus, spm_model, two_workers,
                                                                          caplog):
    with caplog.at_level(logging.INFO, logger="xlnet"):
        run_on(two_workers.address, corpus, tmp_path / "data", spm_model)
    reads = [m for m in caplog.messages if m.startswith("read ") and " documents, " in m]
    writes = [m for m in caplog.messages if m.startswith(f"wrote {tmp_path / 'data'}/")]
    assert sorted(m.split(":")[0] for m in reads) == [f"read {corpus}/part-{i}.txt" for i in range(FILES)]
    assert len(writes) == 4 + 2 and all(" records from " in m for m in writes)
