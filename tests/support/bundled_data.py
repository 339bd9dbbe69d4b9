"""The repository's bundled data, as the tests read it: paths, and the one reader of the corpus.

* ``CORPUS_DIR``: the bundled pretraining corpus (gzip, XLNet corpus format: one sentence per
  line, documents separated by a blank line); ``WIKI_SUMMARIES`` is its Wikipedia file.
* ``WIKI_QA``: the bundled SQuAD 2.0-format set; ``ROTTEN``: the Rotten Tomatoes splits. Tests
  import these paths from here (``WIKI_SUMMARIES as WIKI`` where a test says WIKI), never rebuild them.
* ``TINY_DATA``: the preprocessing settings of the ``tiny_data_dir`` fixture (tests/conftest.py).
* ``SMALL_DATA_DIR``: a small data directory written by the real pipeline and committed (the one of
  tests/fixtures/legacy/, see make_legacy_model_dirs.sh), read without Beam by the ``small_data_dir``
  fixture; ``SMALL_DATA`` its settings and ``SMALL_DATA_TRAINING`` the `--set` overrides that
  train on it.
"""
from __future__ import annotations

import gzip
import itertools
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO / "data" / "corpus"
WIKI_SUMMARIES = CORPUS_DIR / "wiki_summaries_en.txt.gz"
WIKI_QA = REPO / "data" / "squad" / "wiki_qa_v2.json"
ROTTEN = REPO / "data" / "finetune" / "rotten_tomatoes"
TINY_DATA = dict(seq_len=128, reuse_len=64, num_predict=21, bi_data=True, num_streams=16,
                 num_shards=4, valid_shards=2, valid_fraction=0.1, seed=0)
SMALL_DATA_DIR = REPO / "tests" / "fixtures" / "legacy" / "data"
SMALL_DATA = dict(seq_len=64, reuse_len=32, num_predict=10, perm_size=32, bi_data=True, num_streams=4,
                  num_shards=2, valid_shards=1, vocab_size=1000)
SMALL_DATA_TRAINING = [f"{name}={SMALL_DATA[name]}" for name in ("seq_len", "reuse_len", "num_predict", "perm_size")]


def read_corpus_documents(path: Path, limit: int) -> list[list[str]]:
    """The first ``limit`` documents of a bundled corpus file (lists of sentence lines)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    return [doc.splitlines() for doc in itertools.islice(text.split("\n\n"), limit)]


def corpus_lines(count: int, *, skip: int = 0, longer_than: int = 0, path: Path = WIKI_SUMMARIES) -> list[str]:
    """``count`` sentences of a bundled corpus file, in order: its non-blank lines longer than
    ``longer_than`` characters, after the first ``skip`` of them."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = (line.rstrip("\n") for line in handle)
        kept = (line for line in lines if line.strip() and len(line.strip()) > longer_than)
        return list(itertools.islice(kept, skip, skip + count))
