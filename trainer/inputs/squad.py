"""SQuAD inputs: JSON files -> questions -> windowed XLNet features with a map back to the text.

Reading
-------
The SQuAD JSON format (v1.1 and v2.0): ``data`` -> articles -> ``paragraphs`` -> ``context`` and
``qas`` -> ``id``, ``question``, ``answers`` [``text``, ``answer_start``] and, in v2.0,
``is_impossible``. A file set is v2.0 when any question carries ``is_impossible``. Files are read
through tf.io.gfile (local or gs://, globs allowed; paths stay strings). Every problem is a
:class:`SquadDataError` naming the file and the question id: a missing or mistyped field, a
duplicate id, an empty context or question, an ``answer_start`` outside the context or whose
``text`` is not the context's text there, an unanswerable question with answers.

Features (as XLNet's run_squad.py builds them, on the serving encoder's conventions)
--------------------------------------------------------------------------------
* Context and question are normalised as everywhere in the project
  (tfrecords/text_normalization.py's normalize_text with the model's casing: accents stripped,
  quotes changed, whitespace collapsed) and cut into SentencePiece pieces by the model, so the
  ids equal the serving encoder's. Each context piece keeps the span of ORIGINAL context
  characters it came from (:func:`normalized_char_origins` follows every character through the
  normalisation, and SentencePiece reports each piece's offsets), so an answer is always a span
  of the original text, and answer character offsets map exactly onto pieces (no LCS guess).
* The question keeps its first ``max_query_length`` pieces (questions cut are counted).
* Layout, LEFT-padded to ``max_seq_length`` so that ``<cls>`` is always the last position::

      [<pad> ...] + context window + <sep> + question + <sep> + <cls>

  segment ids 0 (context and its <sep>), 1 (question and its <sep>), 2 (<cls>), 0 (padding,
  masked out of attention, as the serving encoder pads); ``input_mask`` 1 for real tokens;
  ``p_mask`` 1 where an answer cannot start or end (padding, <sep>, question), 0 on the context
  and on <cls>, which stands for "no answer". The original pads on the right; with relative
  positions and padded keys masked the real positions compute the same either way.
* Windows: the context budget is ``max_seq_length - len(question) - 3`` pieces; windows start at
  0 and advance by ``min(window length, doc_stride)`` until one reaches the end. A piece in
  several windows is scored only in its "max context" window: the highest
  ``min(left, right context) + 0.01 * window length`` (the first on ties).
* Targets: the answer's first and last pieces; for an unanswerable question, or an answer not
  wholly inside the window, ``start = end = <cls> position`` and ``is_impossible = 1`` (the
  window is kept). Training examples whose answer covers no piece (e.g. only characters the
  normalisation drops) are counted and skipped; evaluation keeps every question.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from tfrecords.errors import UsageError
from tfrecords.json_documents import load_json
from tfrecords.schema import SEG_A, SEG_B, SEG_CLS
from tfrecords.text_normalization import normalize_text, normalized_char_origins
from tfrecords.vocabulary import SpecialIds, Vocab, parse_vocab
from trainer.configs.finetuning import squad_length_problems
from trainer.inputs.text_files import FinetuneDataError, field, matching_files, read_text


class SquadDataError(FinetuneDataError):
    """A SQuAD file that cannot be used as given; the message names the file and the question id."""


@dataclasses.dataclass(frozen=True)
class SquadAnswer:
    """A gold answer: ``text`` == context[start:start + len(text)] (checked when read)."""

    text: str
    start: int

    @property
    def end(self) -> int:
        """Exclusive end character in the context."""
        return self.start + len(self.text)


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question over one context. ``answers`` is empty for an unanswerable question (and for
    questions of an unlabeled file); ``path`` names the file it came from."""

    qid: str
    question: str
    context: str
    answers: tuple[SquadAnswer, ...]
    is_impossible: bool
    path: str
    title: str = ""


@dataclasses.dataclass(frozen=True)
class SquadData:
    """The questions of a file set, in file order, and whether it is SQuAD 2.0."""

    examples: tuple[SquadExample, ...]
    version_2: bool

    @property
    def labeled(self) -> bool:
        """Whether every question has its gold answers or is marked unanswerable (can be scored)."""
        return all(example.answers or example.is_impossible for example in self.examples)

    def gold_answers(self) -> dict[str, list[str]]:
        """question id -> gold answer texts (empty when unanswerable), as trainer.evaluation.squad_official takes them."""
        return {example.qid: [answer.text for answer in example.answers] for example in self.examples}


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


