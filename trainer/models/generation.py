"""Generation in natural order with a true two-stream key/value cache, and its uncached reference.

The factorisation is ``natural_order.py``'s: the prompt is the context (its tokens all see each
other), then every new token t is predicted by the query stream at position t, which sees the
prompt and the tokens before t; its content state sees the prompt and the tokens up to t.

The cache (``GenerationCache``) holds, per layer, the KEYS and VALUES of that layer's input
content states, projected once (a decoder's cache, not hidden states projected again):

* ``start_generation``: one ``network.encode`` pass over the prompt (all prompt tokens see each
  other) gives every layer's input; their keys and values fill the cache, and the query stream
  at the first new position attends them, giving the first logits. That is all the prompt costs.
* ``extend_generation(token)``: the token just chosen, at position t-1, and the query row of
  position t go through the layers together, two rows per layer: the token's key and value are
  projected and appended, its content row attends the cache and itself, and the query row
  attends the same keys (the prompt and the tokens before t). Nothing of the past is recomputed:
  a step costs O(d_model^2 + mem_len * d_model) per layer, flat in the number of tokens so far.
* The cache has ``mem_len`` columns (the network's ``inference_config`` mem_len), right-aligned:
  each row attends the ``mem_len`` newest cached positions plus the new one; once full, the
  oldest position falls out (Transformer-XL memory: the states of the positions that remain are
  not recomputed). ``start_generation`` reads a prompt longer than ``mem_len`` whole in its first
  pass (the ``generate`` signature's, whose prompts are at most ``max_length`` pieces), then keeps
  only its last ``mem_len`` positions; ``read_prompt`` reads a prompt of any length segment by
  segment with memory instead (`xlnet generate`), and ``start_from_memory`` starts from either.
  Until then (prompt columns + new tokens <=
  ``mem_len`` + 1) the logits equal ``uncached_next_logits``, the full two-stream pass.

Prompts are LEFT-padded: row b's ``prompt_lengths[b]`` tokens are the last columns of
``prompt_ids``, so every row appends at the same column; padding keys are masked and the
relative positions of real tokens do not depend on the padding, so each row generates what it
generates alone (eviction included: a row's real positions are its newest columns). All
positions are segment 0 (one text): every key a row sees gets the same segment term, a constant
per row that the softmax cancels, so the cached steps leave it out.

XLNet needs no padding text in front of a short prompt (the original's and Hugging Face's
trick for their own generation scripts): the prompt is a context as in pretraining and the
relative attention needs no fixed length. A prompt must hold at least one token.

Sampling (``choose_tokens``): temperature 0 is greedy (argmax, lowest id on ties); otherwise
Gumbel-max over logits / temperature, restricted to the ``top_k`` most likely tokens (0: all)
and to the smallest most-likely set whose probability reaches ``top_p`` (1: all; with both, the
smaller set). The noise is a counter hash (trainer/layers/counter_hash.py) of (seed, step,
token id): the same seed gives the same tokens eagerly, in a graph and under XLA, and a row's
noise does not depend on its place in the batch. ``token_log_probs`` are the model's own
log-probabilities (temperature 1, no filtering) of the chosen tokens.

Special symbols: ``stop_symbol_ids`` (<eod>, </s>) end a row; ``excluded_symbol_ids`` (<unk>, <s>,
<cls>, <sep>, <pad>, <mask>) are never chosen, as they are not text: an undertrained model's
favourite, <unk>, would otherwise decode to " ⁇ ".
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import tensorflow as tf

from trainer.layers.counter_hash import GOLDEN_32, mix32
from trainer.models.config import MAX_NEW_TOKENS_CAP
from trainer.models.inference_network import check_inference_network
from trainer.models.natural_order import natural_order_mask
from trainer.models.network import XLNetNetwork
from trainer.models.scoring import token_log_probs

# The width of a generation cache's recent part (GenerationCache): it is merged every this many tokens.
RECENT_COLUMNS = 16
# The longest segment `read_prompt` reads a prompt in (``prompt_segment_len``): XLNet's pretraining
# sequence length, so a segment's attention is over at most this many queries whatever the cache.
PROMPT_SEGMENT_CAP = 512
# Special symbols (tfrecords/vocabulary.py names) that end a generated row, and those never generated.
STOP_SYMBOLS = ("eod", "eos")
EXCLUDED_SYMBOLS = ("unk", "bos", "cls", "sep", "pad", "mask")


def stop_symbol_ids(special_ids: Mapping[str, int]) -> list[int]:
    """The ids of ``STOP_SYMBOLS`` that the vocabulary ``special_ids`` (name -> id) has."""
    return [int(special_ids[name]) for name in STOP_SYMBOLS if name in special_ids]


def excluded_symbol_ids(special_ids: Mapping[str, int]) -> list[int]:
    """The ids of ``EXCLUDED_SYMBOLS`` that the vocabulary ``special_ids`` (name -> id) has."""
    return [int(special_ids[name]) for name in EXCLUDED_SYMBOLS if name in special_ids]


class GenerationCache(NamedTuple):
    """The per-layer cache of ``start_generation`` / ``extend_generation`` (a tf.nest structure).

    The cache is kept in two parts so that a step never copies it whole: ``keys`` / ``values``
    hold mem_len settled columns, ``recent_keys`` / ``recent_values`` RECENT_COLUMNS columns that
    the steps fill one at a time. Once the recent part is full, both are merged (the newest
    mem_len columns of the two become the settled part): one copy every RECENT_COLUMNS tokens
    instead of two per token. Column j of [settled; recent] sits at position j.

    keys, values: n_layer x [B, n_head, mem_len, d_head] in the compute dtype.
    recent_keys, recent_values: n_layer x [B, n_head, RECENT_COLUMNS, d_head].
    key_valid: [B, mem_len + RECENT_COLUMNS] bool, False for empty columns and prompt padding.
    filled: int32 scalar, the recent columns in use (0 .. RECENT_COLUMNS - 1 between steps); a
      row sees the mem_len columns before column mem_len + filled (the newest positions).
    position_keys: n_layer x [1, n_head, mem_len + 2, d_head], the r-projected encodings of the
      distances mem_len + 1 .. 0 (constant during a generation).
    """

    keys: tuple
    values: tuple
    recent_keys: tuple
    recent_values: tuple
    key_valid: tf.Tensor
    filled: tf.Tensor
    position_keys: tuple


def prompt_mask(prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor) -> tf.Tensor:
    """[B, T] bool, True on the real (last ``prompt_lengths[b]``) columns of a left-padded prompt."""
    width = tf.shape(prompt_ids)[1]
    return tf.range(width)[None, :] >= width - tf.cast(prompt_lengths, tf.int32)[:, None]


def _cache_size(network: XLNetNetwork) -> int:
    check_inference_network(network)
    if network.config.mem_len < 1:
        raise ValueError("generation needs a cache: build the network with inference_config(config, mem_len >= 1)")
    return network.config.mem_len


def _left_pad_to(x: tf.Tensor, size: int, axis: int, value=0) -> tf.Tensor:
    """``x`` padded in front along ``axis`` to ``size`` (its length there is at most ``size``)."""
    paddings = [[0, 0] for _ in x.shape]
    paddings[axis] = [size - tf.shape(x)[axis], 0]
    padded = tf.pad(x, paddings, constant_values=value)
    return tf.ensure_shape(padded, [size if i == axis else dim for i, dim in enumerate(x.shape)])


def _query_rows(network: XLNetNetwork, batch: tf.Tensor) -> tf.Tensor:
    """The query stream's input, mask_emb, for one position per row: [B, 1, d_model]."""
    return tf.tile(tf.cast(network.mask_emb, network.compute_dtype), tf.stack([batch, 1, 1]))


