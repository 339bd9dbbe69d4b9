"""Shared fixtures on the bundled corpus (data/corpus), used across the test packages.

* ``corpus_files``: paths of the bundled corpus files (gzip, XLNet corpus format, 9 MB of text).
* ``corpus_sample``: a plain-text file with the first documents of each corpus file (about
  300 KB), for tests that must run in seconds.
* ``spm_model``: path of a SentencePiece model trained by ``pipeline.vocab.train_vocab`` on
  the whole bundled corpus with vocab size 8000 (the tiny preset's) from a seeded sample of
  10,000 sentences (a few seconds). ``vocab`` is the same model loaded.
* ``tiny_data_dir``: ``corpus_sample`` preprocessed by the real Beam pipeline
  (FnApiRunner, 1 worker) with seq_len 128, reuse_len 64, num_predict 21, bi_data on,
  16 streams, 4 train shards + 2 valid shards, valid fraction 0.1.
* ``small_data_dir``: no Beam needed: a copy of the committed data directory
  ``support.bundled_data.SMALL_DATA_DIR`` (the first 60 Wikipedia summaries, vocabulary of 1000
  pieces beside the manifest, seq_len 64, reuse_len 32, num_predict 10, 4 streams, 2 train shards +
  1 valid shard; settings ``SMALL_DATA``), its manifest completed with each shard's size as
  `xlnet preprocess` records it today. For tests whose data only has to be real and small.
* ``wiki_qa``: the bundled SQuAD 2.0-format set data/squad/wiki_qa_v2.json, read by
  ``trainer.inputs.squad.read_squad``; ``squad_tokenizer`` is the cased SquadTokenizer of ``vocab``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.bundled_data import CORPUS_DIR, SMALL_DATA_DIR, TINY_DATA, WIKI_QA, read_corpus_documents

SAMPLE_DOCUMENTS_PER_FILE = {"wiki_summaries_en.txt.gz": 400, "kjv_bible.txt.gz": 40}


@pytest.fixture(scope="session")
def corpus_files() -> list[str]:
    files = sorted(str(p) for p in CORPUS_DIR.glob("*.txt.gz"))
    assert files, f"bundled corpus missing under {CORPUS_DIR}"
    return files


@pytest.fixture(scope="session")
def corpus_sample(tmp_path_factory, corpus_files) -> str:
    path = tmp_path_factory.mktemp("corpus_sample") / "sample.txt"
    documents = []
    for file in corpus_files:
        documents += read_corpus_documents(Path(file), SAMPLE_DOCUMENTS_PER_FILE[Path(file).name])
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def spm_model(tmp_path_factory, corpus_files) -> str:
    from pipeline.vocab import VocabConfig, train_vocab

    prefix = tmp_path_factory.mktemp("vocab") / "spiece"
    vocab = train_vocab(VocabConfig(inputs=tuple(corpus_files), output_prefix=str(prefix), vocab_size=8000,
                                    input_sentence_size=10000, seed=0, num_threads=2))
    return vocab.path


@pytest.fixture(scope="session")
def vocab(spm_model):
    from pipeline.vocab import load_vocab

    return load_vocab(spm_model)


@pytest.fixture(scope="session")
def wiki_qa():
    from trainer.inputs.squad import read_squad

    return read_squad(str(WIKI_QA))


@pytest.fixture(scope="session")
def squad_tokenizer(vocab):
    from trainer.inputs.squad import SquadTokenizer

    return SquadTokenizer(vocab, uncased=False)


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory, corpus_sample, spm_model) -> str:
    from pipeline.preprocess_command import preprocess
    from pipeline.preprocess_config import PreprocessConfig

    output = tmp_path_factory.mktemp("tiny_data") / "data"
    config = PreprocessConfig(inputs=(corpus_sample,), output=str(output), vocab=spm_model, **TINY_DATA)
    preprocess(config, runner="FnApiRunner", workers=1)
    return str(output)


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory) -> str:
    import json
    import shutil

    output = tmp_path_factory.mktemp("small_data") / "data"
    shutil.copytree(SMALL_DATA_DIR, output)
    manifest = json.loads((output / "manifest.json").read_text())
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            shard["bytes"] = (output / shard["file"]).stat().st_size
    (output / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return str(output)


@pytest.fixture(scope="session")
def mirrored_strategy():
    """MirroredStrategy over the two logical CPUs, one for the whole session: strategies created one
    after another in a process number their collectives alike, and a second one's all-reduce
    can meet a first one's."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(autouse=True)
def no_logging_to_closed_streams():
    """Drops root logging handlers bound to a stream that is closed by now: a command run by an
    earlier test (logging.basicConfig) bound one to that test's captured stderr, and logging to it
    would print "--- Logging error ---" and a traceback into a later test's stderr."""
    import logging

    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            root.removeHandler(handler)
    yield


def pytest_configure(config) -> None:
    """TensorFlow loaded as the commands load it, and two logical CPU devices for the whole session,
    so MirroredStrategy tests have two replicas.

    Must happen before TensorFlow initialises its runtime (any op), hence a configure hook
    rather than a fixture. Other tests keep running on /cpu:0 as before.
    """
    del config
    import_tensorflow_as_the_commands_do()
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)


