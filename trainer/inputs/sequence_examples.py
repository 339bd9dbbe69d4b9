"""Classification, regression and multiple-choice inputs: rows of labeled files -> examples ->
batches of XLNet inputs. The files are read by trainer/inputs/text_files.py; every problem is a
:class:`FinetuneDataError` naming the file and, where there is one, the line.

Formats
-------
* Classification / regression: CSV (RFC 4180 quoting, header row), TSV (header row, fields
  split on tabs, no quoting: the GLUE convention) or JSON lines (one object per line), chosen by
  extension (``.csv``, ``.tsv``, ``.jsonl``/``.json``) unless ``file_format`` says otherwise.
  Fields ``text``, optional ``text_b`` and ``label`` (names configurable). Classification labels
  are strings (JSON integers become their decimal string); regression labels are numbers.
  Either every row of a file set has ``text_b`` or none has: a pair and a single text are
  encoded with different layouts.
* Multiple choice: JSON lines with ``context``, optional ``question``, ``options`` (at least 2
  strings) and ``label`` (index of the right option).

Files without labels (``require_label=False``, e.g. a test set to predict) give label None.

Label list
----------
:func:`label_list` takes it from the TRAINING examples: the distinct labels sorted, numerically
if every label is an integer ("2" before "10"), else as strings. Sorting rather than order of
appearance makes the ids independent of row order, so reshuffling a file keeps them. The caller
saves the list (labels.json) beside the model and maps eval/test labels through it with
:func:`label_ids`, which rejects a label the training file never had.

Encoding
--------
Batches are encoded in the tf.data graph by :class:`trainer.serving.text_encoder.XLNetTextEncoder` (the
serving encoder, so training and serving lay text out identically). A multiple-choice example
becomes one ``context <sep> qa <sep> <cls>`` sequence per option, where ``qa`` is the question
with its ``_`` blank filled by the option, else question + " " + option (XLNet's run_race.py;
trainer/serving/text_encoder.py's question_with_option, which the served ``choose`` signature shares).
With ``max_segments`` N > 1 a text (for multiple choice: the context) is laid out over N segments
by ``XLNetTextEncoder.encode_segments``, the features gaining a segment axis before the length.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

from trainer.inputs.batching import batched_rows, traced_as_written
from trainer.inputs.text_files import FinetuneDataError, field, rows
from trainer.serving.text_encoder import XLNetTextEncoder, question_with_option

_INTEGER = re.compile(r"-?[0-9]+")
# Texts tokenised per call when counting lengths: bounds memory on large training files.
_TOKENIZE_CHUNK = 4096


@dataclass(frozen=True)
class TextExample:
    """One classification / regression row.

    ``label`` is a string (classification), a float (regression) or None (no label in the file).
    ``path`` and ``line`` (1-based, the row's first line) locate the row for error messages.
    """

    text: str
    text_b: str | None
    label: str | float | None
    path: str
    line: int


@dataclass(frozen=True)
class ChoiceExample:
    """One multiple-choice question: ``label`` is the index of the right option (None if absent)."""

    context: str
    question: str
    options: tuple[str, ...]
    label: int | None
    path: str
    line: int


def _class_label(value: str | int | float, where: str) -> str:
    """A classification label as a string: JSON integers become their decimal form."""
    if isinstance(value, float):
        raise FinetuneDataError(f"{where}: a classification label must be a string or an integer, got {value!r}")
    if value == "":
        raise FinetuneDataError(f"{where}: empty label")
    return str(value)


def _regression_label(value: str | int | float, where: str) -> float:
    """A finite float from a JSON number or a numeric string."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise FinetuneDataError(f"{where}: regression label {value!r} is not a finite number")
    return number


def read_text_examples(pattern: str, *, regression: bool = False, require_label: bool = True,
                       file_format: str | None = None, text_field: str = "text",
                       text_b_field: str = "text_b", label_field: str = "label") -> list[TextExample]:
    """Classification or regression examples from every file matching ``pattern``, in order.

    Args:
      pattern: a path or glob, local or gs://; matches are read in sorted order.
      regression: labels are numbers (float) rather than class names (str).
      require_label: a row without ``label_field`` is an error; False for unlabeled test files.
      file_format: "csv", "tsv" or "jsonl"; None chooses by extension.
      text_field, text_b_field, label_field: the field (column or key) names.
    Raises:
      FinetuneDataError naming the file (and line): no match, empty file, missing field, bad
      label, or ``text_b`` in some rows but not others.
    """
    examples = []
    for path, line, row in rows(pattern, file_format):
        where = f"{path}:{line}"
        text_b = field(row, text_b_field, where) if text_b_field in row else None
        if examples and (text_b is None) != (examples[0].text_b is None):
            raise FinetuneDataError(f"{where}: field {text_b_field!r} must be in every row or in none "
                                    f"(first row: {examples[0].path}:{examples[0].line})")
        label = None
        if require_label or label_field in row:
            raw = field(row, label_field, where, (str, int, float))
            label = _regression_label(raw, where) if regression else _class_label(raw, where)
        examples.append(TextExample(field(row, text_field, where), text_b, label, path, line))
    return examples


def read_choice_examples(pattern: str, *, require_label: bool = True) -> list[ChoiceExample]:
    """Multiple-choice examples from every JSON-lines file matching ``pattern``, in order.

    Each line: ``{"context": str, "question": str (optional), "options": [str, ...] (>= 2),
    "label": int (index into options)}``.

    Raises:
      FinetuneDataError naming the file (and line): no match, empty file, missing field, fewer
      than 2 options, or a label that is not an index of the options.
    """
    examples = []
    for path, line, row in rows(pattern, "jsonl"):
        where = f"{path}:{line}"
        options = field(row, "options", where, list)
        if len(options) < 2 or not all(isinstance(option, str) for option in options):
            raise FinetuneDataError(f"{where}: 'options' must be a list of at least 2 strings, got {options!r}")
        label = None
        if require_label or "label" in row:
            label = field(row, "label", where, int)
            if not 0 <= label < len(options):
                raise FinetuneDataError(f"{where}: label {label} is not an index of the {len(options)} options")
        question = field(row, "question", where) if "question" in row else ""
        examples.append(ChoiceExample(field(row, "context", where), question, tuple(options), label, path, line))
    return examples


def label_list(train_examples: Sequence[TextExample]) -> list[str]:
    """The classes of a training set: distinct labels, sorted numerically if all are integers.

    Raises:
      FinetuneDataError if an example has no label, or naming --train and its files when they hold
      fewer than 2 distinct labels (a classification head needs 2 classes).
    """
    labels = {_labeled(example).label for example in train_examples}
    if len(labels) < 2:
        files = ", ".join(sorted({example.path for example in train_examples})) or "(no example)"
        found = f"only {sorted(labels)[0]!r}" if labels else "none"
        raise FinetuneDataError(f"--train {files}: classification needs at least 2 labels, found {found}")
    if all(_INTEGER.fullmatch(label) for label in labels):
        return sorted(labels, key=lambda label: (int(label), label))
    return sorted(labels)


def label_ids(examples: Sequence[TextExample], labels: Sequence[str]) -> np.ndarray:
    """int32 [num_examples]: each example's index in ``labels`` (the training label list).

    Raises:
      FinetuneDataError naming file and line for a missing label or one not in ``labels``.
    """
    index = {label: i for i, label in enumerate(labels)}
    ids = []
    for example in examples:
        label = _labeled(example).label
        if label not in index:
            raise FinetuneDataError(f"{example.path}:{example.line}: label {label!r} is not one of the "
                                    f"training labels {list(labels)}")
        ids.append(index[label])
    return np.asarray(ids, np.int32)


def regression_targets(examples: Sequence[TextExample]) -> np.ndarray:
    """float32 [num_examples]: the regression labels (FinetuneDataError names an unlabeled row)."""
    return np.asarray([_labeled(example).label for example in examples], np.float32)


def choice_targets(examples: Sequence[ChoiceExample]) -> np.ndarray:
    """int32 [num_examples]: the index of each question's right option."""
    return np.asarray([_labeled(example).label for example in examples], np.int32)


def _labeled(example: TextExample | ChoiceExample) -> TextExample | ChoiceExample:
    if example.label is None:
        raise FinetuneDataError(f"{example.path}:{example.line}: no label")
    return example


def text_pairs(examples: Sequence[TextExample]) -> tuple[list[str], list[str] | None]:
    """The encoder's (texts_a, texts_b) for text examples; texts_b None for single texts."""
    texts_b = None if not examples or examples[0].text_b is None else [example.text_b for example in examples]
    return [example.text for example in examples], texts_b


def choice_pairs(examples: Sequence[ChoiceExample]) -> tuple[list[str], list[str]]:
    """The encoder's (contexts, qas), one pair per option, options of an example adjacent."""
    contexts = [example.context for example in examples for _ in example.options]
    qas = [question_with_option(example.question, option) for example in examples for option in example.options]
    return contexts, qas


def count_truncated(examples: Sequence[TextExample] | Sequence[ChoiceExample], encoder: XLNetTextEncoder,
                    max_segments: int = 1) -> int:
    """How many examples the encoder will truncate (for choice examples: any of its options), read
    in ``max_segments`` segments: the encoder's own rule (``XLNetTextEncoder.kept_lengths``). With
    one segment, a single text needs its pieces + 2 positions (<sep>, <cls>), a pair its pieces + 3.
    """
    if not examples:
        return 0
    is_choice = isinstance(examples[0], ChoiceExample)
    texts_a, texts_b = choice_pairs(examples) if is_choice else text_pairs(examples)
    len_a = _piece_counts(texts_a, encoder)
    len_b = None if texts_b is None else _piece_counts(texts_b, encoder)
    kept_a, kept_b = encoder.kept_lengths(tf.constant(len_a), None if len_b is None else tf.constant(len_b),
                                          max_segments)
    too_long = kept_a.numpy() < len_a
    if len_b is not None:
        too_long |= kept_b.numpy() < len_b
    if not is_choice:
        return int(too_long.sum())
    # Per example: any of its options, whose pairs are adjacent.
    starts = np.cumsum([0] + [len(example.options) for example in examples[:-1]])
    return int(np.logical_or.reduceat(too_long, starts).sum())


def _piece_counts(texts: list[str], encoder: XLNetTextEncoder) -> np.ndarray:
    """int64 [len(texts)]: SentencePiece pieces per text after normalisation."""
    counts = [encoder.tokenize(tf.constant(texts[i:i + _TOKENIZE_CHUNK])).row_lengths().numpy()
              for i in range(0, len(texts), _TOKENIZE_CHUNK)]
    return np.concatenate(counts)


def example_columns(examples: Sequence[TextExample] | Sequence[ChoiceExample], encoder: XLNetTextEncoder,
                    max_segments: int = 1
                    ) -> tuple[dict[str, np.ndarray], Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]]:
    """The raw-string columns of ``examples`` (one row per example) and the in-graph function
    that encodes a batch of those rows into model features: [batch, (options,) max_length], or with
    ``max_segments`` > 1 [batch, (options,) max_segments, max_length] (``encode_segments``)."""
    first = _first(examples)
    segments = [] if max_segments == 1 else [max_segments]

    def encode(texts_a: tf.Tensor, texts_b: tf.Tensor | None) -> dict[str, tf.Tensor]:
        if max_segments == 1:
            return encoder.encode(texts_a, texts_b)
        return encoder.encode_segments(texts_a, texts_b, max_segments)

    if isinstance(first, ChoiceExample):
        num_options = _common_option_count(examples)
        contexts, qas = choice_pairs(examples)
        columns = {"context": np.reshape(contexts, [-1, num_options]), "qa": np.reshape(qas, [-1, num_options])}

        def encode_choices(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            flat = encode(tf.reshape(batch["context"], [-1]), tf.reshape(batch["qa"], [-1]))
            return {name: tf.reshape(value, [-1, num_options, *segments, encoder.max_length])
                    for name, value in flat.items()}

        return columns, encode_choices
    texts_a, texts_b = text_pairs(examples)
    columns = {"a": np.asarray(texts_a, object)}
    if texts_b is not None:
        columns["b"] = np.asarray(texts_b, object)

    def encode_texts(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        return encode(batch["a"], batch.get("b"))

    return columns, encode_texts


def text_dataset(examples: Sequence[TextExample], encoder: XLNetTextEncoder, batch_size: int,
                 targets: np.ndarray | None = None, *, pad_last_batch: bool = False,
                 max_segments: int = 1) -> tf.data.Dataset:
    """Batches of encoded text examples, in file order (training order is :func:`training_dataset`'s).

    Args:
      examples: from :func:`read_text_examples`.
      encoder: lays out and pads each batch (its ``max_length`` is the sequence length).
      batch_size: examples per batch.
      targets: [num_examples] (:func:`label_ids` or :func:`regression_targets`), or None.
      pad_last_batch: fill the last batch with copies of the last example (:func:`pad_rows`), so
        every batch has the same static shape (one compiled program on a TPU); the caller keeps
        the first ``len(examples)`` outputs.
      max_segments: segments each text is read in (XLNetTextEncoder.encode_segments); 1: one.
    Returns:
      A dataset of ``(features, targets)`` or, without targets, ``features``: features is a dict
      of int32 [batch, max_length] (with max_segments > 1: [batch, max_segments, max_length])
      ``input_ids``, ``segment_ids``, ``input_mask``; targets is [batch] (int32 label ids or
      float32 values).
    """
    if isinstance(_first(examples), ChoiceExample):
        raise TypeError("text_dataset takes text examples; use choice_dataset for multiple choice")
    columns, encode = example_columns(examples, encoder, max_segments)
    return _batched(columns, targets, encode, batch_size, pad_last_batch)


def choice_dataset(examples: Sequence[ChoiceExample], encoder: XLNetTextEncoder, batch_size: int,
                   targets: np.ndarray | None = None, *, pad_last_batch: bool = False,
                   max_segments: int = 1) -> tf.data.Dataset:
    """Batches of encoded multiple-choice examples; every example must have as many options.

    Args:
      examples: from :func:`read_choice_examples`.
      encoder, batch_size, pad_last_batch, max_segments: as for :func:`text_dataset`.
      targets: int32 [num_examples] from :func:`choice_targets`, or None.
    Returns:
      A dataset of ``(features, targets)`` or ``features``: features is a dict of int32
      [batch, num_options, max_length] (with max_segments > 1: [batch, num_options, max_segments,
      max_length]) ``input_ids``, ``segment_ids``, ``input_mask`` (one ``context <sep> qa <sep>
      <cls>`` sequence per option, the context the long part); targets is int32 [batch].
    Raises:
      FinetuneDataError naming the first example whose number of options differs.
    """
    if not isinstance(_first(examples), ChoiceExample):
        raise TypeError("choice_dataset takes multiple-choice examples; use text_dataset for texts")
    columns, encode = example_columns(examples, encoder, max_segments)
    return _batched(columns, targets, encode, batch_size, pad_last_batch)


def _common_option_count(examples: Sequence[ChoiceExample]) -> int:
    """The number of options every example has (batches are [batch, num_options, max_length])."""
    first = _first(examples)
    for example in examples:
        if len(example.options) != len(first.options):
            raise FinetuneDataError(
                f"{example.path}:{example.line}: {len(example.options)} options, but "
                f"{first.path}:{first.line} has {len(first.options)}; every example needs the same number")
    return len(first.options)


def _first(examples: Sequence[TextExample] | Sequence[ChoiceExample]) -> TextExample | ChoiceExample:
    if not examples:
        raise FinetuneDataError("no examples to encode")
    return examples[0]


def _batched(columns: dict[str, Any], targets: np.ndarray | None,
             encode: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]], batch_size: int,
             pad_last_batch: bool) -> tf.data.Dataset:
    """Raw strings (+ targets) -> batches (the last one padded if asked) -> ``encode`` in the tf.data graph."""
    num_examples = len(next(iter(columns.values())))
    if targets is not None and len(targets) != num_examples:
        raise ValueError(f"{len(targets)} targets for {num_examples} examples")
    dataset = batched_rows(columns if targets is None else (columns, targets), batch_size, pad_last_batch)
    if targets is None:
        dataset = dataset.map(traced_as_written(encode), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        dataset = dataset.map(traced_as_written(lambda batch, labels: (encode(batch), labels)),
                              num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