def _through_layers(network: XLNetNetwork, rows: tf.Tensor, cache: GenerationCache, row_positions: tf.Tensor,
                    blocked: tf.Tensor, new_column: tf.Tensor | None) -> tuple[tf.Tensor, list, list]:
    """rows [B, Q, d] through every layer against the cache. With ``new_column`` ([R] bool, True at
    the recent column of a new content position) row 0 is that position: each layer writes its key
    and value there first. -> (rows, each layer's recent keys, recent values)."""
    recent_keys, recent_values = [], []
    for i, block in enumerate(network.blocks):
        layer_recent_keys, layer_recent_values = cache.recent_keys[i], cache.recent_values[i]
        if new_column is not None:
            new_key, new_value = block.attention.project_keys_values(rows[:, :1])
            at = new_column[None, None, :, None]
            layer_recent_keys = tf.where(at, new_key, layer_recent_keys)
            layer_recent_values = tf.where(at, new_value, layer_recent_values)
        rows = block.cached_step(rows, (cache.keys[i], layer_recent_keys), (cache.values[i], layer_recent_values),
                                 cache.position_keys[i], row_positions, blocked, None,
                                 **network.attention_biases(layer_index=i))
        recent_keys.append(layer_recent_keys)
        recent_values.append(layer_recent_values)
    return rows, recent_keys, recent_values