@pytest.hookimpl(trylast=True)  # after the session's fixtures are torn down
def pytest_sessionfinish(session) -> None:
    """Collects the session's garbage now, then freezes what is left (gc.freeze), so that the full
    collections pytest runs after this hook (its unraisable-exception check, at unconfigure and at
    cleanup) walk almost nothing. Under pytest-xdist a worker has reported itself finished by then,
    and execnet gives it 5 s to end before it sends the worker a SIGINT: with TensorFlow, Keras and
    JAX loaded one full collection of a worker's heap takes 1 s on a quiet machine and more under
    load, two of them outlasted the 5 s, and the SIGINT's KeyboardInterrupt surfaced inside JAX's gc
    callback (_xla_gc_callback) as a PytestUnraisableExceptionWarning closing the run."""
    del session
    import gc

    gc.collect()
    gc.freeze()


def import_tensorflow_as_the_commands_do() -> None:
    """TensorFlow imported by the commands' own start-up (trainer/commands/tensorflow_startup.py), so
    that tests measure what a command measures on any x86 CPU: the CPU allocator keeps statistics (a
    step's peak memory) in this process and, through the environment, in the tests' children. The
    start-up's C++ log lines (a failed cuInit on a machine without a GPU, oneDNN's notices) are
    dropped rather than opening every test run. The log level it sets lasts only for this process's
    import: children keep the environment they had, so a command run by a test starts as a user's."""
    from trainer.commands.tensorflow_startup import import_tensorflow_quietly

    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    import_tensorflow_quietly()
    if level is None:
        os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)


# ----------------------------------------------------------------------------------------------
# Google Cloud Storage on 127.0.0.1 (tests/support/gcs_emulator.py): ``gcs`` and ``gcs_prefix``.
# ----------------------------------------------------------------------------------------------
# The section's imports live with it; gcs_emulator is stdlib only.
from collections.abc import Iterator  # noqa: E402

from support.gcs_emulator import GcsEmulator  # noqa: E402

GCS_BUCKET = "xlnet-test"


@pytest.fixture(scope="session")
def gcs(tmp_path_factory) -> Iterator[GcsEmulator]:
    """A real GCS JSON API with bucket ``GCS_BUCKET`` served by a child process (``GcsEmulator``).

    Its ``env`` is set in ``os.environ`` for the rest of the session, so TensorFlow and Beam in
    this process, and subprocesses started with it, use gs:// paths against it. TensorFlow
    reads most GCS variables when it creates its GCS filesystem, at the first gs:// access of
    the process: a test touching gs:// must request this fixture (or ``gcs_prefix``). Its retry
    settings (GCS_RETRY_CONFIG_*) are read at ``import tensorflow``, which ``pytest_configure``
    does: they can only be changed for subprocesses.
    """
    emulator = GcsEmulator.start(tmp_path_factory.mktemp("gcs"), GCS_BUCKET)
    saved = {name: os.environ.get(name) for name in emulator.env}
    os.environ.update(emulator.env)
    try:
        yield emulator
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        emulator.stop()


@pytest.fixture
def gcs_prefix(gcs, request) -> Iterator[str]:
    """A fresh ``gs://BUCKET/<test name>-<n>/`` for one test, with faults off before and after it."""
    gcs.set_faults()
    yield gcs.new_prefix(request.node.name)
    gcs.set_faults()


# Short streams (many streams per directory), so that rates show within a few hundred steps.
MIXTURE_PARTS = {"wiki-a": ("wiki_summaries_en.txt.gz", 0, 150),
                 "wiki-b": ("wiki_summaries_en.txt.gz", 150, 300),
                 "bible": ("kjv_bible.txt.gz", 0, 30)}


def _preprocess_part(root: Path, name: str, spm_model: str) -> str:
    from pipeline.preprocess_command import preprocess
    from pipeline.preprocess_config import PreprocessConfig

    file, first, last = MIXTURE_PARTS[name]
    documents = read_corpus_documents(CORPUS_DIR / file, last)[first:]
    text = root / f"{name}.txt"
    text.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    settings = {**TINY_DATA, "num_streams": 48, "num_shards": 2, "valid_shards": 1, "valid_fraction": 0.3}
    config = PreprocessConfig(inputs=(str(text),), output=str(root / name), vocab=spm_model, **settings)
    preprocess(config, runner="FnApiRunner", workers=1)
    return str(root / name)


@pytest.fixture(scope="session")
def mixture_dirs(tmp_path_factory, spm_model) -> dict[str, str]:
    """Three data directories to mix: two parts of the Wikipedia summaries and the start of the Bible."""
    root = tmp_path_factory.mktemp("mixture")
    return {name: _preprocess_part(root, name, spm_model) for name in MIXTURE_PARTS}


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook, whose id change pytest 9 ignores
def pytest_collection_modifyitems(config, items) -> None:
    """The ``xdist_group`` marker keeps a group's tests on one worker (tests/support/xdist_groups.py)."""
    from support.xdist_groups import apply_groups

    apply_groups(config, items)
