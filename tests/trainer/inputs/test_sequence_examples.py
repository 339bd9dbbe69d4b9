"""Fine-tuning inputs (trainer/inputs/sequence_examples.py) on the bundled Rotten Tomatoes splits and corpus."""
from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainer.inputs.batching import pad_rows
from trainer.inputs.sequence_examples import (
    ChoiceExample,
    FinetuneDataError,
    TextExample,
    choice_dataset,
    choice_pairs,
    choice_targets,
    count_truncated,
    label_ids,
    label_list,
    read_choice_examples,
    read_text_examples,
    regression_targets,
    text_dataset,
)
from trainer.serving.text_encoder import XLNetTextEncoder

from support.bundled_data import ROTTEN, WIKI_SUMMARIES as WIKI

MAX_LENGTH = 32


def dev_rows(count: int) -> list[tuple[str, str]]:
    """The first (text, label) rows of the bundled dev split, read without the module under test."""
    lines = (ROTTEN / "dev.tsv").read_text(encoding="utf-8").splitlines()[1:count + 1]
    return [tuple(line.split("\t")) for line in lines]


def wiki_sentences(count: int) -> list[str]:
    with gzip.open(WIKI, "rt", encoding="utf-8") as handle:
        return [line.strip() for line, _ in zip(filter(str.strip, handle), range(count))]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def write_tsv(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def encoder(vocab) -> XLNetTextEncoder:
    return XLNetTextEncoder(vocab.model_proto, vocab.special_ids.to_dict(), max_length=MAX_LENGTH, uncased=False)


@pytest.fixture(scope="module")
def train() -> list[TextExample]:
    return read_text_examples(str(ROTTEN / "train.tsv"))


def raises_at(where: str, message: str) -> pytest.RaisesExc:
    """pytest.raises for a FinetuneDataError whose message starts with ``where`` (file or file:line)."""
    return pytest.raises(FinetuneDataError, match="^" + re.escape(where) + message)


def as_lists(encoded: dict[str, tf.Tensor]) -> dict[str, list]:
    return {name: value.numpy().tolist() for name, value in encoded.items()}


# ----------------------------------------------------------------------------------------------
# Formats
# ----------------------------------------------------------------------------------------------


def test_the_bundled_tsv_splits_read_with_their_sizes_and_first_row(train):
    dev = read_text_examples(str(ROTTEN / "dev.tsv"))
    assert (len(train), len(dev)) == (8000, 1000)
    assert train[0] == TextExample("If you're an extreme sports fan, this is probably a must own DVD.", None,
                                   "fresh", str(ROTTEN / "train.tsv"), 2)
    assert [(e.text, e.label) for e in dev[:3]] == dev_rows(3)


def test_csv_quoted_fields_keep_commas_quotes_and_newlines_and_report_the_first_line(tmp_path):
    (text_1, label_1), (text_2, label_2) = dev_rows(2)
    multi_line = f'{text_1}\n"{text_2}", {label_2}'
    path = tmp_path / "reviews.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows([["label", "text"], [label_1, multi_line], [label_2, text_2]])
    examples = read_text_examples(str(path))
    assert [(e.text, e.label, e.line) for e in examples] == [(multi_line, label_1, 2), (text_2, label_2, 4)]


def test_jsonl_pairs_with_integer_labels_become_label_strings(tmp_path):
    first, second = wiki_sentences(2)
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"text": first, "text_b": second, "label": 1},
                                                 {"text": second, "text_b": first, "label": 0}])
    assert read_text_examples(path) == [TextExample(first, second, "1", path, 1),
                                        TextExample(second, first, "0", path, 2)]