def read_squad(pattern: str, require_answers: bool = True) -> SquadData:
    """The questions of every SQuAD JSON file matching ``pattern`` (local or gs://), in order.

    Args:
      pattern: a path or glob; matches are read in sorted order.
      require_answers: an answerable question without answers is an error (False for files to
        predict, whose questions may carry no answers).
    Raises:
      SquadDataError naming the file (and question id) of any problem listed in the module
      docstring; FinetuneDataError for a missing or unreadable file.
    """
    examples: list[SquadExample] = []
    seen: dict[str, str] = {}
    version_2 = False
    for path in matching_files(pattern):
        for example, has_flag in _file_examples(path, require_answers):
            if example.qid in seen:
                raise SquadDataError(f"{path}: question {example.qid!r}: duplicate id (first in {seen[example.qid]})")
            seen[example.qid] = path
            version_2 |= has_flag
            examples.append(example)
    if not examples:
        raise SquadDataError(f"{pattern}: no questions")
    return SquadData(tuple(examples), version_2)


def _file_examples(path: str, require_answers: bool) -> Iterator[tuple[SquadExample, bool]]:
    """(example, whether its question carries is_impossible) for every question of one file."""
    document = load_json(read_text(path), path, SquadDataError)  # deep nesting too: one line naming the file
    articles = field(document, "data", path, list, error=SquadDataError) if isinstance(document, dict) else None
    if articles is None:
        raise SquadDataError(f"{path}: expected a JSON object with a 'data' list of articles")
    for a, article in enumerate(articles):
        where = f"{path}: data[{a}]"
        title = article.get("title", "") if isinstance(article, dict) else ""
        for p, paragraph in enumerate(field(article, "paragraphs", where, list, error=SquadDataError)):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = field(paragraph, "context", where, str, error=SquadDataError)
            questions = field(paragraph, "qas", where, list, error=SquadDataError)
            if not normalize_text(context):
                first = questions[0].get("id") if questions and isinstance(questions[0], dict) else None
                raise SquadDataError(f"{where}" + (f" (question {first!r})" if first is not None else "")
                                     + ": empty context")
            for q, qa in enumerate(questions):
                qid = field(qa, "id", f"{where}.qas[{q}]", (str, int), error=SquadDataError)
                yield _example(qa, str(qid), context, path, title if isinstance(title, str) else "",
                               require_answers), "is_impossible" in qa


def _example(qa: dict, qid: str, context: str, path: str, title: str, require_answers: bool) -> SquadExample:
    where = f"{path}: question {qid!r}"
    question = field(qa, "question", where, str, error=SquadDataError)
    if not normalize_text(question):
        raise SquadDataError(f"{where}: empty question")
    is_impossible = field(qa, "is_impossible", where, bool, error=SquadDataError) if "is_impossible" in qa else False
    raw_answers = field(qa, "answers", where, list, error=SquadDataError) if require_answers or "answers" in qa else []
    answers = []
    for n, answer in enumerate(raw_answers):
        text = field(answer, "text", f"{where}: answers[{n}]", str, error=SquadDataError)
        start = field(answer, "answer_start", f"{where}: answers[{n}]", int, error=SquadDataError)
        if not 0 <= start < len(context) or start + len(text) > len(context):
            raise SquadDataError(f"{where}: answers[{n}]: answer_start {start} with {len(text)} characters is "
                                 f"outside the context ({len(context)} characters)")
        if context[start:start + len(text)] != text:
            raise SquadDataError(f"{where}: answers[{n}]: the context at answer_start {start} reads "
                                 f"{context[start:start + len(text)]!r}, not the answer text {text!r}")
        if not text.strip():
            raise SquadDataError(f"{where}: answers[{n}]: empty answer text")
        answers.append(SquadAnswer(text, start))
    if is_impossible and answers:
        raise SquadDataError(f"{where}: is_impossible is true but the question has {len(answers)} answer(s)")
    if require_answers and not is_impossible and not answers:
        raise SquadDataError(f"{where}: no answers (mark an unanswerable question with \"is_impossible\": true)")
    return SquadExample(qid, question, context, tuple(answers), is_impossible, path, title)


# ----------------------------------------------------------------------------------------------
# Text -> pieces with original character spans
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PieceSpans:
    """SentencePiece ids of a text and, per piece, its span of ORIGINAL characters [start, end).

    A piece that covers only a word-boundary space (a bare "▁") gets the empty span at the next
    character. int32 arrays [pieces].
    """

    ids: np.ndarray
    char_start: np.ndarray
    char_end: np.ndarray


