"""The XLNet network: embeddings, relative encodings, a stack of two-stream blocks, tied LM head.

Public entry points (batch-major everywhere):
  ``network(input_ids, segment_ids, perm_mask, target_mapping, mems)`` -> (logits [B, P, vocab], new_mems)
  ``network.encode(input_ids, segment_ids, input_mask=None, mems=None, mem_mask=None)``
      -> (hidden [B, L, d_model], new_mems)
  ``network.encode_segments(input_ids, segment_ids, input_mask=None, mems=None, mem_mask=None)``
      [B, S, L] -> (hidden [B, S, L, d_model], new_mems): the Transformer-XL recurrence over S segments
  ``network.memory_mask(input_mask, mem_mask=None)`` -> the mask of the memory ``encode`` returns

Written with ``keras.ops``, so it runs on every Keras backend (tests/trainer/models/test_backends.py:
JAX gives TensorFlow's numbers). Where TensorFlow needs its own op for the same values, gradients
and memory as ever (the tied LM head, batch gathers, the order of segments), backend_ops.py picks
trainer/models/tensorflow_ops.py on that backend.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import keras
from keras import ops

from trainer.layers import HashDropout, RelativeAttentionBiases, RelativePositionEncoding, XLNetBlock
from trainer.layers.remat import check_remat
from trainer.models import backend_ops
from trainer.models.backend_ops import Tensor
from trainer.models.config import ModelConfig, model_preset


def _blocked(perm_mask: Optional[Tensor], input_mask: Optional[Tensor], qlen: int, attn_type: str,
             batch_size: Any) -> Optional[Tensor]:
    """[B, L, L] bool (True = query i may not see key j of the current segment) or None if nothing is blocked.

    Combines the permutation mask (1 = may not attend), padding (input_mask 0 = padding key)
    and, for 'uni' attention, the causal mask.
    """
    blocked = None
    if perm_mask is not None:
        is_bool = keras.backend.standardize_dtype(perm_mask.dtype) == "bool"
        blocked = perm_mask if is_bool else ops.greater(ops.cast(perm_mask, "float32"), 0.5)
    if input_mask is not None:
        padding = ops.equal(ops.cast(input_mask, "int32"), 0)[:, None, :]
        blocked = padding if blocked is None else ops.logical_or(blocked, padding)
    if attn_type == "uni":
        causal = ops.arange(qlen, dtype="int32")[None, :] > ops.arange(qlen, dtype="int32")[:, None]
        blocked = causal[None] if blocked is None else ops.logical_or(blocked, causal[None])
    if blocked is not None:
        blocked = ops.broadcast_to(blocked, [batch_size, qlen, qlen])
    return blocked


def _with_memory_columns(mask: Tensor, mlen: int, memory_blocked: Optional[Tensor] = None) -> Tensor:
    """Prepends ``mlen`` memory columns: [B, Q, L] -> [B, Q, mlen + L]; always visible, or
    blocked where ``memory_blocked`` [B, mlen] (bool) is True."""
    if mlen == 0:
        return mask
    shape = backend_ops.dynamic_shape(mask)
    if memory_blocked is None:
        columns = ops.zeros([shape[0], shape[1], mlen], "bool")
    else:
        columns = ops.broadcast_to(memory_blocked[:, None, :], [shape[0], shape[1], mlen])
    return ops.concatenate([columns, mask], axis=-1)


def _segment(tensor: Optional[Tensor], index: int) -> Optional[Tensor]:
    """Segment ``index`` of a [B, S, L] tensor (or None)."""
    return None if tensor is None else tensor[:, index]


class XLNetNetwork(keras.Model):
    """XLNet (two-stream, relative attention, Transformer-XL memory) with the tied LM output layer.

    Variables mirror the original release: word embedding [vocab, d_model], mask_emb [1, 1, d_model],
    per-layer biases and seg_embed (RelativeAttentionBiases), blocks (XLNetBlock), lm_bias [vocab].
    All variables exist right after construction, so a checkpoint can be restored before the first call.

    ``remat`` ("none", "attention" or "full", trainer/layers/remat.py): what the backward pass
    recomputes instead of keeping. A training setting, not the architecture: it changes no
    output, gradient or variable, and neither ``config`` nor ``get_config`` holds it.
    """

    def __init__(self, config: ModelConfig, remat: str = "none", **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.remat = check_remat(remat)
        init = keras.initializers.RandomNormal(stddev=config.initializer_range)
        self.word_embedding = keras.layers.Embedding(config.vocab_size, config.d_model, embeddings_initializer=init,
                                                     name="word_embedding", dtype=self.dtype_policy)
        self.word_embedding.build((None, None))
        self.mask_emb = self.add_weight(name="mask_emb", shape=(1, 1, config.d_model), initializer=init)
        self.lm_bias = self.add_weight(name="lm_bias", shape=(config.vocab_size,), initializer="zeros")
        self.attention_biases = RelativeAttentionBiases(config.n_layer, config.n_head, config.d_head, config.untie_r,
                                                        config.initializer_range, name="attention_biases",
                                                        dtype=self.dtype_policy)
        self.position_encoding = RelativePositionEncoding(config.d_model, config.attn_type, config.bi_data,
                                                          config.clamp_len, config.dropout, name="position_encoding",
                                                          dtype=self.dtype_policy)
        self.blocks = [XLNetBlock(config.d_model, config.n_head, config.d_head, config.d_inner, config.ff_activation,
                                  config.dropout, config.dropatt, config.initializer_range, remat=remat,
                                  name=f"layer_{i}", dtype=self.dtype_policy)
                       for i in range(config.n_layer)]
        # tf.train.Checkpoint does not follow Keras 3's list of layers: give every block its own
        # attribute so checkpoints (model/layer_{i}/...) hold the block weights.
        for i, block in enumerate(self.blocks):
            setattr(self, f"layer_{i}", block)
        self.content_dropout = HashDropout(config.dropout, dtype=self.dtype_policy)
        self.query_dropout = HashDropout(config.dropout, dtype=self.dtype_policy)
        self.output_dropout = HashDropout(config.dropout, dtype=self.dtype_policy)

    # ----------------------------------------------------------------------------------- API
    def call(self, input_ids, segment_ids, perm_mask, target_mapping=None, mems=None, input_mask=None,
             target_positions=None, target_valid=None, training=False):
        """Two-stream forward pass.

        Args:
          input_ids: [B, L] int token ids.  segment_ids: [B, L] int (only equality matters).
          perm_mask: [B, L, L], 1 (or True) where query i may NOT attend to key j.
          target_mapping: [B, P, L] one-hot rows selecting the P predicted positions; all-zero
            rows are padding. Alternatively pass ``target_positions`` [B, P] int32 and
            ``target_valid`` [B, P] (1 real, 0 padding) to skip the one-hot form.
          mems: list of n_layer [B, M, d_model] (float32) or None.
          input_mask: optional [B, L], 1 for real tokens, 0 for padding keys.
        Returns:
          (logits [B, P, vocab_size] float32 of the query stream, new_mems list of n_layer
          [B, min(M + reuse_len, mem_len), d_model] float32 with gradient stopped, or None when mem_len == 0).
        """
        target_positions, target_valid = self._targets(target_mapping, target_positions, target_valid)
        # Only the query stream is read: the last layer skips its content stream's own attention.
        _, query, new_mems = self._forward(input_ids, segment_ids, perm_mask, input_mask, mems, target_positions,
                                           target_valid, training, content_output=False)
        return self.logits(query), new_mems

    def streams(self, input_ids, segment_ids, perm_mask, target_mapping=None, mems=None, input_mask=None,
                target_positions=None, target_valid=None, training=False):
        """Like ``call`` but returns both streams before the LM head:
        (content [B, L, d_model], query [B, P, d_model], new_mems), in the compute dtype."""
        target_positions, target_valid = self._targets(target_mapping, target_positions, target_valid)
        return self._forward(input_ids, segment_ids, perm_mask, input_mask, mems, target_positions, target_valid,
                             training)

    def encode(self, input_ids, segment_ids=None, input_mask=None, mems=None, training=False, mem_mask=None):
        """Content stream only (feature extraction): -> (hidden [B, L, d_model] in the compute dtype, new_mems).

        No permutation: every position sees the whole segment (and memory), or only the past for
        attn_type 'uni'. ``input_mask`` [B, L]: 1 for real tokens, 0 for padding.
        ``mems``: n_layer [B, M, d_model] or None. ``mem_mask`` [B, M]: 1 where a memory position
        is real, 0 where no query may see it (padding, or a segment the document does not have);
        None: all M are visible. ``new_mems`` as for ``call``; their mask is :meth:`memory_mask`.
        """
        hidden, _, new_mems = self._forward(input_ids, segment_ids, None, input_mask, mems, None, None, training,
                                            mem_mask=mem_mask)
        return hidden, new_mems

    def memory_mask(self, input_mask: Optional[Tensor], mem_mask: Optional[Tensor] = None,
                    batch_size: Optional[Tensor] = None, length: Optional[int] = None) -> Optional[Tensor]:
        """The mask [B, min(M + kept, mem_len)] (int32, 1 = visible) of the ``new_mems`` an ``encode``
        call returns, by the rule of the memory itself: the ``mem_mask`` of the memory that call
        read (None: it read none) followed by the ``input_mask`` [B, L] of the positions it
        cached (the first reuse_len, or all with reuse_len 0), the last mem_len kept.
        ``input_mask`` None: every position real (then ``batch_size`` and ``length`` give its shape).
        None when mem_len is 0 (there is no memory).
        """
        if self.config.mem_len == 0:
            return None
        if input_mask is None:
            input_mask = ops.ones([batch_size, length], "int32")
        current = input_mask[:, :self.config.reuse_len] if self.config.reuse_len > 0 else input_mask
        current = ops.cast(current, "int32")
        joined = current if mem_mask is None else ops.concatenate([ops.cast(mem_mask, "int32"), current], axis=1)
        return joined[:, -self.config.mem_len:]

    def encode_segments(self, input_ids, segment_ids=None, input_mask=None, mems=None, training=False,
                        mem_mask=None):
        """The Transformer-XL recurrence over consecutive segments of one batch of documents.

        Args:
          input_ids, segment_ids, input_mask: [B, S, L] (S static): segment s of each document
            (input_mask 1 = real token; a segment a short document does not have is all padding).
          mems, mem_mask: the memory to start from and its mask, as for ``encode`` (None: none).
        Returns:
          (hidden [B, S, L, d_model] in the compute dtype, new_mems): the same as calling
          ``encode`` on segment 0, 1, ..., S-1 in turn, each with the ``new_mems`` of the call
          before and their :meth:`memory_mask`, so memory positions that were padding stay
          invisible. ``new_mems`` is the last call's (None with mem_len 0); its mask is
          :meth:`segments_memory_mask` of ``input_mask`` and ``mem_mask``: pass both on to read
          further segments. ``mems`` without ``mem_mask``: all of that memory is visible.

        Only the last segment carries gradients: the earlier ones run forward only (their
        states, like the memory, have their gradient stopped), so a training step keeps the
        activations of one segment, as Transformer-XL and our pretraining do. With mem_len 0
        the segments are read independently (there is no memory).
        """
        *states, new_mems = self._segments(input_ids, segment_ids, input_mask, mems, training, mem_mask, True)
        return ops.stack(states, axis=1), new_mems

    def encode_last_segment(self, input_ids, segment_ids=None, input_mask=None, mems=None, training=False,
                            mem_mask=None):
        """``encode_segments`` returning only the last segment's states [B, L, d_model] (what a
        sequence head reads: its ``<cls>``) and the new mems, without stacking the others."""
        hidden, new_mems = self._segments(input_ids, segment_ids, input_mask, mems, training, mem_mask, False)
        return hidden, new_mems

    def segments_memory_mask(self, input_mask: Tensor, mem_mask: Optional[Tensor] = None
                             ) -> Optional[Tensor]:
        """The mask of the mems ``encode_segments`` returns, from its [B, S, L] ``input_mask`` and the
        ``mem_mask`` it was given (pass both on with those mems to read further segments)."""
        input_mask = ops.convert_to_tensor(input_mask)
        for index in range(input_mask.shape[1]):
            mem_mask = self.memory_mask(input_mask[:, index], mem_mask)
        return mem_mask

    def _segments(self, input_ids, segment_ids, input_mask, mems, training, mem_mask, all_states: bool):
        """(state of each segment..., new_mems) if ``all_states``, else (last state, new_mems)."""
        input_ids = ops.convert_to_tensor(input_ids)
        if len(input_ids.shape) != 3 or input_ids.shape[1] is None:
            raise ValueError(f"input_ids must be [batch, segments, length] with a static number of segments, "
                             f"got shape {input_ids.shape}")
        count = input_ids.shape[1]
        if mems is not None and mem_mask is None:
            mem_mask = ops.ones(backend_ops.dynamic_shape(mems[0])[:2], "int32")
        states = []
        for index in range(count):
            last = index == count - 1
            ids = input_ids[:, index]
            if mems is not None:
                # A segment starts once the memory it reads is complete. Without this, TensorFlow's
                # executor runs every segment's work that is ready (embeddings, the first layers) at
                # once, and a step's peak memory grows with the number of segments (measured, tiny
                # preset, 8 segments: 374 MB instead of 294 MB; docs/benchmarks.md, "Long documents").
                ids = backend_ops.after(ids, mems[-1])
            # Earlier segments run outside every gradient tape: nothing of theirs is kept for a
            # backward pass (their memory would have its gradient stopped anyway).
            with backend_ops.forward_only(not last):
                hidden, new_mems = self.encode(ids, _segment(segment_ids, index),
                                               _segment(input_mask, index), mems, training, mem_mask)
            if not last:
                hidden = ops.stop_gradient(hidden)
                if new_mems is not None:
                    mem_mask = self.memory_mask(_segment(input_mask, index), mem_mask,
                                                backend_ops.dynamic_shape(input_ids)[0], input_ids.shape[2])
                else:
                    mem_mask = None
            if all_states or last:
                states.append(hidden)
            mems = new_mems
        return (*states, mems)

    def logits(self, query: Tensor) -> Tensor:
        """[B, P, d_model] query-stream output -> [B, P, vocab] float32 via the tied embedding plus lm_bias."""
        table = ops.cast(self.word_embedding.embeddings, query.dtype)
        shape = backend_ops.dynamic_shape(query)
        # A plain 2-D matmul (backend_ops.tied_logits): on CPU about 1.5x faster than the equivalent batched einsum.
        logits = backend_ops.tied_logits(ops.reshape(query, [-1, self.config.d_model]), table,
                                         ops.cast(self.lm_bias, query.dtype))
        return ops.cast(ops.reshape(logits, [shape[0], shape[1], self.config.vocab_size]), "float32")

    def initial_mems(self, batch_size: int) -> Optional[list[Tensor]]:
        """Zero memory [B, mem_len, d_model] per layer (what the original starts from), or None if mem_len == 0."""
        if self.config.mem_len == 0:
            return None
        return [ops.zeros([batch_size, self.config.mem_len, self.config.d_model], "float32")
                for _ in range(self.config.n_layer)]

    # ------------------------------------------------------------------------------ internals
    @staticmethod
    def _targets(target_mapping, target_positions, target_valid):
        """(target_positions [B, P] int32, target_valid [B, P] float32) from either form."""
        if target_positions is None:
            if target_mapping is None:
                raise ValueError("pass target_mapping [B, P, L] or target_positions [B, P]")
            target_positions = backend_ops.argmax(target_mapping)
            target_valid = ops.sum(ops.cast(target_mapping, "float32"), axis=-1)
        elif target_valid is None:
            target_valid = ops.ones_like(target_positions, "float32")
        return target_positions, target_valid

    def _cached_rows(self, layer_input: Tensor, norm) -> Tensor:
        """The rows of a layer's input the memory keeps; ``norm`` (a LayerNormalization or None) is
        still to be applied to ``layer_input`` (full remat), and only to those rows: it is per row."""
        if norm is None:
            return layer_input
        rows = layer_input[:, :self.config.reuse_len] if self.config.reuse_len > 0 else layer_input
        return ops.stop_gradient(norm(rows))

    def _cache(self, layer_input: Tensor, mem: Optional[Tensor]) -> Tensor:
        """New memory of one layer: its input's first reuse_len positions after the old memory, last mem_len kept."""
        current = layer_input[:, :self.config.reuse_len] if self.config.reuse_len > 0 else layer_input
        current = ops.cast(current, "float32")
        joined = current if mem is None else ops.concatenate([ops.cast(mem, "float32"), current], axis=1)
        return ops.stop_gradient(joined[:, -self.config.mem_len:])

    def _forward(self, input_ids, segment_ids, perm_mask, input_mask, mems: Optional[Sequence[Tensor]],
                 target_positions, target_valid, training, content_output=True, mem_mask=None):
        """(content stream, query stream, new_mems); ``content_output=False``: the content stream's
        output is None (two streams only), which the last layer then does not compute. ``mem_mask``
        [B, M] (1 = visible) hides memory positions from both streams."""
        config = self.config
        if mems is not None and len(mems) != config.n_layer:
            raise ValueError(f"mems must hold one tensor per layer ({config.n_layer}), got {len(mems)}")
        dtype = self.compute_dtype
        input_ids = ops.convert_to_tensor(input_ids)
        batch_size, qlen = backend_ops.dynamic_shape(input_ids)[0], input_ids.shape[1]
        mlen = 0 if mems is None else mems[0].shape[1]
        klen = mlen + qlen
        static_batch = input_ids.shape[0]
        if config.bi_data and static_batch is not None and static_batch % 2:
            raise ValueError(f"bi_data needs an even batch ([forward half, backward half]), got batch {static_batch}")
        two_stream = target_positions is not None

        blocked = _blocked(perm_mask, input_mask, qlen, config.attn_type, batch_size)
        memory_blocked = None
        if mem_mask is not None and mlen > 0:
            mem_mask = ops.convert_to_tensor(mem_mask)
            if len(mem_mask.shape) != 2 or mem_mask.shape[1] not in (None, mlen):
                raise ValueError(f"mem_mask must be [batch, {mlen}] (one column per memory position), "
                                 f"got shape {mem_mask.shape}")
            memory_blocked = ops.equal(ops.cast(mem_mask, "int32"), 0)
            if blocked is None:
                blocked = ops.zeros([batch_size, qlen, qlen], "bool")
        content_mask = query_mask = None
        if blocked is not None:
            # The content stream always sees its own position; the query stream only what perm_mask allows.
            content_mask = _with_memory_columns(ops.logical_and(blocked, ops.logical_not(ops.eye(qlen, dtype="bool"))),
                                                mlen, memory_blocked)
            if two_stream:
                query_mask = _with_memory_columns(backend_ops.batch_gather(blocked, target_positions), mlen,
                                                  memory_blocked)

        content_segment_diff = query_segment_diff = None
        if segment_ids is not None:
            segment_ids = ops.cast(segment_ids, "int32")
            key_segments = ops.concatenate([ops.zeros([batch_size, mlen], "int32"), segment_ids], axis=1)
            content_segment_diff = ops.not_equal(segment_ids[:, :, None], key_segments[:, None, :])
            if two_stream:
                target_segments = backend_ops.batch_gather(segment_ids, target_positions)
                query_segment_diff = ops.not_equal(target_segments[:, :, None], key_segments[:, None, :])

        h = self.content_dropout(self.word_embedding(input_ids), training=training)
        g = None
        if two_stream:
            mask_emb = ops.cast(self.mask_emb, dtype)
            g = ops.tile(mask_emb, [batch_size, backend_ops.dynamic_shape(target_positions)[1], 1])
            g = self.query_dropout(g, training=training)
        pos_emb = self.position_encoding(klen=klen, qlen=qlen, training=training)

        new_mems = [] if config.mem_len > 0 else None
        # Under full remat the streams pass between blocks before the last LayerNorm, which the next
        # block applies (XLNetBlock): a recomputed block then never runs its last matmul.
        shifted = self.remat == "full"
        norm = None
        for i, block in enumerate(self.blocks):
            mem = None if mems is None else mems[i]
            if new_mems is not None:
                new_mems.append(self._cache(self._cached_rows(h, norm), mem))
            last = i == len(self.blocks) - 1
            h, g = block(h, g, training=training, content_output=content_output or not last, input_norm=norm,
                         output_norm=not shifted, pos_emb=pos_emb, mem=mem, content_mask=content_mask,
                         query_mask=query_mask, query_positions=target_positions, query_valid=target_valid,
                         content_segment_diff=content_segment_diff, query_segment_diff=query_segment_diff,
                         **self.attention_biases(layer_index=i))
            norm = block.feed_forward.layer_norm if shifted else None
        if norm is not None:
            h, g = (None if stream is None else norm(stream) for stream in (h, g))
        if h is None:
            self.output_dropout.draw_seed(training)  # the seed a call on h draws: g's dropout bits stay the same
        else:
            h = self.output_dropout(h, training=training)
        if g is not None:
            g = self.output_dropout(g, training=training)
        return h, g, new_mems

    def get_config(self) -> dict:
        return {"name": self.name, "config": self.config.to_dict(), "dtype": self.dtype_policy.name}

    @classmethod
    def from_config(cls, config: dict) -> "XLNetNetwork":
        config = dict(config)
        return cls(ModelConfig.from_dict(config.pop("config")), **config)