def test_jsonl_lines_end_only_at_newlines(tmp_path):
    """U+2028 (a line separator pasted from a web page) stays inside the text: json.dumps keeps it raw."""
    (text_1, label), (text_2, _) = dev_rows(2)
    path = tmp_path / "reviews.jsonl"
    path.write_text(json.dumps({"text": f"{text_1}\u2028{text_2}", "label": label}, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    assert [(e.text, e.line) for e in read_text_examples(str(path))] == [(f"{text_1}\u2028{text_2}", 1)]


def test_field_names_and_format_can_be_overridden(tmp_path):
    (text, label), = dev_rows(1)
    path = write_tsv(tmp_path / "reviews.txt", ["sentiment\treview", f"{label}\t{text}"])
    examples = read_text_examples(path, file_format="tsv", text_field="review", label_field="sentiment")
    assert [(e.text, e.label) for e in examples] == [(text, label)]


def test_regression_labels_are_floats(tmp_path):
    texts = [text for text, _ in dev_rows(2)]
    path = write_jsonl(tmp_path / "scores.jsonl", [{"text": texts[0], "label": 4}, {"text": texts[1], "label": "0.25"}])
    examples = read_text_examples(path, regression=True)
    assert [e.label for e in examples] == [4.0, 0.25]
    assert regression_targets(examples).tolist() == [4.0, 0.25]


def test_a_test_file_may_lack_labels(tmp_path):
    texts = [text for text, _ in dev_rows(2)]
    path = write_tsv(tmp_path / "test.tsv", ["text", *texts])
    assert [(e.text, e.label) for e in read_text_examples(path, require_label=False)] == [(t, None) for t in texts]


def test_a_glob_reads_every_match_in_sorted_order(tmp_path):
    (text_1, label_1), (text_2, label_2) = dev_rows(2)
    write_tsv(tmp_path / "part-1.tsv", ["text\tlabel", f"{text_2}\t{label_2}"])
    write_tsv(tmp_path / "part-0.tsv", ["text\tlabel", f"{text_1}\t{label_1}"])
    examples = read_text_examples(str(tmp_path / "part-*.tsv"))
    assert [(e.text, Path(e.path).name) for e in examples] == [(text_1, "part-0.tsv"), (text_2, "part-1.tsv")]


def test_multiple_choice_fills_a_cloze_blank_or_appends_the_option(tmp_path):
    context_1, context_2 = wiki_sentences(2)
    path = write_jsonl(tmp_path / "choice.jsonl", [
        {"context": context_1, "question": "Western art music written between 1901 and _", "options": ["2000", "1800"],
         "label": 0},
        {"context": context_2, "question": "Which century lacked a dominant style?", "options": ["20th", "19th"],
         "label": 0},
        {"context": context_2, "options": ["It had one style.", "It had no dominant style."], "label": 1},
    ])
    examples = read_choice_examples(path)
    assert examples[2] == ChoiceExample(context_2, "", ("It had one style.", "It had no dominant style."), 1, path, 3)
    assert choice_pairs(examples) == ([context_1] * 2 + [context_2] * 4, [
        "Western art music written between 1901 and 2000", "Western art music written between 1901 and 1800",
        "Which century lacked a dominant style? 20th", "Which century lacked a dominant style? 19th",
        "It had one style.", "It had no dominant style."])
    assert choice_targets(examples).tolist() == [0, 0, 1]


# ----------------------------------------------------------------------------------------------
# Labels
# ----------------------------------------------------------------------------------------------


def test_the_label_list_is_the_sorted_labels_of_the_training_file(train):
    assert label_list(train) == ["fresh", "rotten"]
    assert label_ids(train[:4], label_list(train)).tolist() == [0, 1, 1, 1]


def test_a_training_file_with_one_label_is_refused_naming_train_and_the_file(tmp_path):
    path = write_tsv(tmp_path / "train.tsv", ["text\tlabel", *[f"{text}\tfresh" for text, _ in dev_rows(3)]])
    with pytest.raises(FinetuneDataError) as raised:
        label_list(read_text_examples(path))
    assert str(raised.value) == f"--train {path}: classification needs at least 2 labels, found only 'fresh'"
    assert raised.value.exit_code == 2


def test_xlnet_finetune_on_a_training_file_with_one_label_exits_2_with_one_line(tmp_path, capsys):
    import xlnet_cli
    from support.bundled_data import REPO

    rows = [f"{text}\tfresh" for text, _ in dev_rows(4)]
    train = write_tsv(tmp_path / "train.tsv", ["text\tlabel", *rows])
    dev = write_tsv(tmp_path / "dev.tsv", ["text\tlabel", *rows[:2]])
    args = ["finetune", "--task", "classification", "--train", str(train), "--eval", str(dev), "--init-checkpoint",
            str(REPO / "tests" / "fixtures" / "legacy" / "pretrained"), "--model-dir", str(tmp_path / "model")]
    assert xlnet_cli.main(args) == 2
    assert capsys.readouterr().err == (f"xlnet finetune: error: --train {train}: classification needs at least 2 "
                                       "labels, found only 'fresh'\n")
    assert not (tmp_path / "model").exists()  # nothing written: the directory the run lock made is removed


def test_integer_labels_sort_numerically(tmp_path):
    texts = [text for text, _ in dev_rows(3)]
    path = write_jsonl(tmp_path / "stars.jsonl", [{"text": t, "label": s} for t, s in zip(texts, [10, 2, "1"])])
    assert label_list(read_text_examples(path)) == ["1", "2", "10"]


# ----------------------------------------------------------------------------------------------
# Bad input: every message names the file and line
# ----------------------------------------------------------------------------------------------


def test_an_eval_label_outside_the_training_labels_names_file_and_line(tmp_path, train):
    (text, _), = dev_rows(1)
    path = write_tsv(tmp_path / "dev.tsv", ["text\tlabel", f"{text}\tfresh", f"{text}\tsplat"])
    with raises_at(f"{path}:3", r": label 'splat' is not one of the training labels"):
        label_ids(read_text_examples(path), label_list(train))


def test_a_missing_json_field_names_file_and_line(tmp_path):
    first, second = dev_rows(2)
    path = write_jsonl(tmp_path / "dev.jsonl", [{"text": first[0], "label": first[1]}, {"label": second[1]}])
    with raises_at(f"{path}:2", r": missing field 'text' \(fields: label\)"):
        read_text_examples(path)


def test_a_missing_column_names_file_and_row(tmp_path):
    (text, label), = dev_rows(1)
    path = write_tsv(tmp_path / "dev.tsv", ["review\tlabel", f"{text}\t{label}"])
    with raises_at(f"{path}:2", r": missing field 'text' \(fields: review, label\)"):
        read_text_examples(path)


def test_a_tab_inside_a_tsv_text_is_a_field_count_error(tmp_path):
    (text, label), = dev_rows(1)
    path = write_tsv(tmp_path / "dev.tsv", ["text\tlabel", f"{text}\tsee\t{label}"])
    with raises_at(f"{path}:2", r": 3 fields, the header has 2$"):
        read_text_examples(path)


def test_a_non_numeric_regression_label_names_file_and_line(tmp_path):
    (text, label), = dev_rows(1)
    path = write_tsv(tmp_path / "scores.tsv", ["text\tlabel", f"{text}\t0.5", f"{text}\t{label}"])
    with raises_at(f"{path}:3", rf": regression label '{label}' is not a finite number"):
        read_text_examples(path, regression=True)


def test_text_b_in_some_rows_only_names_file_and_line(tmp_path):
    first, second = wiki_sentences(2)
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"text": first, "text_b": second, "label": "a"},
                                                 {"text": second, "label": "b"}])
    with raises_at(f"{path}:2", r": field 'text_b' must be in every row or in none"):
        read_text_examples(path)


