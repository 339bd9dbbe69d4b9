"""Serving SavedModel: a trained XLNet plus in-graph tokenisation, with four signatures.

Layout written by :func:`export_saved_model` (TF Serving's numbered versions)::

    OUTPUT/<version>/saved_model.pb, variables/, assets/{spiece.model, model_config.json, export_config.json}

(a version appears whole or not at all: trainer/serving/publishing.py stages and publishes it).

Signatures (every sequence is left-padded with ``<cls>`` last, see trainer/serving/text_encoder.py for
the layout):

* ``serving_default`` = ``encode``: ``input_ids``, ``segment_ids``, ``input_mask`` int32
  [batch, length], any length from 1 to ``max_length`` -> ``sequence_output`` float32
  [batch, length, d_model] (content stream) and ``pooled_output`` float32 [batch, d_model] (the
  state of the last position, ``<cls>``). A shorter request is cheaper: it runs at the smallest of
  :func:`length_buckets` that holds it, and its outputs equal those of the request left-padded to
  ``max_length`` (padding is masked out as a key and relative distances ignore it).
* ``encode_text``: ``text`` string [batch] -> the same outputs at length ``max_length`` plus the
  ``input_ids``, ``segment_ids`` and ``input_mask`` the text was encoded to.
* ``encode_text_pair``: ``text`` and ``text_b`` string [batch] (segments A and B) -> the same.
* ``predict_masked``: ``text`` string [batch] with literal ``<mask>`` markers -> for each mask
  (P = most masks in any text of the batch) ``top_k_ids`` int32 [batch, P, k], ``top_k_tokens``
  string [batch, P, k], ``top_k_probabilities`` float32 [batch, P, k], ``mask_positions`` int32
  [batch, P], and ``num_masks`` int32 [batch]. Rows beyond a text's own masks are padding:
  id -1, token "", probability 0, position -1. A batch without any mask gives P = 0.

A fine-tuned model directory (`xlnet finetune`) adds its task's signatures. Texts are encoded as
in training; the ``*_ids`` variants take ids like ``encode`` (any length up to ``max_length``):

* classification: ``classify``: ``text`` [+ ``text_b`` when trained on pairs] string [batch] ->
  ``probabilities`` float32 [batch, labels], ``label_ids`` int32 [batch], ``label_names``
  string [batch]; ``classify_ids``: ``input_ids``, ``segment_ids``, ``input_mask`` -> the same.
* regression: ``regress`` (same inputs) and ``regress_ids`` -> ``score`` float32 [batch].
* multiple choice: ``choose``: ``context`` [batch], ``question`` [batch], ``options`` string
  [batch, options] -> ``probabilities`` float32 [batch, options] and ``choice`` int32 [batch];
  ``choose_ids``: ids [batch, options, length] -> the same.
* extractive QA (squad): ``answer``: ``question``, ``context`` string [batch] -> ``answer`` string,
  ``char_start``, ``char_end`` int32 (code points of the original context), ``score``,
  ``no_answer_probability`` float32 [batch]; windows, spans and decoding in the graph
  (trainer/serving/answer_signature.py).

The masked prediction is XLNet's permutation-LM inference: every mask is a target of the query
stream, and the permutation mask lets every position see every non-mask token but no mask
(so masks see neither each other nor themselves), which is what training does for targets.

A multi-segment export (``ExportConfig.max_segments`` N > 1: a model fine-tuned with N segments,
or ``xlnet export --max-segments N``) reads texts up to N segments of ``max_length`` with the
Transformer-XL recurrence (trainer/serving/segment_reading.py): the text signatures return ids
[batch, N, max_length] and ``sequence_output`` [batch, N, max_length, d_model]; ``encode`` and the
``*_ids`` variants take [batch, segments, max_length] (segments 1..N); the task heads read the
last segment's ``<cls>``. ``predict_masked`` reads one segment; ``answer`` is refused (windows).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import posixpath
from typing import Any

import tensorflow as tf

from tfrecords.errors import UsageError
from tfrecords.schema import SEG_A
from trainer.models.question_answering import XLNetForQuestionAnswering
from trainer.models.sequence_model import XLNetForSequenceTask
from trainer.runtime.model_dir import ModelDirectory
from trainer.runtime.restore import checkpoint_to_read, open_model_directory, restore_model
from trainer.runtime.storage import check_output_directory, failures_named, write_bytes, write_json
from trainer.serving.answer_signature import SquadServingConfig, answer
from trainer.serving.export_config import ExportConfig, ExportError  # noqa: F401  (ExportError: raised here)
from trainer.serving.publishing import next_version, publish_version
from trainer.serving.segment_reading import check_recurrent, read_segments
from trainer.serving.text_encoder import XLNetTextEncoder, question_with_option_graph
from trainer.serving.text_generation_signatures import SIGNATURES as TEXT_GENERATION_SIGNATURES
from trainer.serving.text_generation_signatures import TextGenerationSignatures, default_generation_mem_len

EXPORT_FORMAT_VERSION = 1
SIGNATURES = ("serving_default", "encode", "encode_text", "encode_text_pair", "predict_masked",
              *TEXT_GENERATION_SIGNATURES)
TASK_SIGNATURES = {"classification": ("classify", "classify_ids"), "regression": ("regress", "regress_ids"),
                   "multiple-choice": ("choose", "choose_ids"), "squad": ("answer",)}
SMALLEST_LENGTH_BUCKET = 16


def default_max_length(directory: ModelDirectory) -> int:
    """The sequence length to export at when --max-length is not given: what a fine-tuned model
    was trained at, else ExportConfig's default."""
    finetuned = directory.finetune_config
    return finetuned.max_seq_length if finetuned is not None else ExportConfig.max_length


