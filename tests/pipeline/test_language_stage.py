"""`xlnet preprocess --languages` (pipeline/language_id.py): each document identified before the quality filters,
kept only in the languages asked for with at least --language-threshold, its removal reason language:<code>,
counted in the manifest like the other stages; an unknown code or threshold is one line, exit 2, before any work."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import xlnet_cli
from pipeline.cleaning import clean_document
from pipeline.language_id import LanguageFilter, parse_languages
from pipeline.preprocess_command import NoTrainingRecordsError, preprocess
from pipeline.preprocess_config import PreprocessConfig
from support.bundled_data import TINY_DATA, WIKI_SUMMARIES, read_corpus_documents

GERMAN = [
    "Berlin ist die Hauptstadt der Bundesrepublik Deutschland und mit rund 3,8 Millionen Einwohnern die "
    "bevölkerungsreichste Stadt des Landes. Die Stadt liegt an der Spree und ist seit der Wiedervereinigung "
    "Sitz des Bundestages und der Bundesregierung.",
    "Der Rhein entspringt in den Alpen der Schweiz und mündet nach mehr als tausend Kilometern in die Nordsee. "
    "Er ist eine der wichtigsten Wasserstraßen Europas, und an seinen Ufern liegen viele alte Städte.",
    "Johann Sebastian Bach war ein deutscher Komponist des Barock. Seine Werke für Orgel, Chor und Orchester "
    "werden bis heute auf der ganzen Welt gespielt und gelten als Höhepunkt der Musikgeschichte.",
]
FRENCH = [
    "Paris est la capitale de la France et la ville la plus peuplée du pays. Elle est traversée par la Seine "
    "et compte de nombreux musées, dont le Louvre, qui est le plus visité au monde.",
    "La Loire est le plus long fleuve de France. Elle prend sa source dans le Massif central et se jette dans "
    "l'océan Atlantique après avoir traversé de nombreuses villes et des châteaux célèbres.",
    "Victor Hugo est un écrivain français du dix-neuvième siècle. Ses romans, comme Les Misérables et "
    "Notre-Dame de Paris, sont lus dans le monde entier et ont été adaptés au théâtre et au cinéma.",
]


@pytest.fixture(scope="module")
def english() -> list[str]:
    return [" ".join(lines) for lines in read_corpus_documents(WIKI_SUMMARIES, 300)
            if len(" ".join(lines).split()) >= 40][:40]


def test_documents_in_three_languages_are_identified_and_only_those_asked_for_kept(english):
    keep = LanguageFilter(("de", "en"))
    assert [keep(text)[0] for text in english[:3] + GERMAN] == [None] * 6
    assert [keep(text)[0] for text in FRENCH] == ["language:fr"] * 3


def test_a_document_below_the_threshold_is_removed_even_in_a_language_asked_for(english):
    assert LanguageFilter(("en",), threshold=1.0)(english[0])[0] == "language:en"
    assert LanguageFilter(("en",))("Home About Contact")[0] is not None  # too little text to be sure


def test_the_language_stage_runs_before_the_filters_and_is_counted(english):
    tally = Counter()
    assert clean_document([FRENCH[0]], ("gopher",), tally, LanguageFilter(("en",))) == (
        ("language", "language:fr"), [])
    assert clean_document([english[0]], ("gopher",), tally, LanguageFilter(("en",))) == (None, [english[0]])
    assert tally["in_documents_language"] == 2 and tally["removed_documents_language"] == 1
    assert tally["in_documents_gopher"] == tally["kept_documents_language"] == 1
    assert tally["removed_bytes_language"] == len(FRENCH[0].encode("utf-8"))


def test_the_codes_given_are_sorted_and_deduplicated():
    assert parse_languages("en, de,en") == ("de", "en")


def mixed_corpus(directory: Path, english: list[str]) -> str:
    path = directory / "mixed.jsonl"
    rows = [{"id": f"en-{i}", "text": text} for i, text in enumerate(english)]
    rows += [{"id": f"de-{i}", "text": text} for i, text in enumerate(GERMAN)]
    rows += [{"id": f"fr-{i}", "text": text} for i, text in enumerate(FRENCH)]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def language_run(tmp_path: Path, corpus: str, spm_model: str, **changes):
    config = PreprocessConfig(inputs=(corpus,), output=str(tmp_path / "out"), vocab=spm_model,
                              **{**TINY_DATA, "num_streams": 4, "num_shards": 2, "valid_shards": 1, **changes})
    return preprocess(config, workers=1, runner_options=["--direct_running_mode=in_memory"])


def test_a_run_removes_the_other_languages_counts_them_and_lists_them(tmp_path, english, spm_model):
    corpus = mixed_corpus(tmp_path, english)
    _, counters = language_run(tmp_path, corpus, spm_model, languages=("en",), filters=("gopher",),
                               removed=str(tmp_path / "removed"))
    written = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert written["config"]["languages"] == ["en"] and written["config"]["language_threshold"] == 0.65
    assert written["counters"]["in_documents_language"] == len(english) + 6
    assert written["counters"]["removed_documents_language"] == 6
    assert written["counters"]["in_documents_gopher"] == written["counters"]["kept_documents_language"]
    lines = [json.loads(line) for path in sorted((tmp_path / "removed").glob("*.jsonl"))
             for line in path.read_text(encoding="utf-8").splitlines()]
    languages = {line["id"]: line["reason"] for line in lines if line["stage"] == "language"}
    assert languages == {**{f"de-{i}": "language:de" for i in range(3)}, **{f"fr-{i}": "language:fr" for i in range(3)}}


def test_without_languages_the_manifest_names_neither_field(tmp_path, english, spm_model):
    language_run(tmp_path, mixed_corpus(tmp_path, english), spm_model)
    config = json.loads((tmp_path / "out" / "manifest.json").read_text())["config"]
    assert "languages" not in config and "language_threshold" not in config


def test_a_run_whose_every_document_is_in_another_language_names_the_flag(tmp_path, english, spm_model):
    with pytest.raises(NoTrainingRecordsError, match=r"^--languages removed every document \(language 46 of 46 "
                                                     r"read.*drop --languages ja\."):
        language_run(tmp_path, mixed_corpus(tmp_path, english), spm_model, languages=("ja",))
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("flags, message", [
    (["--languages", "en,xx"], "--languages: unknown language code 'xx'; the codes known are "),
    (["--languages", " , "], "--languages ' , ': no language code named, e.g. --languages en,de"),
    (["--languages", "en", "--language-threshold", "1.5"], "--language-threshold must be in [0, 1], got 1.5"),
])
def test_an_unknown_language_code_or_threshold_is_refused_in_one_line_before_any_work(tmp_path, english, spm_model,
                                                                                     capsys, flags, message):
    code = xlnet_cli.main(["preprocess", "--input", mixed_corpus(tmp_path, english), "--output", str(tmp_path / "x"),
                           "--vocab", spm_model, *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"xlnet preprocess: error: {message}") and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()