def head_model_config(model: keras.Model, **fields: Any) -> dict:
    """``get_config`` of a model wrapping an XLNetNetwork (a fine-tuning head): its own ``fields``
    and the serialised network; :func:`head_model_from_config` reverses it."""
    return {"name": model.name, **fields, "network": keras.saving.serialize_keras_object(model.network)}


def head_model_from_config(cls: type, config: dict) -> keras.Model:
    """The head model ``cls`` rebuilt from :func:`head_model_config`'s output."""
    config = dict(config)
    network = keras.saving.deserialize_keras_object(config.pop("network"), custom_objects={"XLNetNetwork": XLNetNetwork})
    return cls(network, **config)


def build_network(config: ModelConfig | str, dtype: Optional[str] = None, remat: str = "none") -> XLNetNetwork:
    """Builds an XLNet network (all variables created) from a ModelConfig or a preset name ('tiny', 'base', 'large').

    ``dtype``: a Keras dtype policy name ('float32', 'mixed_bfloat16', 'mixed_float16'); default:
    the global policy. Variables are always float32; mixed policies compute in 16 bits.
    ``remat``: what the backward pass recomputes (XLNetNetwork), the training setting LoopConfig.remat.
    """
    if isinstance(config, str):
        config = model_preset(config)
    return XLNetNetwork(config, remat=remat, name="xlnet", dtype=dtype)
