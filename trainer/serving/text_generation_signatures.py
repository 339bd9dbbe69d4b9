"""The ``score``, ``score_in_context`` and ``generate`` signatures: text in, likelihoods and continuations out.

Both run the factorisation of trainer/models/natural_order.py (a context first, its tokens all
seeing each other, then natural order) on the exported network's own LM head (the tied word
embedding and ``lm_bias``; a fine-tuned model keeps them, so every export has these signatures).
Text is normalised and tokenised in the graph (trainer/serving/text_encoder.py: no ``<sep>`` or
``<cls>``: a text is read as running text).

* ``score``: ``text`` string [batch] -> each text framed as ``<eod>`` + text + ``<eod>``
  (trainer/models/document_framing.py, the rule `xlnet score` reads documents with): the leading
  ``<eod>`` is the context, everything after it is scored.
* ``score_in_context``: ``text`` and ``context`` string [batch] -> the text scored after its
  context (context + text, nothing added; the context is not scored). A row whose context is
  empty (no piece) is framed as ``score`` frames it.

  Both return ``log_likelihood`` float32 [batch] (natural log, the sum over scored tokens),
  ``num_tokens`` int32 [batch] (tokens scored), ``token_ids`` int32 [batch, max_length] and
  ``token_log_probs`` float32 [batch, max_length]: column i is the i-th scored token and its
  log-probability, padded with -1 and 0.0 after ``num_tokens``; and ``num_truncated`` int32
  [batch]. A row (context + text) holds at most ``max_length`` tokens (the export's
  ``max_length``), read in one segment: the context keeps its LAST ``max_length - 1`` tokens (the
  ones next to the text), then the text keeps its FIRST tokens that fit; ``num_truncated``
  counts the tokens dropped from both.

* ``generate``: ``prompt`` string [batch], scalars ``max_new_tokens`` int32 (1 ..
  ``MAX_NEW_TOKENS_CAP``), ``temperature`` float32 (>= 0, 0 = greedy), ``top_k`` int32 (>= 0, 0 =
  no limit), ``top_p`` float32 (in (0, 1]), ``seed`` int64 -> ``text`` string [batch] (the
  continuation, detokenised, without its stop token), ``generated_ids`` int32 and
  ``token_log_probs`` float32 [batch, max_new_tokens] (-1 / 0.0 after a row stops),
  ``num_generated`` int32 [batch], ``num_truncated`` int32 [batch], and what the model ran on:
  ``input_ids``, ``segment_ids``, ``input_mask`` int32 [batch, max_length + max_new_tokens]
  (prompt left-padded to ``max_length``, 1 = a real position). A row stops after ``<eod>`` or
  ``<eos>`` (kept in ``generated_ids``). A prompt keeps its LAST ``max_length`` tokens (the ones
  the continuation follows); ``num_truncated`` counts the dropped ones. The loop is one
  ``tf.while_loop`` over a per-layer key/value cache of ``mem_len`` positions
  (trainer/models/generation.py): once the prompt and the new tokens exceed it, the oldest fall
  out (Transformer-XL memory).

Bad input fails the call with an InvalidArgument error naming the input: an empty prompt (no
piece after normalisation), ``max_new_tokens`` outside 1 .. the cap, a negative ``temperature``,
``top_k`` < 0, ``top_p`` outside (0, 1], a ``text`` / ``context`` / ``prompt`` that is not valid
UTF-8, and ``text`` and ``context`` of different sizes.
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from trainer.models.document_framing import EOD_CONTEXT_TOKENS, eod_framed
from trainer.models.generation import excluded_symbol_ids, generate, stop_symbol_ids
from trainer.models.inference_network import inference_config
from trainer.models.network import XLNetNetwork
from trainer.models.scoring import score_tokens
from trainer.serving.text_encoder import XLNetTextEncoder

SIGNATURES = ("score", "score_in_context", "generate")


def default_generation_mem_len(model_mem_len: int, max_length: int) -> int:
    """The generation cache's size when the export does not set it: the model's ``mem_len``
    (model_config.json: the memory it was pretrained to attend, e.g. 384 for XLNet-Base), or the
    export's ``max_length`` for a model without one (fine-tuned on one segment)."""
    return model_mem_len if model_mem_len > 0 else max_length