@pytest.mark.parametrize("options, message", [
    (None, "missing field 'options'"),
    (["Only one option."], r"'options' must be a list of at least 2 strings"),
])
def test_a_choice_row_without_two_options_names_file_and_line(tmp_path, options, message):
    context, = wiki_sentences(1)
    row = {"context": context, "label": 0} | ({} if options is None else {"options": options})
    path = write_jsonl(tmp_path / "choice.jsonl", [{"context": context, "options": ["yes", "no"], "label": 0}, row])
    with raises_at(f"{path}:2", rf": {message}"):
        read_choice_examples(path)


def test_a_choice_label_out_of_range_names_file_and_line(tmp_path):
    context, = wiki_sentences(1)
    path = write_jsonl(tmp_path / "choice.jsonl", [{"context": context, "options": ["yes", "no"], "label": 2}])
    with raises_at(f"{path}:1", r": label 2 is not an index of the 2 options"):
        read_choice_examples(path)


def test_an_empty_file_is_named(tmp_path):
    path = write_tsv(tmp_path / "train.tsv", ["text\tlabel"])
    with raises_at(path, r": no examples in the file$"):
        read_text_examples(path)


def test_a_glob_without_match_is_named(tmp_path):
    pattern = str(tmp_path / "train-*.tsv")
    with raises_at(pattern, r": no file matches$"):
        read_text_examples(pattern)


def test_an_unknown_extension_asks_for_the_format(tmp_path):
    path = write_tsv(tmp_path / "train.txt", ["text\tlabel"])
    with raises_at(path, r": cannot tell the format from the extension"):
        read_text_examples(path)