class SquadTokenizer:
    """Python SentencePiece with the project's normalisation: the ids the serving encoder
    (trainer/serving/text_encoder.py) produces, plus each piece's span of the original text."""

    def __init__(self, vocab: Vocab, uncased: bool):
        import sentencepiece as spm

        self.vocab, self.uncased = vocab, bool(uncased)
        self.special_ids: SpecialIds = vocab.special_ids
        self.processor = spm.SentencePieceProcessor(model_proto=vocab.model_proto)

    @classmethod
    def from_model_proto(cls, model_proto: bytes, uncased: bool, path: str = "spiece.model") -> "SquadTokenizer":
        """From the bytes of a SentencePiece model (e.g. a model directory's spiece.model)."""
        return cls(parse_vocab(model_proto, path), uncased)

    def encode(self, text: str) -> list[int]:
        """Piece ids of the normalised text."""
        return self.processor.encode(normalize_text(text, self.uncased))

    def encode_with_spans(self, text: str) -> PieceSpans:
        """Piece ids of the normalised text and each piece's original character span."""
        normalized, origin_start, origin_end = normalized_char_origins(text, self.uncased)
        proto = self.processor.encode(normalized, out_type="proto")
        # SentencePiece reports byte offsets into its input: map them to characters.
        char_of_byte = np.repeat(np.arange(len(normalized) + 1),
                                 [len(c.encode("utf-8")) for c in normalized] + [1])
        ids, starts, ends = [], [], []
        for piece in proto.pieces:
            begin, end = int(char_of_byte[piece.begin]), int(char_of_byte[piece.end])
            while begin < end and normalized[begin] == " ":
                begin += 1  # the boundary space belongs between words, not to the answer
            if begin < end:
                starts.append(origin_start[begin])
                ends.append(origin_end[end - 1])
            else:
                at = int(origin_start[end]) if end < len(normalized) else len(text)
                starts.append(at)
                ends.append(at)
            ids.append(piece.id)
        return PieceSpans(np.asarray(ids, np.int32), np.asarray(starts, np.int32), np.asarray(ends, np.int32))


def answer_piece_range(spans: PieceSpans, char_start: int, char_end: int) -> tuple[int, int] | None:
    """(first, last) piece covering original characters [char_start, char_end), inclusive, or
    None when no piece covers any of them."""
    covering = np.flatnonzero((spans.char_start < char_end) & (spans.char_end > char_start)
                              & (spans.char_end > spans.char_start))
    if len(covering) == 0:
        return None
    return int(covering[0]), int(covering[-1])


# ----------------------------------------------------------------------------------------------
# Windows and features
# ----------------------------------------------------------------------------------------------