def sharing_weights(network: XLNetNetwork, mem_len: int) -> XLNetNetwork:
    """``network``'s layers and variables read with ``inference_config(config, mem_len)``.

    The config's mem_len and reuse_len shape no variable, only how a call caches states, so the
    view is the same object state with another config; a second network with copied weights
    would store every weight twice in the SavedModel."""
    view = object.__new__(type(network))
    view.__dict__.update(network.__dict__)
    object.__setattr__(view, "config", inference_config(network.config, mem_len))
    return view


def utf8_check(texts: tf.Tensor, name: str) -> tf.Operation:
    """An assertion that every string of ``texts`` is valid UTF-8, naming the input ``name``."""
    repaired = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    return tf.debugging.assert_equal(tf.reduce_all(tf.equal(repaired, texts)), True,
                                     message=f"{name} must be valid UTF-8")


def _first(ids: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
    positions = tf.ragged.range(tf.cast(ids.row_lengths(), tf.int32))
    return tf.ragged.boolean_mask(ids, positions < counts[:, None])


def _last(ids: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
    lengths = tf.cast(ids.row_lengths(), tf.int32)
    positions = tf.ragged.range(lengths)
    return tf.ragged.boolean_mask(ids, positions >= (lengths - counts)[:, None])


def left_padded(ids: tf.RaggedTensor, width: int, pad_id: int) -> tf.Tensor:
    """int32 [batch, (n <= width)] -> [batch, width], each row's ids in its last columns."""
    backwards = tf.reverse(ids, axis=[1]).to_tensor(default_value=pad_id, shape=[None, width])
    return tf.reverse(backwards, axis=[1])


class TextGenerationSignatures(tf.Module):
    """The signature functions, on ``network``'s variables (tracked by the exporting module).

    Args:
      network: the exported XLNet network (its weights; any mem_len / reuse_len).
      encoder: the export's text encoder; its ``max_length`` is the width of a scored row and of a prompt.
      mem_len: positions of the generation cache (``default_generation_mem_len`` by default).
    """

    def __init__(self, network: XLNetNetwork, encoder: XLNetTextEncoder, mem_len: int):
        super().__init__(name="text_generation")
        if mem_len < 1:
            raise ValueError(f"the generation cache needs mem_len >= 1, got {mem_len}")
        object.__setattr__(self, "network", sharing_weights(network, mem_len))
        self.encoder = encoder
        self.width = int(encoder.max_length)
        self.mem_len = int(mem_len)
        self.special_ids = dict(encoder.special_ids)
        text = tf.TensorSpec([None], tf.string)
        self.score = tf.function(self._score, input_signature=[text])
        self.score_in_context = tf.function(self._score_in_context, input_signature=[text, text])
        self.generate = tf.function(self._generate, input_signature=[
            text, tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int32),
            tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64)])

    def signatures(self) -> dict[str, Any]:
        """Signature name -> tf.function (each has its input signature), for tf.saved_model.save.

        Not concrete functions: tf.saved_model.save traces inside its save context, whose trace
        cache key differs from an eager one, so a function traced before the save is traced again."""
        return {"score": self.score, "score_in_context": self.score_in_context, "generate": self.generate}

    @property
    def stop_ids(self) -> list[int]:
        """The tokens that end a generated row: <eod> and </s> (those the vocabulary has)."""
        return stop_symbol_ids(self.special_ids)

    # ------------------------------------------------------------------ score
    def _score(self, text) -> dict[str, tf.Tensor]:
        with tf.control_dependencies([utf8_check(text, "text")]):
            text_ids = self.encoder.tokenize(tf.identity(text))
        framed = eod_framed(text_ids, self.special_ids["eod"])
        context = framed[:, :EOD_CONTEXT_TOKENS]
        return self._score_rows(context, framed[:, EOD_CONTEXT_TOKENS:])

    def _score_in_context(self, text, context) -> dict[str, tf.Tensor]:
        checks = [utf8_check(text, "text"), utf8_check(context, "context"),
                  tf.debugging.assert_equal(tf.size(text), tf.size(context),
                                            message="text and context must hold the same number of strings")]
        with tf.control_dependencies(checks):
            text_ids = self.encoder.tokenize(tf.identity(text))
            context_ids = self.encoder.tokenize(tf.identity(context))
        framed = eod_framed(text_ids, self.special_ids["eod"])
        has_context = context_ids.row_lengths() > 0
        # Per row: its own context and text, or the <eod> framing when the context is empty.
        contexts = _choose_rows(has_context, context_ids, framed[:, :EOD_CONTEXT_TOKENS])
        texts = _choose_rows(has_context, tf.cast(text_ids, tf.int32), framed[:, EOD_CONTEXT_TOKENS:])
        return self._score_rows(contexts, texts)

    def _score_rows(self, context: tf.RaggedTensor, text: tf.RaggedTensor) -> dict[str, tf.Tensor]:
        """Context and text ids [batch, (n)] -> the score outputs (rows cut to ``width``, see the module doc)."""
        context_lengths = tf.cast(context.row_lengths(), tf.int32)
        text_lengths = tf.cast(text.row_lengths(), tf.int32)
        kept_context = tf.minimum(context_lengths, self.width - 1)
        kept_text = tf.minimum(text_lengths, self.width - kept_context)
        rows = tf.concat([_last(tf.cast(context, tf.int32), kept_context), _first(tf.cast(text, tf.int32), kept_text)],
                         axis=1)
        ids = rows.to_tensor(default_value=self.special_ids["pad"], shape=[None, self.width])
        lengths = kept_context + kept_text
        out = score_tokens(self.network, ids, lengths, kept_context, segment_len=self.width)
        # Column i = the i-th scored token: shift each row left by its context.
        scored = tf.RaggedTensor.from_tensor(out["token_log_probs"], lengths=lengths)
        scored_ids = tf.RaggedTensor.from_tensor(ids, lengths=lengths)
        shape = [None, self.width]
        return {"log_likelihood": out["log_likelihood"], "num_tokens": out["num_tokens"],
                "token_log_probs": _drop_first(scored, kept_context).to_tensor(0.0, shape=shape),
                "token_ids": _drop_first(scored_ids, kept_context).to_tensor(-1, shape=shape),
                "num_truncated": context_lengths + text_lengths - lengths}

    # ------------------------------------------------------------------ generate
    def _generate(self, prompt, max_new_tokens, temperature, top_k, top_p, seed) -> dict[str, tf.Tensor]:
        with tf.control_dependencies([utf8_check(prompt, "prompt")]):
            prompt_ids = tf.cast(self.encoder.tokenize(tf.identity(prompt)), tf.int32)
        lengths = tf.cast(prompt_ids.row_lengths(), tf.int32)
        kept = tf.minimum(lengths, self.width)
        ids = left_padded(_last(prompt_ids, kept), self.width, self.special_ids["pad"])
        out = generate(self.network, ids, kept, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                       seed=seed, stop_ids=self.stop_ids, pad_id=self.special_ids["pad"],
                       excluded_ids=excluded_symbol_ids(self.special_ids))
        generated = out["generated_ids"]
        words = tf.logical_and(generated >= 0, tf.logical_not(tf.reduce_any(
            tf.equal(generated[:, :, None], tf.constant(self.stop_ids, tf.int32)[None, None, :]), axis=2)))
        continuation = tf.ragged.boolean_mask(generated, words)
        text = self.encoder.tokenizer.detokenize(continuation)
        return {"text": text, **out, "num_truncated": lengths - kept}


def _choose_rows(condition: tf.Tensor, when_true: tf.RaggedTensor, when_false: tf.RaggedTensor) -> tf.RaggedTensor:
    """Row b of ``when_true`` where condition[b], else of ``when_false`` (ragged, same number of rows)."""
    when_true, when_false = tf.cast(when_true, tf.int32), tf.cast(when_false, tf.int32)
    both = tf.concat([when_true, when_false], axis=0)
    rows = tf.range(tf.size(condition, out_type=tf.int32))
    picks = tf.where(condition, rows, rows + tf.size(condition, out_type=tf.int32))
    return tf.gather(both, picks)


def _drop_first(values: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
    """Each row without its first ``counts[b]`` entries."""
    positions = tf.ragged.range(tf.cast(values.row_lengths(), tf.int32))
    return tf.ragged.boolean_mask(values, positions >= counts[:, None])
