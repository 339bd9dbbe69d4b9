"""The bundled corpus (data/corpus), turned into a training data directory once and reused.

Runs the real `xlnet vocab` and `xlnet preprocess` (seq_len 128, reuse_len 64, num_predict 21,
bi_data, 32 streams, vocab 8000: the tiny preset's shapes) into WORKDIR, skipping the work when
WORKDIR/data/manifest.json already exists.
"""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def prepare(workdir: str | Path, num_streams: int = 32) -> str:
    """Path of a preprocessed data directory for the whole bundled corpus."""
    import xlnet_cli

    workdir = Path(workdir)
    data = workdir / "data"
    if (data / "manifest.json").exists():
        return str(data)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = str(REPO / "data" / "corpus" / "*.txt.gz")
    vocab = workdir / "spiece"
    if not (workdir / "spiece.model").exists():
        assert xlnet_cli.main(["vocab", "--input", corpus, "--output", str(vocab), "--vocab-size", "8000",
                               "--input-sentence-size", "100000", "--seed", "0", "--num-threads", "2"]) == 0
    assert xlnet_cli.main(["preprocess", "--input", corpus, "--output", str(data), "--vocab", f"{vocab}.model",
                           "--seq-len", "128", "--reuse-len", "64", "--num-predict", "21",
                           "--num-streams", str(num_streams), "--num-shards", "4", "--valid-shards", "2",
                           "--valid-fraction", "0.05", "--workers", "2"]) == 0
    return str(data)
