"""`xlnet generate` (trainer/commands/generate.py): the streamed continuation is what
trainer/models/generation.generate produces for the prompt, and bad input is named."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import sentencepiece as spm
from support.bundled_data import REPO

import xlnet_cli
from trainer.inputs.corpus_documents import tokenize_document
from trainer.models.generation import MAX_NEW_TOKENS_CAP, excluded_symbol_ids, generate, stop_symbol_ids
from trainer.models.inference_network import inference_network
from trainer.runtime.restore import open_model_directory, resolve_uncased, restore_model

PRETRAINED = str(REPO / "tests" / "fixtures" / "legacy" / "pretrained")
PROMPTS = ["In the beginning God created", "And the earth was"]


def run_generate(capsys, *flags: str) -> tuple[int, str, str]:
    status = xlnet_cli.run_subcommand("generate", ["--model-dir", PRETRAINED, *flags])
    out, err = capsys.readouterr()
    return status, out, err


def expected_continuation(prompt: str, **settings) -> str:
    """The prompt generated alone by the model's API (cache: the model's mem_len), detokenised
    without the stop token."""
    directory = open_model_directory(PRETRAINED)
    network = inference_network(restore_model(directory).network, directory.model_config.mem_len)
    processor = spm.SentencePieceProcessor(model_proto=directory.sp_model_proto)
    ids = tokenize_document(processor, [prompt], resolve_uncased(directory)[0])
    stops, excluded = stop_symbol_ids(directory.special_ids), excluded_symbol_ids(directory.special_ids)
    out = generate(network, ids[None], [len(ids)], stop_ids=stops, excluded_ids=excluded, **settings)
    return processor.decode([int(i) for i in out["generated_ids"].numpy()[0] if i >= 0 and i not in stops])


@pytest.mark.slow  # 2 prompts streamed, then generated again in-process (about 10 s)
def test_each_prompt_of_a_file_is_continued_as_generate_continues_it_alone(capsys, tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text(f"{PROMPTS[0]}\n\n{PROMPTS[1]}\n")  # the blank line is skipped
    status, out, err = run_generate(capsys, "--prompts", str(path), "--max-new-tokens", "12", "--temperature", "1",
                                    "--top-k", "40", "--seed", "5")
    assert status == 0
    settings = {"max_new_tokens": 12, "temperature": 1.0, "top_k": 40, "seed": 5}
    assert out.splitlines() == [expected_continuation(prompt, **settings) for prompt in PROMPTS]
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [line["new_tokens"] <= 12 for line in lines] == [True, True]
    assert all(line["mem_len"] == 16 for line in lines)  # the model's mem_len


@pytest.mark.slow  # a model restore and a greedy continuation (about 5 s)
def test_a_greedy_prompt_is_continued_as_generate_continues_it(capsys):
    status, out, _ = run_generate(capsys, "--prompt", PROMPTS[0], "--max-new-tokens", "6")
    assert status == 0
    assert out == expected_continuation(PROMPTS[0], max_new_tokens=6) + "\n"


@pytest.mark.parametrize("flags, named", [
    (["--max-new-tokens", "0"], "max_new_tokens must be in 1..4096, got 0 (set by --max-new-tokens)"),
    (["--max-new-tokens", "-2"], "(set by --max-new-tokens)"),
    (["--max-new-tokens", str(MAX_NEW_TOKENS_CAP + 1)], "(set by --max-new-tokens)"),
    (["--temperature", "-1"], "temperature must be >= 0 (0: greedy), got -1.0 (set by --temperature)"),
    (["--top-k", "-1"], "(set by --top-k)"),
    (["--top-p", "0"], "top_p must be in (0, 1], got 0.0 (set by --top-p)"),
    (["--top-p", "1.5"], "(set by --top-p)"),
    (["--mem-len", "0"], "(set by --mem-len)"),
])
def test_bad_settings_are_refused_naming_the_flag(capsys, flags, named):
    status, out, err = run_generate(capsys, "--prompt", "Light", *flags)
    assert (status, out) == (2, "")
    assert named in err


def test_a_cache_larger_than_the_machine_is_refused_before_the_model_is_restored(capsys):
    status, out, err = run_generate(capsys, "--prompt", "Light", "--mem-len", "100000000")
    assert (status, out) == (2, "")
    assert "--mem-len 100000000: a generation cache of 100000000 positions needs about" in err
    assert "more than 95% of" in err and "the largest that fits is --mem-len" in err


def peak_resident_kib(tmp_path, prompt_line: str) -> tuple[int, dict]:
    """A fresh `xlnet generate` on one prompt line (--mem-len 256): its own peak resident memory
    (KiB) and its summary line."""
    path = tmp_path / "prompt.txt"
    path.write_text(prompt_line + "\n")
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        process = subprocess.Popen([sys.executable, str(REPO / "xlnet_cli.py"), "generate", "--model-dir", PRETRAINED,
                                    "--prompts", str(path), "--mem-len", "256", "--max-new-tokens", "4"],
                                   stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # this child's own peak resident memory
    errors = (tmp_path / "err.txt").read_text()
    assert os.waitstatus_to_exitcode(status) == 0, errors[-2000:]
    return usage.ru_maxrss, json.loads([line for line in errors.splitlines() if line.startswith("{")][0])


@pytest.mark.slow  # two fresh `xlnet` processes, one reading a 200,000-character prompt (about 40 s)
def test_a_prompt_line_of_200000_characters_is_read_in_segments_with_bounded_memory(tmp_path):
    # One pass over its pieces would hold [1, n_head, T, T] attention scores: about 2 x 4 x T^2 bytes,
    # 32 GB at T = 63,000. Read in segments of --mem-len 256 pieces, it needs no more than a short
    # prompt does, give or take 512 MiB (measured: 23 MiB more, 664 MiB in all on a 2-core machine; the
    # TensorFlow runtime's own share differs from machine to machine, so the short prompt is the baseline).
    line = (" ".join(PROMPTS) + " ") * (200_000 // (len(" ".join(PROMPTS)) + 1) + 1)
    short_kib, _ = peak_resident_kib(tmp_path, PROMPTS[0])
    long_kib, summary = peak_resident_kib(tmp_path, line[:200_000])
    assert summary["prompt_tokens"] > 40_000 and summary["mem_len"] == 256 and summary["new_tokens"] >= 1
    assert long_kib - short_kib < 512 * 1024


def test_an_empty_prompt_is_refused(capsys):
    status, _, err = run_generate(capsys, "--prompt", "  ")
    assert status == 2
    assert "--prompt holds no token to continue" in err


def test_an_empty_prompts_file_is_refused_naming_it(capsys, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n")
    status, _, err = run_generate(capsys, "--prompts", str(path))
    assert status == 2
    assert f"--prompts {path}: no prompt" in err


def test_invalid_utf8_in_a_prompts_file_is_refused_naming_the_line(capsys, tmp_path):
    path = tmp_path / "broken.txt"
    path.write_bytes(b"fine\ncaf\xc3\x28\n")
    status, _, err = run_generate(capsys, "--prompts", str(path))
    assert status == 2
    assert f"--prompts {path}: line 2 is not valid UTF-8" in err


def test_prompt_and_prompts_together_are_a_usage_error(capsys, tmp_path):
    status = xlnet_cli.run_subcommand("generate", ["--model-dir", PRETRAINED, "--prompt", "a", "--prompts", "f"])
    err = capsys.readouterr().err
    assert status == 2
    assert "not allowed with argument" in err and len(err.strip().splitlines()) == 1


def test_the_cache_defaults_to_the_whole_continuation_for_a_model_without_memory():
    from trainer.configs.generation import GenerateConfig

    config = GenerateConfig(max_new_tokens=10)
    assert (config.resolved_mem_len(16, 5), config.resolved_mem_len(0, 5)) == (16, 15)
    assert GenerateConfig(mem_len=7).resolved_mem_len(0, 5) == 7


@pytest.mark.slow  # a fresh `xlnet` process (about 15 s)
def test_tokens_are_printed_while_the_continuation_is_still_being_generated():
    # Greedy on this fixture never picks a stop token: 1000 tokens (about 5 kB, less than a pipe's 8 kB stdout
    # buffer, so only flushing gets them out before the end) take seconds after the first is printed.
    process = subprocess.Popen([sys.executable, str(REPO / "xlnet_cli.py"), "generate", "--model-dir", PRETRAINED,
                                "--prompt", PROMPTS[0], "--max-new-tokens", "1000"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"})
    try:
        first = process.stdout.read(1)
        first_at = time.monotonic()
        rest = process.stdout.read()
        assert process.wait(timeout=300) == 0
        assert first and len(first + rest) < 8192
        assert time.monotonic() - first_at > 1.0  # generation went on after the first token was out
    finally:
        process.kill()
        process.wait()
