"""In-graph text encoding for serving: normalisation, SentencePiece and XLNet's input layout.

Everything here is TensorFlow ops (plus tensorflow_text's SentencepieceTokenizer with the model
proto embedded), so a SavedModel built from it takes raw strings and needs no project code.

Layout (the one XLNet's own fine-tuning code uses)::

    [<pad> ... <pad>] + A + <sep> [+ B + <sep>] + <cls>

* Left padding: sequences are padded on the LEFT with ``<pad>`` up to ``max_length`` so that
  ``<cls>`` is always the last position (``[:, -1]``).
* ``segment_ids``: 0 for A and its ``<sep>``, 1 for B and its ``<sep>``, 2 for ``<cls>``, 0 for
  padding (padding is masked out of attention, so its segment never matters).
* ``input_mask``: 1 for real tokens, 0 for padding.
* Truncation always removes pieces from the END (right) of a text: a single text keeps its first
  ``max_length - 2`` pieces; a pair trims the longer of A and B from the right (B on ties) until
  both fit in ``max_length - 3`` pieces (tfrecords/pair_lengths.py, the rule records are built with).
* Long texts over ``max_segments`` segments (:meth:`XLNetTextEncoder.encode_segments`, for the
  Transformer-XL recurrence of ``XLNetNetwork.encode_segments``): the same layout over
  ``max_segments * max_length`` positions, left padded, then cut into ``max_segments`` consecutive
  segments of ``max_length``, in reading order. So the last segment ends as a single segment does
  (``... <sep> <cls>``, ``<cls>`` last), a text that fits one segment is encoded exactly as
  :meth:`~XLNetTextEncoder.encode` encodes it (its earlier segments all padding, input_mask 0), and
  a longer one fills the segments from the end: its start is left padded in the first segment it
  reaches, so its pieces stay contiguous across segments. ``max_segments=1`` is ``encode``.
* Which pieces are kept (:meth:`XLNetTextEncoder.kept_lengths`, the one truncation rule, also
  the count of truncated texts): a single text keeps its FIRST ``max_segments * max_length - 2``
  pieces (XLNet's run_classifier.py keeps the first pieces; with one segment this is that rule,
  and a document is read from its beginning). A pair keeps B in the last segment: the last
  segment's ``max_length - 3`` pieces are shared by B and the part of A the earlier segments do
  not hold by the pair rule above (trim the longer); A keeps its first pieces. With one segment
  this is exactly the pair rule; a pair is truncated only when its pieces and three symbols exceed
  ``max_segments * max_length``, or B alone exceeds ``max_length - 3``.
* ``<mask>``: SentencePiece treats ``<mask>`` as a control symbol and never produces it from text,
  so :meth:`XLNetTextEncoder.encode_masked` splits the normalised text on the literal ``<mask>``
  and inserts the mask id between the encoded pieces. Each ``<mask>`` stands for exactly one
  piece; the text after it starts a new word, except punctuation glued to it (``<mask>.``).
"""
from __future__ import annotations

from typing import Mapping

import tensorflow as tf
import tensorflow_text as tf_text

from tfrecords.pair_lengths import pair_lengths
from tfrecords.schema import SEG_A, SEG_B, SEG_CLS
from tfrecords.text_normalization import normalize_text_graph

MASK_LITERAL = "<mask>"
REQUIRED_SPECIAL_SYMBOLS = ("sep", "cls", "pad", "mask")


def _keep_first(ids: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
    """Keeps the first ``lengths[i]`` pieces of row i (truncation from the right)."""
    positions = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, positions < tf.expand_dims(tf.cast(lengths, tf.int64), 1))


def _column(batch_size: tf.Tensor, value: int) -> tf.RaggedTensor:
    """A [batch, 1] ragged column holding ``value``."""
    return tf.RaggedTensor.from_tensor(tf.fill([batch_size, 1], tf.constant(value, tf.int32)),
                                       row_splits_dtype=tf.int64)