def _blocked(cache: GenerationCache, valid: tf.Tensor, rows: int) -> tf.Tensor:
    """[B, rows, mem_len + R] bool, True = may not attend: invalid columns and those outside the
    window of the mem_len columns from ``filled`` (the newest mem_len positions before this step)
    and the new column."""
    size = cache.keys[0].shape[2]
    columns = tf.range(valid.shape[1])
    window = tf.logical_and(columns >= cache.filled, columns <= size + cache.filled)
    return tf.tile(tf.logical_not(tf.logical_and(valid, window[None, :]))[:, None, :], [1, rows, 1])


def start_generation(network: XLNetNetwork, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                     recent_columns: int = RECENT_COLUMNS) -> tuple[GenerationCache, tf.Tensor]:
    """Reads a left-padded prompt in one pass. prompt_ids [B, T] int, prompt_lengths [B] int (>= 1).

    -> (cache, logits [B, vocab] float32 of the first new position, the query stream at column T).
    ``network`` is built with ``inference_config(config, mem_len >= 1)``; mem_len is the cache size.
    ``recent_columns``: the width of the cache's recent part (see ``GenerationCache``); any width
    gives the same tokens, 1 merges after every token. A long prompt costs T^2 here: read it with
    ``read_prompt`` and ``start_from_memory`` instead.
    """
    _cache_size(network)
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    mask = prompt_mask(prompt_ids, prompt_lengths)
    _, mems = network.encode(prompt_ids, tf.zeros_like(prompt_ids), input_mask=tf.cast(mask, tf.int32),
                             training=False)
    kept = tf.shape(mems[0])[1]  # the last min(T, mem_len) prompt columns
    return start_from_memory(network, mems, mask[:, tf.shape(mask)[1] - kept:], recent_columns)


def prompt_segment_len(mem_len: int) -> int:
    """The segment `xlnet generate` reads a prompt in with a cache of ``mem_len`` positions: the
    cache's size, at most PROMPT_SEGMENT_CAP. Each segment then sees up to a whole segment of
    memory, and its attention (segment x (memory + segment)) grows linearly with the cache."""
    return max(1, min(mem_len, PROMPT_SEGMENT_CAP))