def context_windows(num_pieces: int, budget: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of the sliding windows over ``num_pieces`` context pieces, as run_squad.py:
    each at most ``budget`` long, the next starting ``min(length, doc_stride)`` later, the last
    reaching the end."""
    windows, start = [], 0
    while start < num_pieces:
        length = min(num_pieces - start, budget)
        windows.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return windows


def max_context_window(windows: Sequence[tuple[int, int]], position: int) -> int:
    """Index of the window that scores piece ``position``: the highest
    ``min(left, right context) + 0.01 * length`` among the windows holding it (first on ties)."""
    best, best_score = -1, -1.0
    for index, (start, length) in enumerate(windows):
        if start <= position < start + length:
            score = min(position - start, start + length - 1 - position) + 0.01 * length
            if score > best_score:
                best, best_score = index, score
    return best


def max_context_owners(num_pieces: int, windows: Sequence[tuple[int, int]]) -> np.ndarray:
    """int [num_pieces]: :func:`max_context_window` of every piece at once."""
    positions = np.arange(num_pieces)
    scores = np.full((len(windows), num_pieces), -np.inf)
    for index, (start, length) in enumerate(windows):
        inside = (positions >= start) & (positions < start + length)
        score = np.minimum(positions - start, start + length - 1 - positions) + 0.01 * length
        scores[index, inside] = score[inside]
    return np.argmax(scores, axis=0)  # the first window on ties, as the strict ">" of the original


@dataclasses.dataclass(frozen=True)
class SquadFeatures:
    """One row per (question, context window). Arrays [F, L] unless said otherwise (L = max_seq_length).

    Model inputs: int32 ``input_ids``, ``segment_ids``, ``input_mask`` (1 real); float32 ``p_mask``
    (1 = cannot be an answer). Targets: int32 [F] ``start_positions``, ``end_positions``; float32
    [F] ``is_impossible``. Post-processing maps: int32 [F] ``example_index`` (into the examples
    given), int32 ``token_char_start`` / ``token_char_end`` (the original context span [start,
    end) of each context position, -1 elsewhere), bool ``token_is_max_context``. Counts:
    ``truncated_questions`` (questions cut to max_query_length), ``unaligned`` (ids of questions
    whose answer covers no piece: skipped when training).
    """

    input_ids: np.ndarray
    segment_ids: np.ndarray
    input_mask: np.ndarray
    p_mask: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    is_impossible: np.ndarray
    example_index: np.ndarray
    token_char_start: np.ndarray
    token_char_end: np.ndarray
    token_is_max_context: np.ndarray
    truncated_questions: int
    unaligned: tuple[str, ...]

    MODEL_INPUTS = ("input_ids", "segment_ids", "input_mask", "p_mask")
    TARGETS = ("start_positions", "end_positions", "is_impossible")

    def __len__(self) -> int:
        return len(self.input_ids)

    def model_inputs(self, with_targets: bool = True) -> dict[str, np.ndarray]:
        """The arrays XLNetForQuestionAnswering takes (with the training targets when asked)."""
        names = self.MODEL_INPUTS + (self.TARGETS if with_targets else ())
        return {name: getattr(self, name) for name in names}


def build_features(examples: Sequence[SquadExample], tokenizer: SquadTokenizer, *, training: bool,
                   max_seq_length: int, doc_stride: int, max_query_length: int) -> SquadFeatures:
    """Windowed features of ``examples`` (layout and rules in the module docstring).

    Args:
      examples: questions (e.g. ``read_squad(...).examples``); answerable ones use their first answer.
      tokenizer: the model's vocabulary and casing.
      training: skip (and count in ``unaligned``) questions whose answer covers no piece;
        otherwise keep them, with the <cls> targets.
      max_seq_length, doc_stride, max_query_length: the window settings (FinetuneConfig's fields).
    Returns:
      SquadFeatures; ``example_index`` refers to positions in ``examples``.
    """
    problems = squad_length_problems(max_seq_length, max_query_length)
    if problems or max_query_length < 1:
        raise UsageError("; ".join(problems) or f"max_query_length must be at least 1, got {max_query_length}")
    if doc_stride < 1:
        raise UsageError(f"doc_stride must be at least 1, got {doc_stride}")
    special = tokenizer.special_ids
    rows: dict[str, list] = {name: [] for name in (
        "input_ids", "segment_ids", "input_mask", "p_mask", "start_positions", "end_positions", "is_impossible",
        "example_index", "token_char_start", "token_char_end", "token_is_max_context")}
    truncated, unaligned = 0, []
    context_cache: dict[str, PieceSpans] = {}
    cls_index = max_seq_length - 1
    for example_index, example in enumerate(examples):
        question = tokenizer.encode(example.question)
        if len(question) > max_query_length:
            question, truncated = question[:max_query_length], truncated + 1
        if example.context not in context_cache:
            context_cache = {example.context: tokenizer.encode_with_spans(example.context)}  # questions of a paragraph are adjacent
        spans = context_cache[example.context]
        answer = None
        if example.answers and not example.is_impossible:
            answer = answer_piece_range(spans, example.answers[0].start, example.answers[0].end)
            if answer is None:
                unaligned.append(example.qid)
                if training:
                    continue
        windows = context_windows(len(spans.ids), max_seq_length - len(question) - 3, doc_stride)
        owners = max_context_owners(len(spans.ids), windows)
        for window_index, (start, length) in enumerate(windows):
            real = length + len(question) + 3
            pad = max_seq_length - real
            ids = np.full(max_seq_length, special.pad, np.int32)
            ids[pad:] = np.concatenate([spans.ids[start:start + length], [special.sep], question,
                                        [special.sep], [special.cls]])
            segments = np.full(max_seq_length, SEG_A, np.int32)
            segments[pad + length + 1:] = SEG_B
            segments[cls_index] = SEG_CLS
            mask = np.zeros(max_seq_length, np.int32)
            mask[pad:] = 1
            p_mask = np.ones(max_seq_length, np.float32)
            p_mask[pad:pad + length] = 0.0
            p_mask[cls_index] = 0.0
            char_start = np.full(max_seq_length, -1, np.int32)
            char_end = np.full(max_seq_length, -1, np.int32)
            char_start[pad:pad + length] = spans.char_start[start:start + length]
            char_end[pad:pad + length] = spans.char_end[start:start + length]
            max_context = np.zeros(max_seq_length, bool)
            max_context[pad:pad + length] = owners[start:start + length] == window_index
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                target = (pad + answer[0] - start, pad + answer[1] - start, 0.0)
            else:
                target = (cls_index, cls_index, 1.0)
            for name, value in zip(rows, (ids, segments, mask, p_mask, *target, example_index, char_start, char_end,
                                          max_context)):
                rows[name].append(value)
    if not rows["input_ids"]:
        raise SquadDataError(f"no features: every one of the {len(examples)} questions was skipped "
                             f"({len(unaligned)} answers cover no piece)")
    dtypes = {"start_positions": np.int32, "end_positions": np.int32, "is_impossible": np.float32,
              "example_index": np.int32}
    arrays = {name: np.asarray(values, dtypes.get(name)) for name, values in rows.items()}
    return SquadFeatures(**arrays, truncated_questions=truncated, unaligned=tuple(unaligned))