def default_max_segments(directory: ModelDirectory) -> int:
    """The segments a text may span when --max-segments is not given: what a fine-tuned model was
    trained with, else 1."""
    finetuned = directory.finetune_config
    return finetuned.max_segments if finetuned is not None else 1


def resolve_export_config(directory: ModelDirectory, max_length: int | None = None, top_k: int = ExportConfig.top_k,
                          uncased: bool = False, max_segments: int | None = None,
                          mem_len: int | None = None) -> ExportConfig:
    """The ExportConfig of ``directory`` with the flags given (None: the directory's default).

    max_length: a fine-tuned model's max_seq_length, else 128. max_segments: a fine-tuned model's,
    else 1. mem_len, read only with more than one segment: the model's own (model_config.json: what
    a model fine-tuned with several segments was trained with, a pretrained model's memory); a
    model without memory (fine-tuned on one segment) needs --mem-len.
    """
    max_length = max_length or default_max_length(directory)
    max_segments = default_max_segments(directory) if max_segments is None else max_segments
    if mem_len is None and max_segments > 1:
        mem_len = directory.model_config.mem_len
        if mem_len == 0:
            raise ExportError(f"--max-segments {max_segments} reads a text with memory, but the model of "
                              f"{directory.path!r} has mem_len 0 (fine-tuned on one segment): pass --mem-len M "
                              f"(e.g. {max_length}, one whole segment)")
    return ExportConfig(max_length=max_length, top_k=top_k, uncased=uncased, max_segments=max_segments,
                        mem_len=mem_len or 0)


def squad_serving_config(directory: ModelDirectory, max_length: int) -> SquadServingConfig:
    """The ``answer`` signature's settings: the fine-tuned ones, with windows of the export's max_length."""
    finetuned = directory.finetune_config
    config = SquadServingConfig(max_length=max_length, doc_stride=finetuned.doc_stride,
                                max_query_length=finetuned.max_query_length,
                                max_answer_length=finetuned.max_answer_length,
                                start_n_top=finetuned.start_n_top, end_n_top=finetuned.end_n_top)
    problems = config.problems()
    if problems:
        raise ExportError(f"cannot export the answer signature of {directory.path!r}: {'; '.join(problems)}")
    return config


def signature_names(task: str | None) -> tuple[str, ...]:
    """The signatures of an export: the encoder's, plus the task's for a fine-tuned model."""
    return SIGNATURES + (TASK_SIGNATURES[task] if task else ())


def length_buckets(max_length: int) -> tuple[int, ...]:
    """The static lengths ``encode`` runs the network at: powers of two from
    SMALLEST_LENGTH_BUCKET below ``max_length``, then ``max_length`` (e.g. 16, 32, 64, 100).

    The network's attention is built for a static length, so each bucket is one traced copy of
    it: doubling keeps that to about log2(max_length) copies while a request pays for at most
    twice its own length (or 16 positions, below which the fixed cost per call dominates).
    """
    buckets = []
    bucket = SMALLEST_LENGTH_BUCKET
    while bucket < max_length:
        buckets.append(bucket)
        bucket *= 2
    return (*buckets, max_length)