def read_prompt(network: XLNetNetwork, prompt_ids, segment_len: int, segment_fn=None) -> tuple[list, tf.Tensor]:
    """Reads one prompt as Transformer-XL reads a text: in segments of ``segment_len`` pieces, each
    seeing its own pieces and the last ``mem_len`` states of the ones before (``network.encode``
    with memory; ``XLNetNetwork.encode_segments``' recurrence). The segments end at the prompt's
    end: the first holds the ``len % segment_len`` first pieces (or a whole segment). A prompt of
    at most ``segment_len`` pieces is one ``encode`` pass, as ``start_generation`` reads it.

    Memory and time are bounded by the segment: no call sees more than ``segment_len`` queries and
    ``mem_len + segment_len`` keys, however long the prompt.

    Args:
      network: built with ``inference_config(config, mem_len >= 1)``.
      prompt_ids: [T] int (T >= 1), one prompt (a Python sequence or a 1-D tensor).
      segment_len: pieces per segment (>= 1).
      segment_fn: ``(ids [1, L], mems or None) -> new_mems``: ``network.encode``'s memory by
        default; pass a ``tf.function`` of it to run each segment as a graph.
    Returns (mems: n_layer [1, min(T, mem_len), d_model], valid [1, min(T, mem_len)] bool, all True):
    what ``start_from_memory`` builds the cache from.
    """
    _cache_size(network)
    if segment_len < 1:
        raise ValueError(f"segment_len must be at least 1, got {segment_len}")
    ids = tf.reshape(tf.cast(tf.convert_to_tensor(prompt_ids), tf.int32), [1, -1])
    total = int(ids.shape[1])
    if total < 1:
        raise ValueError("a prompt must hold at least one token")
    segment_fn = segment_fn or (lambda segment, mems: network.encode(segment, tf.zeros_like(segment), mems=mems,
                                                                      training=False)[1])
    mems = None
    for end in range(total % segment_len or segment_len, total + 1, segment_len):
        mems = segment_fn(ids[:, max(0, end - segment_len):end], mems)
    return list(mems), tf.ones([1, int(mems[0].shape[1])], tf.bool)


def start_from_memory(network: XLNetNetwork, mems, valid: tf.Tensor, recent_columns: int = RECENT_COLUMNS
                      ) -> tuple[GenerationCache, tf.Tensor]:
    """The cache of a prompt already read, and the logits of its first new position.

    mems: n_layer [B, K, d_model], each layer's input states of the prompt's last K <= mem_len
    columns (``network.encode``'s new memory); valid: [B, K] bool, False at padding.
    -> as ``start_generation``.
    """
    size = _cache_size(network)
    valid = tf.cast(valid, tf.bool)
    batch = tf.shape(valid)[0]
    pos_emb = network.position_encoding(klen=size + 1, qlen=1, training=False)
    keys, values, recent, position_keys = [], [], [], []
    for mem, block in zip(mems, network.blocks):
        layer_keys, layer_values = block.attention.project_keys_values(mem)
        keys.append(_left_pad_to(layer_keys, size, axis=2))
        values.append(_left_pad_to(layer_values, size, axis=2))
        recent.append(tf.zeros(tf.concat([tf.shape(layer_keys)[:2], [recent_columns, layer_keys.shape[3]]], 0),
                               layer_keys.dtype))
        position_keys.append(block.attention.project_positions(pos_emb))
    key_valid = tf.concat([_left_pad_to(valid, size, axis=1, value=False),
                           tf.zeros(tf.stack([batch, recent_columns]), tf.bool)], axis=1)
    cache = GenerationCache(tuple(keys), tuple(values), tuple(recent), tuple(recent), key_valid, tf.constant(0),
                            tuple(position_keys))
    # The first query sits right after the newest cached column: at position `size` on its axis.
    row_positions = tf.fill(tf.stack([batch, 1]), size)
    blocked = _blocked(cache, key_valid, 1)
    query, _, _ = _through_layers(network, _query_rows(network, batch), cache, row_positions, blocked, None)
    return cache, network.logits(query)[:, 0]


