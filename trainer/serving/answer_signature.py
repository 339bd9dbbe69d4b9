"""The ``answer`` serving signature: (question, context) strings -> an answer span, all in the graph.

Everything here is TensorFlow and tensorflow_text ops, so the SavedModel needs no project code.
It computes, per (question, context) pair of a batch, what the Python pipeline computes
(trainer/inputs/squad.py's build_features(training=False) + XLNetForQuestionAnswering's beam +
trainer/evaluation/squad_postprocessing.py's predict_answers):

1. The context is normalised CHARACTER BY CHARACTER, each normalised character keeping the span
   of original characters it came from (tfrecords/text_normalization.py's normalized_char_origins_graph, the graph twin of
   normalized_char_origins):
   NFKD of each character, non-spacing marks (Mn) dropped, ``````/``''`` pairs to ``"`` (left
   to right, the first pattern first), whitespace runs collapsed to one space spanning the run,
   the ends stripped, lower-cased per character when uncased. The normalised text is the
   concatenation of those characters; it equals tfrecords.text_normalization.normalize_text_graph
   except where NFKD canonically reorders combining characters that are NOT dropped (spacing
   marks of category Mc with a non-zero combining class, such as some musical symbols), where
   per-character decomposition keeps the original order. (The Python pipeline there realigns
   with difflib, which has no graph equivalent; its tokens could then differ.)
2. SentencePiece (tensorflow_text, ``tokenize_with_offsets``) cuts the normalised text; byte
   offsets become characters, and each piece gets the original span of its characters, a
   leading word-boundary space excluded; a bare boundary piece gets the empty span at the next
   character (as inputs.squad.SquadTokenizer.encode_with_spans).
3. The question is normalised and tokenised as every text signature does and keeps its first
   ``max_query_length`` pieces.
4. Windows as inputs.squad.build_features: context budget ``max_length - len(question) - 3``,
   windows every ``min(budget, doc_stride)`` pieces until one reaches the end, each piece scored
   only in its max-context window (highest ``min(left, right) + 0.01 * length``, float64 as
   NumPy computes it, the first window on ties). Layout, left-padded, ``<cls>`` last::

       [<pad> ...] + context window + <sep> + question + <sep> + <cls>

   The windows of the whole batch are padded to the LONGEST window's length (at least the beam
   width), not to ``max_length``, and run through the module's bucketed ``encode``: results
   equal full padding (padding is masked out as a key; masked logits are -1e30 either way) up to
   float rounding.
5. The beam of XLNetForQuestionAnswering per window, then predict_answers' decoding: candidates
   (start i, end j) of every window, dropped when a start or end is outside the context window,
   the start is not in its max-context window, the end is before the start or the span is longer
   than ``max_answer_length`` pieces, or the trimmed text is empty; ranked by start + end
   log-probability summed in float64 (as Python's floats), the first in window/beam order on
   ties. Only the best is returned (``n_best`` only shapes predict_answers' n-best list, never its
   best answer). The text is the original context from the first piece's first character to the
   last piece's last, whitespace trimmed.

A pair without any candidate (e.g. an empty context) answers ``""`` with ``char_start`` =
``char_end`` = -1 and score -1e6; a pair without windows (empty context) has the no-answer score
+1e6, so ``no_answer_probability`` 1.0, as predict_answers defines them.
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf
import tensorflow_text as tf_text

from tfrecords.schema import SEG_A, SEG_B, SEG_CLS
from tfrecords.text_normalization import WHITESPACE_CODEPOINTS, character_class, normalized_char_origins_graph
from trainer.configs.finetuning import squad_length_problems

NO_CANDIDATE_SCORE = -1e6  # predict_answers' score of an answer without candidates
NO_WINDOW_NO_ANSWER_SCORE = 1e6  # and its no-answer score of a question without windows
_WHITESPACE_CHAR = character_class(WHITESPACE_CODEPOINTS)  # one character of Python's str.isspace() set


@dataclasses.dataclass(frozen=True)
class SquadServingConfig:
    """The settings the ``answer`` signature is built with (from the model's FinetuneConfig)."""

    max_length: int
    doc_stride: int
    max_query_length: int
    max_answer_length: int
    start_n_top: int
    end_n_top: int

    def problems(self) -> list[str]:
        """What makes these settings unusable (empty when they are fine)."""
        problems = squad_length_problems(self.max_length, self.max_query_length)
        if self.max_query_length < 1:
            problems.append(f"max_query_length must be at least 1, got {self.max_query_length}")
        if self.doc_stride < 1 or self.max_answer_length < 1:
            problems.append(f"doc_stride ({self.doc_stride}) and max_answer_length ({self.max_answer_length}) "
                            "must be at least 1")
        if max(self.start_n_top, self.end_n_top) > self.max_length:
            problems.append(f"the beam (start_n_top {self.start_n_top}, end_n_top {self.end_n_top}) cannot be "
                            f"wider than max_length {self.max_length}")
        return problems


def _gather_in_rows(values: tf.RaggedTensor, index: tf.RaggedTensor) -> tf.RaggedTensor:
    """values[row][index[row][k]] for every k: RaggedTensor shaped as ``index`` (indices valid)."""
    flat = tf.cast(index.flat_values, tf.int64) + tf.gather(values.row_splits, index.value_rowids())
    return index.with_flat_values(tf.gather(values.flat_values, flat))


def context_pieces_graph(tokenizer: tf_text.SentencepieceTokenizer, texts: tf.Tensor,
                         uncased: bool) -> dict[str, tf.RaggedTensor]:
    """Piece ids of the normalised texts and each piece's ORIGINAL character span [start, end).

    The graph twin of inputs.squad.SquadTokenizer.encode_with_spans. Returns int32 RaggedTensors
    [batch, (pieces)]: ``ids``, ``char_start``, ``char_end``.
    """
    origins = normalized_char_origins_graph(texts, uncased)
    chars = origins["chars"]
    ids, byte_begin, byte_end = tokenizer.tokenize_with_offsets(origins["normalized"])
    # Byte offsets -> normalised characters: a byte belongs to the last character starting at or
    # before it; the end of the text (one byte past it) maps to len(normalised).
    char_bytes = tf.strings.length(chars, unit="BYTE")
    starts = tf.concat([tf.zeros_like(char_bytes[:, :1]), tf.cumsum(char_bytes, axis=1)], axis=1)
    starts = tf.cast(starts, tf.int64).to_tensor(default_value=tf.int64.max)  # [batch, chars + 1]

    def char_of(byte_offsets: tf.RaggedTensor) -> tf.RaggedTensor:
        dense = tf.cast(byte_offsets, tf.int64).to_tensor()
        found = tf.searchsorted(starts, dense, side="right", out_type=tf.int32) - 1
        return tf.RaggedTensor.from_tensor(found, lengths=byte_offsets.row_lengths())

    begin, end = char_of(byte_begin), char_of(byte_end)
    begin_values, end_values = begin.flat_values, end.flat_values
    num_chars = tf.gather(tf.cast(chars.row_lengths(), tf.int32), begin.value_rowids())  # per piece

    def at_char(values: tf.RaggedTensor, index: tf.Tensor) -> tf.Tensor:
        """values[row][index] per piece, the index clamped into its row (rows with pieces have characters)."""
        return _gather_in_rows(values, begin.with_flat_values(tf.clip_by_value(index, 0, num_chars - 1))).flat_values

    # The boundary space belongs between words, not to the answer (whitespace is collapsed, so a
    # piece starts with at most one space).
    begin_values += tf.cast((begin_values < end_values) & tf.equal(at_char(chars, begin_values), " "), tf.int32)
    has_chars = begin_values < end_values
    # A piece of no character (a bare boundary "▁") gets the empty span at the next character,
    # or at the end of the text.
    text_lengths = tf.gather(tf.strings.length(texts, unit="UTF8_CHAR"), begin.value_rowids())
    at = tf.where(end_values < num_chars, at_char(origins["origin_start"], end_values), text_lengths)
    char_start = tf.where(has_chars, at_char(origins["origin_start"], begin_values), at)
    char_end = tf.where(has_chars, at_char(origins["origin_end"], end_values - 1), at)
    return {"ids": ids, "char_start": begin.with_flat_values(char_start), "char_end": begin.with_flat_values(char_end)}


# ----------------------------------------------------------------------------------------------
# Windows and their model inputs
# ----------------------------------------------------------------------------------------------


def window_starts(num_pieces: tf.Tensor, question_lengths: tf.Tensor, config: SquadServingConfig) -> dict[str, tf.Tensor]:
    """The sliding windows of every context (inputs.squad.context_windows), one feature row each.

    Args:
      num_pieces, question_lengths: int32 [batch] context and (cut) question pieces.
    Returns:
      int32 [features] ``example_index``, ``window_index``, ``start``, ``length`` (examples in
      order, each example's windows in order), and int32 [batch] ``num_windows`` (0 for an empty
      context, as the Python loop makes none).
    """
    budget = config.max_length - question_lengths - 3  # >= 1: max_length >= max_query_length + 4
    step = tf.minimum(budget, config.doc_stride)  # every window but the last is budget long
    beyond = num_pieces - budget
    num_windows = tf.where(num_pieces == 0, 0, tf.where(beyond <= 0, 1, 1 + (beyond + step - 1) // step))
    example_index = tf.repeat(tf.range(tf.size(num_pieces)), num_windows)
    window_index = tf.ragged.range(num_windows).flat_values
    start = window_index * tf.gather(step, example_index)
    length = tf.minimum(tf.gather(num_pieces, example_index) - start, tf.gather(budget, example_index))
    return {"example_index": example_index, "window_index": window_index, "start": start, "length": length,
            "num_windows": num_windows}


def max_context_owner(windows: dict[str, tf.Tensor], positions: tf.Tensor) -> tf.Tensor:
    """int32 [features, length]: for context piece ``positions`` [features, length] of each
    feature's example, the index of its max-context window among that example's windows:
    highest ``min(left, right) + 0.01 * window length`` (float64, as NumPy), first on ties."""
    num_windows = windows["num_windows"]
    per_example = [tf.RaggedTensor.from_row_lengths(windows[name], num_windows).to_tensor() for name in ("start", "length")]
    start, length = [tf.gather(values, windows["example_index"])[:, :, None] for values in per_example]  # [F, W, 1]
    valid = tf.sequence_mask(tf.gather(num_windows, windows["example_index"]))[:, :, None]
    position = positions[:, None, :]  # [F, 1, L]
    inside = valid & (start <= position) & (position < start + length)
    score = (tf.cast(tf.minimum(position - start, start + length - 1 - position), tf.float64)
             + 0.01 * tf.cast(length, tf.float64))  # [F, W, L]
    score = tf.where(inside, score, tf.constant(-float("inf"), tf.float64))
    best = tf.reduce_max(score, axis=1, keepdims=True)
    window = tf.range(tf.shape(score)[1])[None, :, None]
    return tf.reduce_min(tf.where(inside & tf.equal(score, best), window, tf.int32.max), axis=1)


def _safe_gather(params: tf.Tensor, index: tf.Tensor, default) -> tf.Tensor:
    """params[index] with out-of-range indices (including any index into an empty ``params``)
    giving ``default``; callers mask those results out."""
    padded = tf.concat([params, tf.fill([1], tf.constant(default, params.dtype))], axis=0)
    size = tf.shape(params, out_type=index.dtype)[0]
    return tf.gather(padded, tf.where((index >= 0) & (index < size), index, size))


def window_features(pieces: dict[str, tf.RaggedTensor], question_ids: tf.RaggedTensor, config: SquadServingConfig,
                    special_ids: dict[str, int]) -> dict[str, tf.Tensor]:
    """Model inputs and decoding maps of every window, as inputs.squad.build_features lays them out.

    Args:
      pieces: :func:`context_pieces_graph` of the contexts [batch, (pieces)].
      question_ids: int32 [batch, (pieces)], already cut to max_query_length.
    Returns:
      int32 [F, P] ``input_ids``, ``segment_ids``, ``input_mask``; float32 [F, P] ``p_mask``;
      int32 [F, P] ``token_char_start``, ``token_char_end`` (-1 outside the context window);
      bool [F, P] ``token_is_max_context``; int32 [F] ``example_index`` and [batch]
      ``num_windows``. P is the longest window's real length (at least the beam width), not
      max_length: left padding to any length gives the same outputs.
    """
    num_pieces = tf.cast(pieces["ids"].row_lengths(), tf.int32)
    question_lengths = tf.cast(question_ids.row_lengths(), tf.int32)
    windows = window_starts(num_pieces, question_lengths, config)
    example = windows["example_index"]
    length = windows["length"][:, None]  # [F, 1]
    question_length = tf.gather(question_lengths, example)[:, None]
    real = length + question_length + 3  # context, <sep>, question, <sep>, <cls>
    width = tf.maximum(tf.reduce_max(tf.concat([real[:, 0], [0]], axis=0)),
                       max(config.start_n_top, config.end_n_top))  # top_k needs as many positions as the beam
    relative = tf.range(width)[None, :] - (width - real)  # position in the real tokens; < 0 is padding
    in_context = (relative >= 0) & (relative < length)
    in_question = (relative > length) & (relative <= length + question_length)
    is_cls = tf.equal(relative, real - 1)
    is_sep = tf.equal(relative, length) | tf.equal(relative, length + question_length + 1)
    piece = windows["start"][:, None] + relative  # index among the context's pieces
    context_flat = tf.gather(tf.cast(pieces["ids"].row_splits, tf.int32), example)[:, None] + piece
    question_flat = (tf.gather(tf.cast(question_ids.row_splits, tf.int32), example)[:, None]
                     + relative - length - 1)

    def context_values(name: str) -> tf.Tensor:
        return tf.where(in_context, _safe_gather(pieces[name].flat_values, context_flat, -1), -1)

    input_ids = tf.where(in_context, context_values("ids"),
                         tf.where(in_question, _safe_gather(question_ids.flat_values, question_flat, 0),
                                  tf.where(is_sep, special_ids["sep"],
                                           tf.where(is_cls, special_ids["cls"], special_ids["pad"]))))
    owner = max_context_owner(windows, piece)
    return {
        "input_ids": input_ids,
        "segment_ids": tf.where(is_cls, SEG_CLS, tf.where(in_question | (is_sep & ~tf.equal(relative, length)),
                                                           SEG_B, SEG_A)),
        "input_mask": tf.cast(relative >= 0, tf.int32),
        "p_mask": tf.where(in_context | is_cls, 0.0, 1.0),
        "token_char_start": context_values("char_start"),
        "token_char_end": context_values("char_end"),
        "token_is_max_context": in_context & tf.equal(owner, windows["window_index"][:, None]),
        "example_index": example,
        "num_windows": windows["num_windows"],
    }


# ----------------------------------------------------------------------------------------------
# Decoding: the beam of every window -> the best answer of each pair
# ----------------------------------------------------------------------------------------------


def _candidates(beam: dict[str, tf.Tensor], features: dict[str, tf.Tensor],
                max_answer_length: int) -> dict[str, tf.Tensor]:
    """Every (start i, end j) pair of every window's beam, flat [F * start_n_top * end_n_top] in
    predict_answers' order (window, then i, then j): float64 ``score``, bool ``valid`` (before the
    empty-text check), int32 original ``char_start`` / ``char_end`` and ``example_index``."""
    start_index, end_index = beam["start_top_index"], beam["end_top_index"]
    end_n_top = tf.shape(end_index)[1] // tf.shape(start_index)[1]
    start_index = tf.repeat(start_index, end_n_top, axis=1)  # [F, starts * ends], start-major
    start_log_prob = tf.repeat(beam["start_top_log_probs"], end_n_top, axis=1)

    def at(name: str, index: tf.Tensor) -> tf.Tensor:
        return tf.gather(features[name], index, batch_dims=1)

    valid = ((at("token_char_start", start_index) >= 0) & at("token_is_max_context", start_index)
             & (at("token_char_start", end_index) >= 0) & (end_index >= start_index)
             & (end_index - start_index + 1 <= max_answer_length))
    score = tf.cast(start_log_prob, tf.float64) + tf.cast(beam["end_top_log_probs"], tf.float64)
    per_feature = tf.shape(end_index)[1]
    return {"score": tf.reshape(score, [-1]), "valid": tf.reshape(valid, [-1]),
            "char_start": tf.reshape(at("token_char_start", start_index), [-1]),
            "char_end": tf.reshape(at("token_char_end", end_index), [-1]),
            "example_index": tf.repeat(features["example_index"], per_feature)}


def best_answers(beam: dict[str, tf.Tensor], features: dict[str, tf.Tensor], contexts: tf.Tensor,
                 max_answer_length: int) -> dict[str, tf.Tensor]:
    """predict_answers' best answer of each pair, from the head's beam over its windows.

    Args:
      beam: XLNetForQuestionAnswering's inference outputs, one row per feature.
      features: :func:`window_features`.
      contexts: tf.string [batch], the (valid UTF-8) contexts the offsets refer to.
    Returns:
      ``answer`` tf.string [batch]; int32 [batch] ``char_start``, ``char_end`` (code points, -1
      without an answer); float32 [batch] ``score`` and ``no_answer_probability``.
    """
    num_examples = tf.size(contexts)
    candidates = _candidates(beam, features, max_answer_length)
    example = candidates["example_index"]
    # Trimmed text non-empty <=> the raw span holds a non-whitespace character: prefix counts of
    # non-whitespace characters over every context's characters, flat.
    characters = tf.strings.unicode_split(contexts, "UTF-8")
    text_start = tf.cast(characters.row_splits, tf.int32)
    text_length = tf.cast(characters.row_lengths(), tf.int32)
    solid = ~tf.strings.regex_full_match(characters.flat_values, _WHITESPACE_CHAR)
    solid_before = tf.concat([[0], tf.cumsum(tf.cast(solid, tf.int32))], axis=0)  # [characters + 1]
    solid_position = tf.cast(tf.where(solid)[:, 0], tf.int32)  # flat position of the k-th solid character

    def flat(index: tf.Tensor, of: tf.Tensor) -> tf.Tensor:
        """Flat character index of ``index`` within context ``of``, clamped to [0, its length]."""
        return tf.gather(text_start, of) + tf.clip_by_value(index, 0, tf.gather(text_length, of))

    raw_start, raw_end = candidates["char_start"], candidates["char_end"]
    solid_in_span = (tf.gather(solid_before, flat(raw_end, example))
                     - tf.gather(solid_before, flat(raw_start, example)))
    valid = candidates["valid"] & (raw_end > raw_start) & (solid_in_span > 0)
    score = tf.where(valid, candidates["score"], tf.constant(-float("inf"), tf.float64))
    has_answer = tf.math.unsorted_segment_max(tf.cast(valid, tf.int32), example, num_examples) > 0
    best_score = tf.math.unsorted_segment_max(score, example, num_examples)
    # The first candidate (window, then beam order) with the best score, as a stable sort keeps it.
    order = tf.range(tf.size(score))
    best = tf.math.unsorted_segment_min(tf.where(valid & tf.equal(score, tf.gather(best_score, example)),
                                                 order, tf.int32.max), example, num_examples)
    examples = tf.range(num_examples)
    begin = _safe_gather(raw_start, best, 0)
    end = _safe_gather(raw_end, best, 0)
    # str.strip(): from the first solid character at or after begin to the last one before end.
    first_solid = _safe_gather(solid_position, tf.gather(solid_before, flat(begin, examples)), 0)
    last_solid = _safe_gather(solid_position, tf.gather(solid_before, flat(end, examples)) - 1, 0)
    char_start = tf.where(has_answer, first_solid - text_start[:-1], -1)
    char_end = tf.where(has_answer, last_solid - text_start[:-1] + 1, -1)
    answer = tf.strings.substr(contexts, tf.maximum(char_start, 0), tf.maximum(char_end - char_start, 0),
                               unit="UTF8_CHAR")
    no_answer = tf.math.unsorted_segment_min(beam["cls_logits"], features["example_index"], num_examples)
    no_answer = tf.where(features["num_windows"] > 0, no_answer, NO_WINDOW_NO_ANSWER_SCORE)
    return {
        "answer": answer,
        "char_start": char_start,
        "char_end": char_end,
        "score": tf.where(has_answer, tf.cast(best_score, tf.float32), NO_CANDIDATE_SCORE),
        # predict_answers: sigmoid, and exactly 0 below -700 (where exp overflows in Python)
        "no_answer_probability": tf.where(no_answer > -700.0, tf.sigmoid(no_answer), 0.0),
    }


# ----------------------------------------------------------------------------------------------
# The signature
# ----------------------------------------------------------------------------------------------


def answer(question: tf.Tensor, context: tf.Tensor, *, encoder, encode, head,
           config: SquadServingConfig) -> dict[str, tf.Tensor]:
    """The ``answer`` signature's body: question, context tf.string [batch] -> best answers.

    Args:
      encoder: the module's trainer.serving.text_encoder.XLNetTextEncoder (vocabulary, casing, specials).
      encode: the module's bucketed ``encode`` tf.function (ids [F, P] -> sequence_output).
      head: the XLNetForQuestionAnswering holding the network.
    Returns:
      :func:`best_answers`' outputs; offsets are code point indices into ``context`` (invalid
      UTF-8 bytes count as the U+FFFD each is replaced by, as every text signature does).
    """
    checks = [tf.debugging.assert_equal(tf.size(question), tf.size(context),
                                        message="question and context must hold the same number of strings")]
    with tf.control_dependencies(checks):
        context = tf.strings.unicode_transcode(context, "UTF-8", "UTF-8", errors="replace")
    pieces = context_pieces_graph(encoder.tokenizer, context, encoder.uncased)
    question_ids = encoder.tokenize(question)[:, :config.max_query_length]
    features = window_features(pieces, question_ids, config, encoder.special_ids)
    hidden = encode(features["input_ids"], features["segment_ids"], features["input_mask"])["sequence_output"]
    beam = head.outputs_from_hidden(hidden, features["p_mask"], training=False)
    return best_answers(beam, features, context, config.max_answer_length)
