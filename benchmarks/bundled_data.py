"""The bundled corpus (data/corpus), turned into a training data directory once and reused.

Runs the real `xlnet vocab` and `xlnet preprocess` (by default seq_len 128, reuse_len 64,
num_predict 21, bi_data, 32 streams, vocab 8000: the tiny preset's shapes) into WORKDIR, skipping
the work when the data directory's manifest.json already exists. Each record shape gets a
directory of its own (WORKDIR/data-seqS-reuseR-predictP); the vocabulary (WORKDIR/spiece.model,
``vocabulary()`` alone for a script that needs no records) is shared.
"""
from __future__ import annotations

import gzip
import itertools
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIKIPEDIA = REPO / "data" / "corpus" / "wiki_summaries_en.txt.gz"
CORPUS = str(REPO / "data" / "corpus" / "*.txt.gz")


def wikipedia_documents(limit: int) -> list[list[str]]:
    """The first ``limit`` documents of the bundled Wikipedia text, each a list of its lines
    (the corpus format: one sentence or paragraph per line, a blank line between documents)."""
    with gzip.open(WIKIPEDIA, "rt", encoding="utf-8") as handle:
        return [document.splitlines() for document in itertools.islice(handle.read().split("\n\n"), limit)]


def vocabulary(workdir: str | Path) -> Path:
    """WORKDIR/spiece.model, the 8000-piece vocabulary of the bundled corpus (trained unless it is there)."""
    import xlnet_cli

    workdir = Path(workdir)
    if not (workdir / "spiece.model").exists():
        workdir.mkdir(parents=True, exist_ok=True)
        assert xlnet_cli.main(["vocab", "--input", CORPUS, "--output", str(workdir / "spiece"), "--vocab-size", "8000",
                               "--input-sentence-size", "100000", "--seed", "0", "--num-threads", "2"]) == 0
    return workdir / "spiece.model"


def prepare(workdir: str | Path, num_streams: int = 32, seq_len: int = 128, reuse_len: int = 64,
            num_predict: int = 21) -> str:
    """Path of a preprocessed data directory for the whole bundled corpus with these record shapes."""
    import xlnet_cli

    workdir = Path(workdir)
    data = workdir / f"data-seq{seq_len}-reuse{reuse_len}-predict{num_predict}"
    if (data / "manifest.json").exists():
        return str(data)
    vocab = vocabulary(workdir)
    assert xlnet_cli.main(["preprocess", "--input", CORPUS, "--output", str(data), "--vocab", str(vocab),
                           "--seq-len", str(seq_len), "--reuse-len", str(reuse_len),
                           "--num-predict", str(num_predict),
                           "--num-streams", str(num_streams), "--num-shards", "4", "--valid-shards", "2",
                           "--valid-fraction", "0.05", "--workers", "2"]) == 0
    return str(data)