def extend_generation(network: XLNetNetwork, cache: GenerationCache, token_ids: tf.Tensor
                      ) -> tuple[GenerationCache, tf.Tensor]:
    """Appends one token per row (token_ids [B] int, at the position after the cache's newest) and
    predicts the next position: -> (cache with the token's keys and values added, the oldest
    position out of the window; logits [B, vocab] float32 of the query stream at the next position)."""
    size = _cache_size(network)
    token_ids = tf.cast(token_ids, tf.int32)
    batch = tf.shape(token_ids)[0]
    recent_columns = cache.recent_keys[0].shape[2]
    content = tf.cast(network.word_embedding(token_ids[:, None]), network.compute_dtype)
    rows = tf.concat([content, _query_rows(network, batch)], axis=1)
    new_column = tf.equal(tf.range(recent_columns), cache.filled)
    valid = tf.logical_or(cache.key_valid, tf.concat([tf.zeros([size], tf.bool), new_column], axis=0)[None, :])
    # The new token is key column `size + filled`; the next query one position further.
    row_positions = tf.tile(size + cache.filled + tf.constant([[0, 1]], tf.int32), tf.stack([batch, 1]))
    rows, recent_keys, recent_values = _through_layers(network, rows, cache, row_positions,
                                                       _blocked(cache, valid, 2), new_column)
    filled = cache.filled + 1
    cache = GenerationCache(cache.keys, cache.values, tuple(recent_keys), tuple(recent_values), valid, filled,
                            cache.position_keys)
    cache = tf.cond(tf.equal(filled, recent_columns), lambda: _settled(cache), lambda: cache)
    return cache, network.logits(rows[:, 1:])[:, 0]


def _settled(cache: GenerationCache) -> GenerationCache:
    """The cache with its full recent part merged: the newest mem_len columns of [settled; recent]
    become the settled part, the recent part is empty again."""
    recent_columns = cache.recent_keys[0].shape[2]

    def merged(settled, recent):
        return tf.concat([settled, recent], axis=2)[:, :, recent_columns:]

    valid = tf.concat([cache.key_valid[:, recent_columns:], tf.zeros_like(cache.key_valid[:, :recent_columns])],
                      axis=1)
    return GenerationCache(tuple(map(merged, cache.keys, cache.recent_keys)),
                           tuple(map(merged, cache.values, cache.recent_values)),
                           cache.recent_keys, cache.recent_values, valid, tf.zeros_like(cache.filled),
                           cache.position_keys)


def uncached_next_logits(network: XLNetNetwork, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor,
                         new_ids: tf.Tensor) -> tf.Tensor:
    """The reference: logits [B, vocab] of the position after ``new_ids`` [B, k] (tokens generated
    so far, k >= 0) from one full two-stream pass over prompt + new tokens with the natural-order
    mask (prompt = context, new tokens = targets). Everything is recomputed; no memory is used."""
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    new_ids = tf.cast(new_ids, tf.int32)
    batch, width = tf.shape(prompt_ids)[0], prompt_ids.shape[1]
    # A placeholder at the predicted position: a target nobody before it sees, not even its query.
    ids = tf.concat([prompt_ids, new_ids, tf.zeros(tf.stack([batch, 1]), tf.int32)], axis=1)
    total = ids.shape[1]
    is_target = tf.tile((tf.range(total) >= width)[None, :], tf.stack([batch, 1]))
    input_mask = tf.concat([prompt_mask(prompt_ids, prompt_lengths), tf.ones_like(ids[:, width:], tf.bool)], axis=1)
    logits, _ = network(ids, tf.zeros_like(ids), natural_order_mask(is_target), input_mask=tf.cast(input_mask, tf.int32),
                        target_positions=tf.fill(tf.stack([batch, 1]), total - 1), training=False)
    return logits[:, 0]


