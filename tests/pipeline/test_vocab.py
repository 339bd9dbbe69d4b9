"""`xlnet vocab` and vocabulary loading (pipeline/vocab.py) on the bundled corpus."""
from __future__ import annotations

from pathlib import Path

import pytest

import xlnet_cli
from pipeline.vocab import VocabConfig, load_vocab, train_vocab
from tfrecords.vocabulary import SpecialIds, VocabError, is_word_start_piece


def small_config(corpus_sample: str, prefix: Path, **changes) -> VocabConfig:
    settings = dict(inputs=(corpus_sample,), output_prefix=str(prefix), vocab_size=1000,
                    input_sentence_size=2000, seed=0, num_threads=2)
    return VocabConfig(**{**settings, **changes})


def test_special_symbols_get_the_reference_ids(vocab):
    assert vocab.special_ids == SpecialIds(unk=0, bos=1, eos=2, cls=3, sep=4, pad=5, mask=6, eod=7, eop=8)
    assert vocab.vocab_size == 8000
    processor = vocab.processor()
    assert [processor.id_to_piece(i) for i in range(9)] == [
        "<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]


def test_eop_in_text_becomes_one_token(vocab):
    ids = vocab.processor().encode("The end of a paragraph. <eop>", out_type=int)
    assert ids[-1] == vocab.special_ids.eop


def test_same_corpus_settings_and_seed_give_a_byte_identical_model(corpus_sample, tmp_path):
    first = train_vocab(small_config(corpus_sample, tmp_path / "a" / "spiece"))
    second = train_vocab(small_config(corpus_sample, tmp_path / "b" / "other"))
    assert Path(first.path).read_bytes() == Path(second.path).read_bytes()
    assert first.sha256 == second.sha256
    assert (tmp_path / "a" / "spiece.vocab").read_text(encoding="utf-8").splitlines()[3] == "<cls>\t0"


def test_a_different_seed_samples_different_sentences(corpus_sample, tmp_path):
    first = train_vocab(small_config(corpus_sample, tmp_path / "a", input_sentence_size=500))
    second = train_vocab(small_config(corpus_sample, tmp_path / "b", input_sentence_size=500, seed=1))
    assert first.sha256 != second.sha256


def test_model_without_xlnet_symbols_is_refused_naming_them(corpus_sample, tmp_path):
    import sentencepiece as spm

    prefix = tmp_path / "plain"
    spm.SentencePieceTrainer.train(input=corpus_sample, model_prefix=str(prefix), vocab_size=500,
                                   input_sentence_size=2000, minloglevel=2)
    with pytest.raises(VocabError, match="<cls>, <sep>, <pad>, <mask>, <eod>, <eop>"):
        load_vocab(str(prefix) + ".model")


def test_a_file_that_is_not_a_model_is_refused(tmp_path):
    path = tmp_path / "junk.model"
    path.write_bytes(b"definitely not a protobuf")
    with pytest.raises(VocabError, match="not a SentencePiece model"):
        load_vocab(str(path))
    with pytest.raises(VocabError, match="cannot read"):
        load_vocab(str(tmp_path / "missing.model"))


def test_word_starts_are_boundary_mark_specials_and_punctuation():
    assert is_word_start_piece("\u2581the") and is_word_start_piece("<sep>")
    assert is_word_start_piece(",") and is_word_start_piece("(") and is_word_start_piece("\u2013")
    assert not is_word_start_piece("ing") and not is_word_start_piece("9")


def test_vocab_command_reports_a_glob_matching_nothing(tmp_path, capsys):
    code = xlnet_cli.main(["vocab", "--input", str(tmp_path / "none*.txt"), "--output", str(tmp_path / "sp")])
    assert code == 2 and "matches no files" in capsys.readouterr().err


def test_vocab_command_refuses_a_vocab_size_too_small_for_the_symbols(corpus_sample, tmp_path, capsys):
    code = xlnet_cli.main(["vocab", "--input", corpus_sample, "--output", str(tmp_path / "sp"), "--vocab-size", "10"])
    assert code == 2 and "--vocab-size" in capsys.readouterr().err


def test_vocab_command_trains_a_model(corpus_sample, tmp_path):
    code = xlnet_cli.main(["vocab", "--input", corpus_sample, "--output", str(tmp_path / "sp"),
                           "--vocab-size", "800", "--input-sentence-size", "1500"])
    assert code == 0
    assert load_vocab(str(tmp_path / "sp.model")).vocab_size == 800