class XLNetServingModule(tf.Module):
    """The exported object: network weights, tokenizer and the signature functions.

    Args:
      network: an XLNet network (trainer.models.network) with its weights.
      encoder: in-graph text encoder with the vocabulary of ``network``.
      top_k: candidates returned per mask by ``predict_masked``.
      assets: file paths to ship under assets/ (tracked so SavedModel copies them).
      head: the fine-tuned model around ``network`` (trainer/models/sequence_model.py), or None.
      labels: the classification labels of ``head`` (index = class id).
      text_pair: ``head`` was trained on text pairs (its text signatures take ``text_b``).
      squad: the ``answer`` signature's settings, required when ``head`` is a
        XLNetForQuestionAnswering.
      max_segments: segments of ``encoder.max_length`` a text may span. Above 1, every signature
        but ``predict_masked`` reads [batch, segments, length] inputs with the Transformer-XL
        recurrence (trainer/serving/segment_reading.py; ``network`` must have a memory); 1 is
        the single-segment export.
    """

    def __init__(self, network, encoder: XLNetTextEncoder, top_k: int, assets: dict[str, str] | None = None,
                 head: XLNetForSequenceTask | XLNetForQuestionAnswering | None = None,
                 labels: tuple[str, ...] | None = None, text_pair: bool = False,
                 squad: SquadServingConfig | None = None, max_segments: int = 1, generation_mem_len: int = 0):
        super().__init__(name="xlnet_serving")
        # The Keras models are kept out of the object graph (Keras would add its own default
        # serving signature, which cannot call a multi-input network); their variables are
        # tracked directly, which is all the signature functions capture.
        object.__setattr__(self, "network", network)
        object.__setattr__(self, "head", head)
        self.network_variables = [variable.value for variable in (head or network).weights]
        self.task = "squad" if isinstance(head, XLNetForQuestionAnswering) else getattr(head, "task", None)
        self.text_pair = bool(text_pair)
        if labels is not None:
            self.label_names = tf.constant(list(labels))
        self.encoder = encoder
        self.top_k = int(top_k)
        self.vocab_size = int(network.config.vocab_size)
        self.assets = {name: tf.saved_model.Asset(path) for name, path in (assets or {}).items()}
        self.length_buckets = length_buckets(encoder.max_length)
        self.max_segments = int(max_segments)
        if self.max_segments > 1:
            check_recurrent(network)
            if self.task == "squad":
                raise ValueError("the answer signature reads a context in windows, not segments: max_segments 1")
            # [batch, segments, max_length]: every segment at the length the recurrence was read at
            ids_spec = tf.TensorSpec([None, None, encoder.max_length], tf.int32)
        else:
            ids_spec = tf.TensorSpec([None, None], tf.int32)  # [batch, length], length <= max_length
        text_spec = tf.TensorSpec([None], tf.string)
        self.encode = tf.function(self._encode, input_signature=[ids_spec, ids_spec, ids_spec])
        self.encode_text = tf.function(self._encode_text, input_signature=[text_spec])
        self.encode_text_pair = tf.function(self._encode_text_pair, input_signature=[text_spec, text_spec])
        self.predict_masked = tf.function(self._predict_masked, input_signature=[text_spec])
        generation_mem_len = generation_mem_len or default_generation_mem_len(network.config.mem_len,
                                                                              encoder.max_length)
        self.text_generation = TextGenerationSignatures(network, encoder, generation_mem_len)
        if self.task == "multiple-choice":
            # [batch, options, length], or [batch, options, segments, max_length]
            choice_ids_spec = tf.TensorSpec([None, *ids_spec.shape], tf.int32)
            self.choose = tf.function(self._choose, input_signature=[text_spec, text_spec,
                                                                     tf.TensorSpec([None, None], tf.string)])
            self.choose_ids = tf.function(self._choose_ids, input_signature=[choice_ids_spec] * 3)
        elif self.task == "squad":
            if squad is None:
                raise ValueError("a XLNetForQuestionAnswering head needs its SquadServingConfig (squad=)")
            self.squad = squad
            self.answer = tf.function(self._answer, input_signature=[text_spec, text_spec])
        elif self.task is not None:
            texts = [text_spec, text_spec] if self.text_pair else [text_spec]
            self.predict_text = tf.function(self._predict_text, input_signature=texts)
            self.predict_ids = tf.function(self._predict_ids, input_signature=[ids_spec, ids_spec, ids_spec])

    def signatures(self) -> dict[str, Any]:
        """Signature name -> tf.function with its input signature, for tf.saved_model.save.

        Not concrete functions: tf.saved_model.save traces inside its save context, whose trace
        cache key differs from an eager one, so each function traced before the save would be
        traced twice (half of an export's time)."""
        functions = {"serving_default": self.encode, "encode": self.encode, "encode_text": self.encode_text,
                     "encode_text_pair": self.encode_text_pair, "predict_masked": self.predict_masked,
                     **self.text_generation.signatures()}
        if self.task == "multiple-choice":
            functions.update(choose=self.choose, choose_ids=self.choose_ids)
        elif self.task == "squad":
            functions.update(answer=self.answer)
        elif self.task is not None:
            text_name, ids_name = TASK_SIGNATURES[self.task]
            functions.update({text_name: self.predict_text, ids_name: self.predict_ids})
        return functions

    def _encode(self, input_ids, segment_ids, input_mask) -> dict[str, tf.Tensor]:
        """int32 [batch, length] ids, left-padded with <cls> last, 1 <= length <= max_length ->
        sequence_output float32 [batch, length, d_model], pooled_output float32 [batch, d_model].
        Several segments: [batch, segments, max_length] ids, 1 <= segments <= max_segments ->
        sequence_output [batch, segments, max_length, d_model] (:meth:`_read_segments`)."""
        if self.max_segments > 1:
            with tf.control_dependencies(self._id_checks(input_ids, segment_ids, input_mask)):
                return self._read_segments(tf.identity(input_ids), segment_ids, input_mask)
        # The network is traced for static lengths only: one branch per bucket, and the request
        # runs in the smallest that holds it (its index = the number of buckets shorter than it).
        branches = [functools.partial(self._features_at, bucket, input_ids, segment_ids, input_mask)
                    for bucket in self.length_buckets]
        shorter = tf.constant(self.length_buckets[:-1], tf.int32)  # int32 also when empty (one bucket)
        with tf.control_dependencies(self._id_checks(input_ids, segment_ids, input_mask)):
            index = tf.reduce_sum(tf.cast(shorter < tf.shape(input_ids)[1], tf.int32))
            return tf.switch_case(index, branches)

    def _id_checks(self, input_ids, segment_ids, input_mask) -> list[tf.Operation]:
        """Assertions on the inputs of ``encode`` ([batch, length], or [batch, segments, max_length]
        with several segments), each error naming its tensor."""
        size = tf.shape(input_ids)[1]
        if self.max_segments > 1:
            checks = [tf.debugging.assert_positive(size, message="input_ids must have at least one segment"),
                      tf.debugging.assert_less_equal(size, self.max_segments,
                                                     message=f"input_ids must have at most max_segments="
                                                             f"{self.max_segments} segments (the last one ends <cls>)")]
        else:
            max_length = self.encoder.max_length
            checks = [tf.debugging.assert_positive(size, message="input_ids must have at least one position (<cls>)"),
                      tf.debugging.assert_less_equal(size, max_length,
                                                     message=f"input_ids must have at most max_length={max_length} "
                                                             "positions (left-padded, <cls> last)")]
        checks += [tf.debugging.assert_equal(tf.shape(input_ids), tf.shape(tensor),
                                             message=f"{name} must have the shape of input_ids")
                   for name, tensor in (("segment_ids", segment_ids), ("input_mask", input_mask))]
        checks += [tf.debugging.assert_non_negative(input_ids, message="input_ids must be >= 0"),
                   tf.debugging.assert_less(input_ids, self.vocab_size,
                                            message=f"input_ids must be < vocab_size {self.vocab_size}")]
        return checks

    def _read_segments(self, input_ids, segment_ids, input_mask) -> dict[str, tf.Tensor]:
        """The recurrence on int32 [batch, segments, max_length] inputs -> sequence_output float32
        [batch, segments, max_length, d_model] (0 at padding) and pooled_output [batch, d_model]
        (the last segment's <cls>)."""
        hidden = read_segments(self.network, input_ids, segment_ids, input_mask)
        return {"sequence_output": hidden, "pooled_output": hidden[:, -1, -1]}

    def _text_features(self, texts_a, texts_b=None) -> dict[str, tf.Tensor]:
        """Raw strings (and second texts) -> the features and the ids they were encoded to: one
        segment ([batch, max_length]) or up to max_segments ([batch, max_segments, max_length])."""
        if self.max_segments > 1:
            inputs = self.encoder.encode_segments(texts_a, texts_b, max_segments=self.max_segments)
            return {**self._read_segments(**inputs), **inputs}
        inputs = self.encoder.encode(texts_a, texts_b)
        return {**self._features(**inputs), **inputs}

    def _last_segment(self, sequence_output: tf.Tensor) -> tf.Tensor:
        """The states a task head reads, [batch, max_length, d_model] with <cls> last, of a
        ``sequence_output``: the last segment's when there are several."""
        return sequence_output[:, -1] if self.max_segments > 1 else sequence_output

    def _features_at(self, bucket: int, input_ids, segment_ids, input_mask) -> dict[str, tf.Tensor]:
        """Runs [batch, length] inputs at the static length ``bucket`` >= length: left-pads them with
        masked padding, then keeps the outputs of their own positions (see ``_encode``)."""
        extra = bucket - tf.shape(input_ids)[1]
        padded = [tf.ensure_shape(tf.pad(tensor, [[0, 0], [extra, 0]], constant_values=value), [None, bucket])
                  for tensor, value in ((input_ids, self.encoder.special_ids["pad"]), (segment_ids, SEG_A),
                                        (input_mask, 0))]
        outputs = self._features(*padded)
        return {"sequence_output": outputs["sequence_output"][:, extra:], "pooled_output": outputs["pooled_output"]}

    def _features(self, input_ids, segment_ids, input_mask) -> dict[str, tf.Tensor]:
        """The network on int32 [batch, L] inputs of static length L -> sequence_output float32
        [batch, L, d_model] and pooled_output float32 [batch, d_model] (the last position, <cls>)."""
        hidden, _ = self.network.encode(input_ids, segment_ids, input_mask=input_mask, training=False)
        hidden = tf.cast(hidden, tf.float32)
        return {"sequence_output": hidden, "pooled_output": hidden[:, -1]}

    def _encode_text(self, text) -> dict[str, tf.Tensor]:
        """Raw strings [batch] -> encode outputs plus the ids the text became."""
        return self._text_features(text)

    def _encode_text_pair(self, text, text_b) -> dict[str, tf.Tensor]:
        """Raw string pairs (A = text, B = text_b), each [batch] -> encode outputs plus the ids."""
        checks = [tf.debugging.assert_equal(tf.size(text), tf.size(text_b),
                                            message="text and text_b must hold the same number of strings")]
        with tf.control_dependencies(checks):
            return self._text_features(tf.identity(text), text_b)

    def _predict_masked(self, text) -> dict[str, tf.Tensor]:
        """Raw strings with ``<mask>`` [batch] -> top-k pieces and probabilities for every mask."""
        inputs = self.encoder.encode_masked(text)
        is_masked = inputs["is_masked"]
        most = tf.reduce_max(tf.concat([inputs["num_masks"], [0]], axis=0))
        # The network always gets at least one (possibly padding) target row, so a batch
        # without masks runs the same graph and its outputs are sliced to P = 0.
        positions = mask_positions(is_masked, rows=tf.maximum(most, 1))
        valid = positions >= 0
        # perm_mask [B, 1, L] broadcasts over queries: no position may see any mask.
        logits, _ = self.network(inputs["input_ids"], inputs["segment_ids"], perm_mask=(is_masked > 0)[:, None, :],
                                 input_mask=inputs["input_mask"], target_positions=tf.maximum(positions, 0),
                                 target_valid=tf.cast(valid, tf.float32), training=False)
        probabilities, ids = tf.math.top_k(tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1), k=self.top_k)
        keep = valid[:, :, None]
        result = {
            "top_k_ids": tf.where(keep, ids, -1),
            "top_k_tokens": tf.where(keep, self.encoder.id_to_piece(ids), ""),
            "top_k_probabilities": tf.where(keep, probabilities, 0.0),
            "mask_positions": positions,
        }
        result = {name: value[:, :most] for name, value in result.items()}
        result["num_masks"] = inputs["num_masks"]
        return result


    # ------------------------------------------------------------------ fine-tuned tasks
    def _task_outputs(self, hidden) -> dict[str, tf.Tensor]:
        """Content-stream states [batch, length, d_model] (<cls> last) -> the task's outputs."""
        logits = self.head.logits_from_hidden(hidden, training=False)
        if self.task == "regression":
            return {"score": logits[:, 0]}
        probabilities = tf.nn.softmax(logits, axis=-1)
        label_ids = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"probabilities": probabilities, "label_ids": label_ids,
                "label_names": tf.gather(self.label_names, label_ids)}

    def _predict_text(self, text, text_b=None) -> dict[str, tf.Tensor]:
        """Raw strings [batch] (and their second texts) -> ``classify`` / ``regress`` outputs."""
        # Calling the encoder's tf.functions (not their Python bodies) reuses their traced graphs.
        features = self.encode_text(text) if text_b is None else self.encode_text_pair(text, text_b)
        return self._task_outputs(self._last_segment(features["sequence_output"]))

    def _predict_ids(self, input_ids, segment_ids, input_mask) -> dict[str, tf.Tensor]:
        """Ids as ``encode`` takes them -> ``classify_ids`` / ``regress_ids`` outputs."""
        features = self.encode(input_ids, segment_ids, input_mask)
        return self._task_outputs(self._last_segment(features["sequence_output"]))

    def _choice_outputs(self, hidden, batch_size, num_options) -> dict[str, tf.Tensor]:
        """States of every (example, option) row -> probabilities [batch, options] and the choice."""
        logits = tf.reshape(self.head.logits_from_hidden(hidden, training=False), [batch_size, num_options])
        probabilities = tf.nn.softmax(logits, axis=-1)
        return {"probabilities": probabilities, "choice": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}

    def _choose(self, context, question, options) -> dict[str, tf.Tensor]:
        """context, question [batch] and options [batch, options] strings -> ``choose`` outputs.
        Each option becomes ``context <sep> question-with-option <sep> <cls>`` as in training."""
        checks = [tf.debugging.assert_equal(tf.size(context), tf.shape(options)[0],
                                            message="options must have one row per context"),
                  tf.debugging.assert_equal(tf.size(question), tf.size(context),
                                            message="question and context must hold the same number of strings")]
        with tf.control_dependencies(checks):
            batch_size, num_options = tf.shape(options)[0], tf.shape(options)[1]
        repeated = tf.repeat(tf.reshape(question, [-1, 1]), num_options, axis=1)
        qas = question_with_option_graph(repeated, options)
        contexts = tf.repeat(context, num_options)
        hidden = self._text_features(contexts, tf.reshape(qas, [-1]))["sequence_output"]
        return self._choice_outputs(self._last_segment(hidden), batch_size, num_options)

    def _choose_ids(self, input_ids, segment_ids, input_mask) -> dict[str, tf.Tensor]:
        """ids [batch, options, length] (or [batch, options, segments, max_length]) as ``encode``
        takes them per option -> ``choose`` outputs."""
        shape = tf.shape(input_ids)
        flat = [tf.reshape(tensor, tf.concat([[-1], shape[2:]], axis=0)) for tensor in
                (input_ids, segment_ids, input_mask)]
        hidden = self.encode(*flat)["sequence_output"]
        return self._choice_outputs(self._last_segment(hidden), shape[0], shape[1])

    def _answer(self, question, context) -> dict[str, tf.Tensor]:
        """question, context string [batch] -> ``answer`` string, ``char_start``, ``char_end`` int32,
        ``score``, ``no_answer_probability`` float32 [batch] (trainer/serving/answer_signature.py)."""
        return answer(question, context, encoder=self.encoder, encode=self.encode, head=self.head, config=self.squad)