def _per_row(value, batch: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """A scalar or [B] setting as [B, 1]."""
    value = tf.cast(value, dtype)
    return tf.broadcast_to(tf.reshape(value, [-1, 1]), tf.stack([batch, 1]))


def gumbel_noise(seeds: tf.Tensor, step: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """[B] int seeds, a step number -> [B, vocab] float32 standard Gumbel noise from a counter hash of
    (seed, step, token id): the same everywhere (eager, graph, XLA) and independent of the batch."""
    seeds = tf.cast(seeds, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(seeds, 0xFFFFFFFF), tf.uint32)
    high = tf.cast(tf.bitwise.right_shift(seeds, 32), tf.uint32)
    golden = tf.constant(GOLDEN_32, tf.uint32)
    step_key = mix32(tf.cast(step, tf.uint32) + golden)
    key = mix32(tf.bitwise.bitwise_xor(low * golden + step_key, mix32(high + golden)))
    counter = tf.bitcast(tf.range(vocab_size, dtype=tf.int32), tf.uint32)
    bits = mix32(counter[None, :] * golden + key[:, None])
    uniform = (tf.cast(tf.bitwise.right_shift(bits, 8), tf.float32) + 0.5) / float(1 << 24)  # in (0, 1)
    return -tf.math.log(-tf.math.log(uniform))


def _filtered(scaled: tf.Tensor, top_k: tf.Tensor, top_p: tf.Tensor) -> tf.Tensor:
    """scaled logits [B, V] with every token outside the top_k / top_p set at -inf."""
    vocab = tf.shape(scaled)[1]
    ordered = tf.sort(scaled, axis=-1, direction="DESCENDING")
    before = tf.math.cumsum(tf.nn.softmax(ordered, axis=-1), axis=-1, exclusive=True)
    by_p = tf.reduce_sum(tf.cast(before < top_p, tf.int32), axis=-1, keepdims=True)  # >= 1 for top_p > 0
    by_k = tf.where(top_k > 0, top_k, vocab)
    count = tf.clip_by_value(tf.minimum(by_k, by_p), 1, vocab)
    threshold = tf.gather(ordered, count - 1, batch_dims=1)
    return tf.where(scaled >= threshold, scaled, tf.constant(-float("inf"), scaled.dtype))


def choose_tokens(logits: tf.Tensor, temperature, top_k, top_p, seed, step,
                  excluded_ids: Sequence[int] = ()) -> tf.Tensor:
    """logits [B, V] float32 -> the chosen token ids [B] int32.

    temperature, top_k, top_p, seed: scalars or [B]. temperature 0: greedy; else a sample from
    softmax(logits / temperature) restricted to top_k (0: no limit) and top_p (1: no limit).
    ``step``: the index of the token being chosen (0 for the first new token).
    ``excluded_ids``: tokens never chosen (their logits count as -inf, before top_k and top_p).
    """
    logits = tf.cast(logits, tf.float32)
    if len(excluded_ids):
        allowed = tf.tensor_scatter_nd_update(tf.ones([logits.shape[-1]], tf.bool),
                                              tf.constant([[int(i)] for i in excluded_ids], tf.int32),
                                              tf.zeros([len(excluded_ids)], tf.bool))
        logits = tf.where(allowed[None, :], logits, tf.constant(-float("inf"), tf.float32))
    batch = tf.shape(logits)[0]
    temperature = _per_row(temperature, batch, tf.float32)
    top_k, top_p = _per_row(top_k, batch, tf.int32), _per_row(top_p, batch, tf.float32)
    greedy = tf.argmax(logits, axis=-1, output_type=tf.int32)
    scaled = logits / tf.where(temperature > 0, temperature, 1.0)
    restricted = tf.logical_or(top_k > 0, top_p < 1.0)
    scaled = tf.cond(tf.reduce_any(restricted), lambda: _filtered(scaled, top_k, top_p), lambda: scaled)
    noise = gumbel_noise(tf.reshape(_per_row(seed, batch, tf.int64), [-1]), step, logits.shape[-1])
    sampled = tf.argmax(scaled + noise, axis=-1, output_type=tf.int32)
    return tf.where(temperature[:, 0] > 0, sampled, greedy)


def check_generation_settings(prompt_lengths, max_new_tokens, temperature, top_k, top_p, width=None) -> list:
    """In-graph checks of the settings (tf.debugging assertions, each naming the setting)."""
    checks = [
        tf.debugging.assert_positive(tf.cast(prompt_lengths, tf.int32), message="prompt: a prompt must hold a token"),
        tf.debugging.assert_positive(tf.cast(max_new_tokens, tf.int32), message="max_new_tokens must be >= 1"),
        tf.debugging.assert_less_equal(tf.cast(max_new_tokens, tf.int32), MAX_NEW_TOKENS_CAP,
                                       message=f"max_new_tokens must be <= {MAX_NEW_TOKENS_CAP}"),
        tf.debugging.assert_non_negative(tf.cast(temperature, tf.float32), message="temperature must be >= 0"),
        tf.debugging.assert_non_negative(tf.cast(top_k, tf.int32), message="top_k must be >= 0"),
        tf.debugging.assert_positive(tf.cast(top_p, tf.float32), message="top_p must be in (0, 1]"),
        tf.debugging.assert_less_equal(tf.cast(top_p, tf.float32), 1.0, message="top_p must be in (0, 1]"),
    ]
    if width is not None:
        checks.append(tf.debugging.assert_less_equal(tf.cast(prompt_lengths, tf.int32), width,
                                                     message="prompt_lengths must be <= the prompt's width"))
    return checks


def _stops(tokens: tf.Tensor, stop_ids: tf.Tensor) -> tf.Tensor:
    """[B] bool: the token is one of ``stop_ids``."""
    return tf.reduce_any(tf.equal(tokens[:, None], stop_ids[None, :]), axis=1)


def _outputs(prompt_ids, prompt_lengths, generated, log_probs, max_new_tokens, pad_id) -> dict[str, tf.Tensor]:
    """The result dict from the per-step outputs generated / log_probs [B, steps] (-1 / 0.0 after a stop)."""
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    missing = tf.cast(max_new_tokens, tf.int32) - tf.shape(generated)[1]
    generated = tf.pad(generated, [[0, 0], [0, missing]], constant_values=-1)
    log_probs = tf.pad(log_probs, [[0, 0], [0, missing]])
    produced = generated >= 0
    input_ids = tf.concat([prompt_ids, tf.where(produced, generated, tf.cast(pad_id, tf.int32))], axis=1)
    input_mask = tf.concat([prompt_mask(prompt_ids, prompt_lengths), produced], axis=1)
    return {"generated_ids": generated, "token_log_probs": log_probs,
            "num_generated": tf.reduce_sum(tf.cast(produced, tf.int32), axis=1),
            "input_ids": input_ids, "segment_ids": tf.zeros_like(input_ids), "input_mask": tf.cast(input_mask, tf.int32)}


def generate(network: XLNetNetwork, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor, max_new_tokens,
             temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids: Sequence[int] = (), pad_id: int = 0,
             excluded_ids: Sequence[int] = ()) -> dict[str, tf.Tensor]:
    """Cached generation as one ``tf.while_loop`` (traceable into a SavedModel signature).

    Args:
      network: built with ``inference_config(config, mem_len)``; mem_len is the cache size.
      prompt_ids: [B, T] int, LEFT-padded; prompt_lengths: [B] int, 1 <= length <= T.
      max_new_tokens: int scalar (tensor or Python), 1 .. MAX_NEW_TOKENS_CAP.
      temperature (>= 0, 0 = greedy), top_k (>= 0, 0 = no limit), top_p (in (0, 1]), seed (int):
        scalars or [B]; see ``choose_tokens``.
      stop_ids: token ids that end a row (e.g. <eod>, </s>); the stop token itself is kept.
      pad_id: written into ``input_ids`` after a row stops.
      excluded_ids: token ids never generated (``excluded_symbol_ids``); see ``choose_tokens``.
    Returns a dict of tensors:
      generated_ids [B, max_new_tokens] int32 (-1 after a row stops), token_log_probs
      [B, max_new_tokens] float32 (0.0 after a stop), num_generated [B] int32, and what the model
      ran on: input_ids, segment_ids (zeros), input_mask (1 = a real position) [B, T + max_new_tokens].
    """
    prompt_ids = tf.cast(tf.convert_to_tensor(prompt_ids), tf.int32)
    checks = check_generation_settings(prompt_lengths, max_new_tokens, temperature, top_k, top_p,
                                       tf.shape(prompt_ids)[1])
    with tf.control_dependencies(checks):
        steps = tf.identity(tf.cast(max_new_tokens, tf.int32))
    stop_ids = tf.reshape(tf.constant(list(stop_ids), tf.int32) if isinstance(stop_ids, (list, tuple))
                          else tf.cast(stop_ids, tf.int32), [-1])
    cache, logits = start_generation(network, prompt_ids, prompt_lengths)
    batch = tf.shape(prompt_ids)[0]

    def body(step, cache, logits, done, chosen, scores):
        tokens = choose_tokens(logits, temperature, top_k, top_p, seed, step, excluded_ids)
        chosen = chosen.write(step, tf.where(done, -1, tokens))
        scores = scores.write(step, tf.where(done, 0.0, token_log_probs(logits, tokens)))
        done = tf.logical_or(done, _stops(tokens, stop_ids))
        more = tf.logical_and(step + 1 < steps, tf.logical_not(tf.reduce_all(done)))
        cache, logits = tf.cond(more, lambda: extend_generation(network, cache, tf.where(done, pad_id, tokens)),
                                lambda: (cache, logits))
        return step + 1, cache, logits, done, chosen, scores

    def running(step, cache, logits, done, chosen, scores):
        return tf.logical_and(step < steps, tf.logical_not(tf.reduce_all(done)))

    arrays = [tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=tf.TensorShape([None]))
              for dtype in (tf.int32, tf.float32)]
    state = (tf.constant(0), cache, logits, tf.zeros(tf.stack([batch]), tf.bool), *arrays)
    _, _, _, _, chosen, scores = tf.while_loop(running, body, state)
    return _outputs(prompt_ids, prompt_lengths, _rows(chosen, batch), _rows(scores, batch), steps, pad_id)


def _rows(steps: tf.TensorArray, batch: tf.Tensor) -> tf.Tensor:
    """The loop's per-step [B] outputs as [B, steps]. An empty batch runs no step (every row of none
    is done), and a TensorArray of no element of unknown shape cannot be stacked: [0, 0] then."""
    return tf.cond(steps.size() > 0, lambda: tf.transpose(steps.stack()),
                   lambda: tf.zeros(tf.stack([batch, 0]), steps.dtype))


def generate_uncached(network: XLNetNetwork, prompt_ids: tf.Tensor, prompt_lengths: tf.Tensor, max_new_tokens: int,
                      temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_ids: Sequence[int] = (), pad_id: int = 0,
                      next_logits=None, excluded_ids: Sequence[int] = ()) -> dict[str, tf.Tensor]:
    """``generate`` without a cache (the reference and the benchmark's baseline): each token's
    logits come from ``uncached_next_logits``, the full two-stream pass over prompt + tokens so far.
    A Python loop (``max_new_tokens`` a Python int); ``next_logits``: ``uncached_next_logits`` bound
    to ``network`` by default, or a ``tf.function`` of it. Same arguments and results as ``generate``."""
    prompt_ids = tf.cast(tf.convert_to_tensor(prompt_ids), tf.int32)
    # Eagerly (this loop is Python) the assertions raise as they are made.
    check_generation_settings(prompt_lengths, max_new_tokens, temperature, top_k, top_p, tf.shape(prompt_ids)[1])
    next_logits = next_logits or (lambda *args: uncached_next_logits(network, *args))
    stop_ids = tf.constant(list(stop_ids), tf.int32)
    batch = tf.shape(prompt_ids)[0]
    done = tf.zeros(tf.stack([batch]), tf.bool)
    fed = tf.zeros(tf.stack([batch, 0]), tf.int32)
    chosen, scores = [], []
    for step in range(int(max_new_tokens)):
        logits = next_logits(prompt_ids, prompt_lengths, fed)
        tokens = choose_tokens(logits, temperature, top_k, top_p, seed, step, excluded_ids)
        chosen.append(tf.where(done, -1, tokens))
        scores.append(tf.where(done, 0.0, token_log_probs(logits, tokens)))
        done = tf.logical_or(done, _stops(tokens, stop_ids))
        if bool(tf.reduce_all(done)):
            break
        fed = tf.concat([fed, tf.where(done, pad_id, tokens)[:, None]], axis=1)
    return _outputs(prompt_ids, prompt_lengths, tf.stack(chosen, axis=1), tf.stack(scores, axis=1), max_new_tokens,
                    pad_id)
