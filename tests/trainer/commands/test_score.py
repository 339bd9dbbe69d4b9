"""`xlnet score` (trainer/commands/score.py): JSON lines per document and a summary, the values
those of trainer/models/scoring.py, and bad input named."""
from __future__ import annotations

import gzip
import json
import math
import signal
import subprocess

import numpy as np
import pytest
import sentencepiece as spm
from support import processes
from support.bundled_data import REPO

import xlnet_cli
from trainer.inputs.corpus_documents import tokenize_document
from trainer.models.inference_network import inference_network
from trainer.models.scoring import score_in_one_pass
from trainer.runtime.restore import open_model_directory, resolve_uncased, restore_model

PRETRAINED = str(REPO / "tests" / "fixtures" / "legacy" / "pretrained")
FINE_TUNED = str(REPO / "tests" / "fixtures" / "legacy" / "classifier")
DOCUMENTS = [["In the beginning God created the heaven and the earth.", "And the earth was without form."],
             ["A second, shorter document."]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("score") / "corpus.txt.gz"
    first, second = ("\n".join(lines).encode() for lines in DOCUMENTS)
    # An invalid UTF-8 line inside the first document is skipped and counted, as preprocessing does.
    first = first.replace(b"\n", b"\n\xc3\x28 broken\n", 1)
    path.write_bytes(gzip.compress(first + b"\n\n" + second + b"\n"))
    return str(path)


def score(capsys, *flags: str) -> tuple[int, list[dict], str]:
    status = xlnet_cli.run_subcommand("score", list(flags))
    out, err = capsys.readouterr()
    return status, [json.loads(line) for line in out.splitlines() if line.strip()], err


def expected_log_likelihoods(model_dir: str, mem_len: int) -> list[float]:
    """Each document as [<eod>] + its pieces + [<eod>], scored in one pass (the model's own API)."""
    directory = open_model_directory(model_dir)
    network = inference_network(restore_model(directory).network, mem_len)
    uncased, _ = resolve_uncased(directory)
    processor = spm.SentencePieceProcessor(model_proto=directory.sp_model_proto)
    eod = directory.special_ids["eod"]
    values = []
    for lines in DOCUMENTS:
        ids = np.concatenate([[eod], tokenize_document(processor, lines, uncased), [eod]])
        out = score_in_one_pass(network, ids[None].astype(np.int32), [len(ids)], [1])
        values.append((float(out["log_likelihood"][0]), int(out["num_tokens"][0])))
    return values


@pytest.mark.slow
def test_each_document_gets_its_log_likelihood_and_the_summary_adds_them(capsys, corpus):
    status, lines, _ = score(capsys, "--model-dir", PRETRAINED, "--input", corpus, "--segment-len", "8",
                             "--mem-len", "64")
    assert status == 0
    documents, summary = lines[:-1], lines[-1]
    expected = expected_log_likelihoods(PRETRAINED, 64)
    assert [(line["file"], line["document"]) for line in documents] == [(corpus, 0), (corpus, 1)]
    for line, (log_likelihood, tokens) in zip(documents, expected):
        assert line["tokens"] == tokens
        assert line["log_likelihood"] == pytest.approx(log_likelihood, abs=1e-3)
        assert line["mean_nll"] == pytest.approx(-log_likelihood / tokens, abs=1e-5)
        assert line["perplexity"] == pytest.approx(math.exp(-log_likelihood / tokens), rel=1e-4)
    assert summary["summary"] is True and summary["documents"] == 2 and summary["files"] == 1
    assert summary["tokens"] == sum(tokens for _, tokens in expected)
    assert summary["mean_nll"] == pytest.approx(-sum(ll for ll, _ in expected) / summary["tokens"], abs=1e-5)
    assert (summary["segment_len"], summary["mem_len"], summary["eod"]) == (8, 64, True)
    assert summary["invalid_lines"] == 1


@pytest.mark.slow
def test_per_file_lines_and_a_fine_tuned_model_scores_with_a_note(capsys, corpus):
    status, lines, err = score(capsys, "--model-dir", FINE_TUNED, "--input", corpus, "--per", "file",
                               "--context-length", "2")
    assert status == 0
    assert "is fine-tuned (classification)" in err and "LM head" in err
    file_line, summary = lines
    assert file_line["file"] == corpus and file_line["documents"] == 2
    assert file_line["tokens"] == summary["tokens"]
    assert summary["context_length"] == 2


def test_an_empty_file_is_refused_naming_it(capsys, tmp_path, corpus):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\n\n   \n")
    status, lines, err = score(capsys, "--model-dir", PRETRAINED, "--input", corpus, "--input", str(empty))
    assert status == 2 and lines == []
    assert err.strip() == f"xlnet score: error: --input {empty}: no text to score (an empty file, or only blank " \
                          "or invalid lines)"


def test_a_file_of_invalid_utf8_has_no_text_to_score(capsys, tmp_path):
    invalid = tmp_path / "binary.txt"
    invalid.write_bytes(b"\xff\xfe broken\n\xc3\x28\n")
    status, _, err = score(capsys, "--model-dir", PRETRAINED, "--input", str(invalid))
    assert status == 2 and "no text to score" in err and str(invalid) in err


def test_an_input_matching_nothing_is_refused(capsys, tmp_path):
    status, _, err = score(capsys, "--model-dir", PRETRAINED, "--input", str(tmp_path / "none*.txt"))
    assert status == 2 and "matches no files" in err and "--input" in err


def test_a_directory_input_says_to_give_its_files_as_preprocess_does(capsys, tmp_path):
    status, _, err = score(capsys, "--model-dir", PRETRAINED, "--input", str(tmp_path))
    assert status == 2
    assert f"--input '{tmp_path}' is a directory; give its files or a glob, e.g. --input '{tmp_path}/*.txt'" in err


@pytest.mark.slow  # a fresh `xlnet score` process over many documents, stopped by SIGTERM (about 20 s)
def test_sigterm_stops_scoring_with_the_summary_of_what_was_scored_and_status_143(tmp_path):
    corpus = tmp_path / "many.txt"
    corpus.write_text("\n\n".join(f"Document {n}: " + " ".join(DOCUMENTS[0]) for n in range(20_000)) + "\n")
    out = tmp_path / "out.jsonl"
    with open(out, "w") as handle:
        process = processes.start([str(REPO / "xlnet_cli.py"), "score", "--model-dir", PRETRAINED, "--input",
                                   str(corpus), "--batch-size", "1"], stdout=handle, stderr=subprocess.PIPE)
        with processes.stopped(process):
            processes.wait_for(lambda: out.read_text().count('"document"') >= 3, process, what="3 documents scored")
            errors = processes.signal_and_wait(process, signal.SIGTERM, timeout=60)
            assert process.returncode == 143
    assert errors.splitlines()[-1].startswith("xlnet score: interrupted by SIGTERM; the summary covers the ")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    documents, summary = lines[:-1], lines[-1]
    assert summary["summary"] is True and summary["stopped"] == "SIGTERM"
    assert summary["documents"] == len(documents) < 20_000
    assert summary["tokens"] == sum(line["tokens"] for line in documents)


@pytest.mark.parametrize("flags, named", [
    (["--segment-len", "0"], "segment_len must be positive, got 0 (set by --segment-len)"),
    (["--segment-len", "4", "--context-length", "4"], "(set by --context-length)"),
    (["--no-eod"], "context_length 0 without eod"),
    (["--mem-len", "-2"], "(set by --mem-len)"),
])
def test_bad_settings_are_refused_naming_the_flag(capsys, corpus, flags, named):
    status, _, err = score(capsys, "--model-dir", PRETRAINED, "--input", corpus, *flags)
    assert status == 2 and named in err and err.count("\n") == 1