def mask_positions(is_masked: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
    """[batch, length] 0/1 mask flags -> int32 [batch, rows] positions of the masks, -1 padded."""
    batch_size = tf.shape(is_masked)[0]
    found = tf.where(is_masked > 0)  # [total masks, 2] (row, position), row-major
    positions = tf.RaggedTensor.from_value_rowids(tf.cast(found[:, 1], tf.int32), found[:, 0],
                                                  nrows=tf.cast(batch_size, tf.int64))
    return positions.to_tensor(default_value=-1, shape=tf.stack([batch_size, rows]))


def export_saved_model(model_dir: str | os.PathLike | ModelDirectory, output: str | os.PathLike, config: ExportConfig,
                       version: int | None = None, checkpoint: str | None = None) -> str:
    """Exports ``model_dir``'s checkpoint as ``output/<version>/`` and returns that directory.

    Both paths may be local or gs://. ``version`` defaults to one more than the highest existing
    numbered version (1 for a new output); an existing version is never overwritten. A half-written
    SavedModel never appears under a version number (trainer/serving/publishing.py).
    """
    directory = open_model_directory(model_dir)
    checkpoint = checkpoint_to_read(directory, checkpoint)
    output = os.fspath(output).rstrip("/")
    check_output_directory(output)  # a file, unreachable: said before the model is restored
    with failures_named(output, "read", "--output"):
        version = next_version(output) if version is None else int(version)
        target_exists = version >= 1 and tf.io.gfile.exists(posixpath.join(output, str(version)))
    if version < 1:
        raise ExportError(f"--version must be a positive integer, got {version}")
    if target_exists:
        raise ExportError(f"--output {output!r} already holds version {version}; pick another --version")
    model_config = directory.model_config
    if config.top_k > model_config.vocab_size:
        raise ExportError(f"--top-k {config.top_k} exceeds the vocabulary size {model_config.vocab_size}")
    finetuned = directory.finetune_config
    squad = squad_serving_config(directory, config.max_length) if finetuned and finetuned.task == "squad" else None
    if squad is not None and config.max_segments > 1:
        raise ExportError(f"--max-segments {config.max_segments}: a SQuAD model reads its contexts in windows "
                          "(doc_stride), not segments; export it with --max-segments 1")
    restored = restore_model(directory, checkpoint, mem_len=config.mem_len if config.max_segments > 1 else 0)
    config = dataclasses.replace(config, generation_mem_len=config.generation_mem_len or default_generation_mem_len(
        model_config.mem_len, config.max_length))
    head, network = restored.head, restored.network
    encoder = XLNetTextEncoder(directory.sp_model_proto, directory.special_ids, config.max_length, config.uncased)

    def write(staging: str) -> str:
        assets = _write_assets(posixpath.join(staging, "asset_sources"), directory, checkpoint, config, version)
        module = XLNetServingModule(network, encoder, config.top_k, assets, head=head, labels=directory.labels,
                                    text_pair=bool(finetuned and finetuned.text_pair), squad=squad,
                                    max_segments=config.max_segments, generation_mem_len=config.generation_mem_len)
        saved = posixpath.join(staging, "saved_model")
        tf.saved_model.save(module, saved, signatures=module.signatures())
        return saved

    return publish_version(output, version, write)


def _write_assets(directory: str, source: ModelDirectory, checkpoint: str, config: ExportConfig,
                  version: int) -> dict[str, str]:
    """Writes the files shipped under assets/: the vocabulary and the resolved configurations."""
    tf.io.gfile.makedirs(directory)
    model_config = source.model_config
    write_bytes(posixpath.join(directory, ModelDirectory.VOCAB), source.sp_model_proto)
    write_json(posixpath.join(directory, ModelDirectory.MODEL_CONFIG), model_config.to_dict())
    write_json(posixpath.join(directory, "export_config.json"), {
        "format_version": EXPORT_FORMAT_VERSION,
        "version": version,
        **dataclasses.asdict(config),
        "special_ids": source.special_ids,
        "vocab_size": model_config.vocab_size,
        "d_model": model_config.d_model,
        "checkpoint": checkpoint,
        "signatures": list(signature_names(source.finetune_config.task if source.finetune_config else None)),
        "task": source.finetune_config.task if source.finetune_config else None,
        "labels": list(source.labels) if source.labels else None,
        "layout": _layout_description(config),
    })
    return {name: posixpath.join(directory, name)
            for name in (ModelDirectory.VOCAB, ModelDirectory.MODEL_CONFIG, "export_config.json")}


def _layout_description(config: ExportConfig) -> str:
    """export_config.json's ``layout``: how the signatures lay a text out."""
    if config.max_segments == 1:
        return ("left-padded (to max_length by the text signatures, to at most max_length for encode); "
                "A <sep> [B <sep>] <cls>; <cls> is the last position")
    return (f"[batch, segments, max_length]: A <sep> [B <sep>] <cls> left-padded over up to max_segments="
            f"{config.max_segments} segments of max_length, cut in reading order (the last segment ends <sep> "
            f"<cls>), read in order with the last mem_len={config.mem_len} states as memory; <cls> is the last "
            "position of the last segment")