def test_choice_examples_with_different_option_counts_cannot_be_batched(tmp_path, encoder):
    context, = wiki_sentences(1)
    path = write_jsonl(tmp_path / "choice.jsonl", [{"context": context, "options": ["yes", "no"], "label": 0},
                                                  {"context": context, "options": ["yes", "no", "maybe"], "label": 2}])
    with raises_at(f"{path}:2", rf": 3 options, but {re.escape(path)}:1 has 2"):
        choice_dataset(read_choice_examples(path), encoder, batch_size=2)


# ----------------------------------------------------------------------------------------------
# Encoding
# ----------------------------------------------------------------------------------------------


def test_a_text_batch_is_the_encoder_output_of_the_same_strings_with_cls_last(train, encoder, vocab):
    examples = train[:5]
    dataset = text_dataset(examples, encoder, batch_size=3, targets=label_ids(examples, ["fresh", "rotten"]))
    batches = list(dataset)
    assert [len(labels) for _, labels in batches] == [3, 2]
    features, labels = batches[0]
    assert as_lists(features) == as_lists(encoder.encode(tf.constant([e.text for e in examples[:3]])))
    assert features["input_ids"].shape == (3, MAX_LENGTH)
    assert features["input_ids"][:, -1].numpy().tolist() == [vocab.special_ids.to_dict()["cls"]] * 3
    assert labels.numpy().tolist() == [0, 1, 1]


def test_a_pair_batch_is_the_encoder_output_of_both_segments(tmp_path, encoder):
    sentences = wiki_sentences(4)
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"text": a, "text_b": b, "label": 1.5}
                                                 for a, b in zip(sentences[:2], sentences[2:])])
    examples = read_text_examples(path, regression=True)
    features, targets = next(iter(text_dataset(examples, encoder, batch_size=2, targets=regression_targets(examples))))
    assert as_lists(features) == as_lists(encoder.encode(tf.constant(sentences[:2]), tf.constant(sentences[2:])))
    assert targets.dtype == tf.float32 and targets.numpy().tolist() == [1.5, 1.5]


def test_a_choice_batch_is_batch_by_options_by_max_length(tmp_path, encoder):
    contexts = wiki_sentences(3)
    options = ["a film", "a composer", "a century"]
    path = write_jsonl(tmp_path / "choice.jsonl", [{"context": c, "question": "It is about", "options": options,
                                                    "label": i} for i, c in enumerate(contexts)])
    examples = read_choice_examples(path)
    features, labels = next(iter(choice_dataset(examples, encoder, batch_size=2, targets=choice_targets(examples))))
    assert {name: value.shape for name, value in features.items()} == {
        name: (2, 3, MAX_LENGTH) for name in ("input_ids", "segment_ids", "input_mask")}
    flat = encoder.encode(tf.constant([c for c in contexts[:2] for _ in options]),
                          tf.constant([f"It is about {option}" for _ in contexts[:2] for option in options]))
    assert as_lists(features) == {name: np.reshape(value, [2, 3, MAX_LENGTH]).tolist()
                                  for name, value in as_lists(flat).items()}
    assert labels.numpy().tolist() == [0, 1]


def test_a_padded_last_batch_is_full_and_repeats_the_last_example(train, encoder):
    examples = train[:7]
    targets = np.arange(7, dtype=np.int32)
    batches = list(text_dataset(examples, encoder, batch_size=3, targets=targets, pad_last_batch=True))
    assert [labels.numpy().tolist() for _, labels in batches] == [[0, 1, 2], [3, 4, 5], [6, 6, 6]]
    last_ids = batches[-1][0]["input_ids"].numpy()
    assert (last_ids == last_ids[0]).all()
    unpadded = list(text_dataset(examples, encoder, batch_size=3, targets=targets))
    assert [labels.numpy().tolist() for _, labels in unpadded][-1] == [6]


def test_pad_rows_leaves_a_whole_number_of_batches_alone():
    columns = {"a": np.arange(6), "b": np.arange(12).reshape(6, 2)}
    assert pad_rows(columns, 3) is columns
    padded = pad_rows(columns, 4)
    assert padded["a"].tolist() == [0, 1, 2, 3, 4, 5, 5, 5]
    assert padded["b"][-3:].tolist() == [[10, 11]] * 3


def test_count_truncated_counts_examples_longer_than_max_length(train, encoder):
    examples = train[:200]
    pieces = [len(ids) for ids in encoder.tokenize(tf.constant([e.text for e in examples])).to_list()]
    expected = sum(count + 2 > MAX_LENGTH for count in pieces)
    assert 0 < expected < len(examples)
    assert count_truncated(examples, encoder) == expected