class XLNetTextEncoder(tf.Module):
    """Raw strings -> XLNet model inputs, entirely in the graph.

    Outputs are dicts of int32 tensors [batch, max_length]: ``input_ids``, ``segment_ids``,
    ``input_mask`` (1 = real token, 0 = left padding), laid out as the module docstring says.
    """

    def __init__(self, sp_model_proto: bytes, special_ids: Mapping[str, int], max_length: int,
                 uncased: bool, name: str | None = None):
        super().__init__(name=name)
        missing = [symbol for symbol in REQUIRED_SPECIAL_SYMBOLS if symbol not in special_ids]
        if missing:
            raise ValueError(f"special ids lack {', '.join(missing)}: need {', '.join(REQUIRED_SPECIAL_SYMBOLS)}")
        if max_length < 3:
            raise ValueError(f"max_length must be at least 3 (<sep>, <sep>, <cls>), got {max_length}")
        self.max_length = int(max_length)
        self.uncased = bool(uncased)
        self.special_ids = {name: int(value) for name, value in special_ids.items()}
        self.sp_model_proto = sp_model_proto
        self.tokenizer = tf_text.SentencepieceTokenizer(model=sp_model_proto, out_type=tf.int32)

    def copy(self) -> "XLNetTextEncoder":
        """A new encoder with the same vocabulary and settings, and a SentencePiece resource of its own.

        tf.random.set_seed (and so keras.utils.set_random_seed) clears TensorFlow's eager kernel
        caches, which own the SentencePiece resource of an encoder that has already run; a copy
        made afterwards has a live one.
        """
        return XLNetTextEncoder(self.sp_model_proto, self.special_ids, self.max_length, self.uncased)

    def normalize(self, texts: tf.Tensor) -> tf.Tensor:
        """Normalises a [batch] string tensor exactly as preprocessing does."""
        return normalize_text_graph(texts, self.uncased)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Normalised SentencePiece ids of a [batch] string tensor: RaggedTensor [batch, (pieces)]."""
        return self.tokenizer.tokenize(self.normalize(texts))

    def id_to_piece(self, ids: tf.Tensor) -> tf.Tensor:
        """SentencePiece pieces (tf.string) for int32 ids of any shape."""
        return self.tokenizer.id_to_string(ids)

    def encode(self, texts_a: tf.Tensor, texts_b: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        """Encodes a batch of texts (or of A/B pairs) into left-padded XLNet inputs.

        Args:
          texts_a: tf.string [batch].
          texts_b: optional tf.string [batch], the second segment of each example.
        Returns:
          dict of int32 [batch, max_length]: input_ids, segment_ids, input_mask.
        """
        return self._layout(texts_a, texts_b, 1)

    def encode_segments(self, texts_a: tf.Tensor, texts_b: tf.Tensor | None = None,
                        max_segments: int = 1) -> dict[str, tf.Tensor]:
        """Encodes texts (or A/B pairs) up to ``max_segments`` segments long, for the recurrence.

        Laid out as the module docstring says ("Long texts"): consecutive segments in reading
        order, the last one ending ``<sep> <cls>``; segments a short text does not reach are all
        padding (input_mask 0, so the network's memory mask hides them).

        Returns:
          dict of int32 [batch, max_segments, max_length]: input_ids, segment_ids, input_mask.
          ``encode_segments(a, b, 1)[name][:, 0]`` is ``encode(a, b)[name]``.
        """
        if max_segments < 1:
            raise ValueError(f"max_segments must be at least 1, got {max_segments}")
        flat = self._layout(texts_a, texts_b, max_segments)
        return {name: tf.reshape(value, [-1, max_segments, self.max_length]) for name, value in flat.items()}

    def kept_lengths(self, len_a: tf.Tensor, len_b: tf.Tensor | None = None,
                     max_segments: int = 1) -> tuple[tf.Tensor, tf.Tensor | None]:
        """The truncation rule: the pieces kept of texts of ``len_a`` (and B of ``len_b``) pieces,
        integer tensors [batch], read in ``max_segments`` segments: (kept A, kept B or None).

        A text is truncated exactly when a kept length is below its length.
        """
        if len_b is None:
            return tf.minimum(len_a, max_segments * self.max_length - 2), None
        # A's pieces beyond the earlier segments share the last segment with B by the pair rule.
        overflow = tf.maximum(len_a - (max_segments - 1) * self.max_length, 0)
        last_a, kept_b = pair_lengths(overflow, len_b, self.max_length - 3)
        return len_a - overflow + last_a, kept_b

    def _layout(self, texts_a: tf.Tensor, texts_b: tf.Tensor | None, max_segments: int) -> dict[str, tf.Tensor]:
        """The layout over ``max_segments * max_length`` positions, [batch, max_segments * max_length]."""
        ids_a = self.tokenize(texts_a)
        batch_size = ids_a.nrows(out_type=tf.int32)
        sep = _column(batch_size, self.special_ids["sep"])
        if texts_b is None:
            len_a, _ = self.kept_lengths(ids_a.row_lengths(), None, max_segments)
            pieces = [_keep_first(ids_a, len_a), sep]
            segments = [SEG_A, SEG_A]
        else:
            ids_b = self.tokenize(texts_b)
            len_a, len_b = self.kept_lengths(ids_a.row_lengths(), ids_b.row_lengths(), max_segments)
            pieces = [_keep_first(ids_a, len_a), sep, _keep_first(ids_b, len_b), sep]
            segments = [SEG_A, SEG_A, SEG_B, SEG_B]
        return self._finish(pieces, segments, batch_size, max_segments * self.max_length)

    def encode_masked(self, texts: tf.Tensor) -> dict[str, tf.Tensor]:
        """Encodes texts containing literal ``<mask>`` markers, each becoming one ``<mask>`` id.

        Texts longer than ``max_length - 2`` pieces keep their first pieces; masks that fall
        beyond are dropped (``num_masks`` counts the masks kept).

        Returns:
          dict with int32 [batch, max_length] input_ids, segment_ids, input_mask, is_masked
          (1 where the position holds a ``<mask>``) and int32 [batch] num_masks.
        """
        parts = tf.strings.split(self.normalize(texts), sep=MASK_LITERAL)
        part_ids = self.tokenizer.tokenize(parts.flat_values)
        parts_per_text = parts.row_lengths()
        index_in_text = tf.ragged.range(parts_per_text).flat_values
        part_ids = self._glue_to_previous_mask(part_ids, parts.flat_values, index_in_text > 0)
        # Every part but the last of its text is followed by one <mask>.
        followed_by_mask = tf.cast(index_in_text < tf.gather(parts_per_text, parts.value_rowids()) - 1, tf.int64)
        masks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(followed_by_mask)], tf.constant(self.special_ids["mask"], tf.int32)),
            followed_by_mask)
        part_ids = tf.concat([part_ids, masks], axis=1)
        ids = tf.RaggedTensor.from_row_lengths(part_ids, parts_per_text).merge_dims(1, 2)
        batch_size = ids.nrows(out_type=tf.int32)
        ids = _keep_first(ids, tf.fill([batch_size], self.max_length - 2))
        encoded = self._finish([ids, _column(batch_size, self.special_ids["sep"])], [SEG_A, SEG_A], batch_size)
        is_masked = tf.cast(tf.equal(encoded["input_ids"], self.special_ids["mask"]), tf.int32)
        encoded["is_masked"] = is_masked
        encoded["num_masks"] = tf.reduce_sum(is_masked, axis=1)
        return encoded

    def _glue_to_previous_mask(self, part_ids: tf.RaggedTensor, parts: tf.Tensor,
                               after_mask: tf.Tensor) -> tf.RaggedTensor:
        """Drops the bare word-boundary piece SentencePiece puts before a part glued to a mask.

        SentencePiece encodes every part as if it started a word, so ``"is <mask>."`` would get a
        spurious "▁" before the ".". A part that follows a mask without a space keeps no such
        bare boundary piece (a boundary merged into a longer piece is kept).
        """
        boundary_id = self.tokenizer.string_to_id(tf.constant("\u2581"))
        glued = after_mask & ~tf.strings.regex_full_match(parts, " .*|")
        # shape [batch, 1] also when no text has a piece outside its masks ("", "<mask>", no text)
        first_is_boundary = tf.equal(part_ids[:, :1].to_tensor(default_value=-1, shape=[None, 1])[:, 0], boundary_id)
        drop_first = tf.expand_dims(glued & first_is_boundary & (boundary_id != self.special_ids.get("unk", 0)), 1)
        is_first = tf.equal(tf.ragged.range(part_ids.row_lengths()), 0)
        return tf.ragged.boolean_mask(part_ids, ~(is_first & drop_first))

    def _finish(self, pieces: list[tf.RaggedTensor], segments: list[int], batch_size: tf.Tensor,
                length: int | None = None) -> dict[str, tf.Tensor]:
        """Appends <cls>, builds segment ids and left-pads everything to ``length`` (default max_length)."""
        length = self.max_length if length is None else length
        pieces = pieces + [_column(batch_size, self.special_ids["cls"])]
        segments = segments + [SEG_CLS]
        ids = tf.concat(pieces, axis=1)
        segment_ids = tf.concat([tf.ones_like(p) * s for p, s in zip(pieces, segments)], axis=1)
        pad_lengths = length - ids.row_lengths()

        def left_pad(values: tf.RaggedTensor, pad_value: int) -> tf.Tensor:
            pads = tf.RaggedTensor.from_row_lengths(
                tf.fill([tf.reduce_sum(pad_lengths)], tf.constant(pad_value, tf.int32)), pad_lengths)
            return tf.concat([pads, values], axis=1).to_tensor(shape=[None, length])

        return {
            "input_ids": left_pad(ids, self.special_ids["pad"]),
            "segment_ids": left_pad(segment_ids, SEG_A),
            "input_mask": left_pad(tf.ones_like(ids), 0),
        }


# The multiple-choice text rule, in Python (training inputs) and in the graph (the choose signature).
def question_with_option(question: str, option: str) -> str:
    """XLNet's run_race.py: a cloze question gets the option in its blank(s) ``_``, else the
    option is appended after a space. :func:`question_with_option_graph` is the same in-graph."""
    if "_" in question:
        return question.replace("_", option)
    return f"{question} {option}" if question else option


def question_with_option_graph(questions: tf.Tensor, options: tf.Tensor) -> tf.Tensor:
    """:func:`question_with_option` on tf.string tensors of one shape (for serving)."""
    # A RE2 rewrite string treats backslashes as escapes: double them so an option is taken literally.
    literal = tf.strings.regex_replace(options, r"\\", r"\\\\")
    filled = tf.map_fn(lambda pair: tf.strings.regex_replace(pair[0], "_", pair[1]),
                       (tf.reshape(questions, [-1]), tf.reshape(literal, [-1])), fn_output_signature=tf.string)
    filled = tf.reshape(filled, tf.shape(questions))
    appended = tf.where(tf.equal(questions, ""), options, tf.strings.join([questions, options], separator=" "))
    return tf.where(tf.strings.regex_full_match(questions, "(?s).*_.*"), filled, appended)
