"""Reading texts several segments long inside the serving graph: the Transformer-XL recurrence.

A multi-segment export (``xlnet export --max-segments N``, or a model fine-tuned with
``max_segments`` N) lays a text out over N consecutive segments of ``max_length``
(trainer/serving/text_encoder.py, ``encode_segments``) and reads them in order, each segment
seeing the last ``mem_len`` states of the ones before it: what ``XLNetNetwork.encode_segments``
does in Python, as one ``tf.while_loop`` here, so that one SavedModel call reads a whole text.

* The first segment read sees no memory (as in ``encode_segments``); from the second on the memory
  has a fixed shape, [batch, mem_len, d_model] per layer, the positions no segment has filled yet
  being zeros that the memory mask hides, so the loop's state never changes shape. A position the
  mask hides receives no attention, so this equals ``encode_segments`` (whose memory grows) to
  float rounding.
* Leading segments that are padding in every row of the batch are not run: a short text's
  segments before its first piece hold no token any later one could see (their memory is
  hidden), so skipping them changes no state of a real position. A batch of short texts costs
  about one segment however large N is.
* ``sequence_output`` of a position that holds padding (input_mask 0) is 0, in the segments run
  and in those skipped alike.
"""
from __future__ import annotations

import tensorflow as tf


def check_recurrent(network) -> None:
    """The network must keep a memory of whole segments: mem_len > 0 and reuse_len 0 (every position
    of a segment is cached, not the first reuse_len as in pretraining)."""
    config = network.config
    if config.mem_len < 1 or config.reuse_len != 0:
        raise ValueError(f"reading several segments needs a network with mem_len > 0 and reuse_len 0, "
                         f"got mem_len {config.mem_len} and reuse_len {config.reuse_len}")


def first_real_segment(input_mask: tf.Tensor) -> tf.Tensor:
    """int32 scalar: the first segment of a [batch, segments, length] ``input_mask`` holding a real
    token in some row (0 when none does)."""
    real = tf.reduce_any(input_mask > 0, axis=[0, 2])
    return tf.argmax(tf.cast(real, tf.int32), output_type=tf.int32)


def read_segments(network, input_ids: tf.Tensor, segment_ids: tf.Tensor, input_mask: tf.Tensor) -> tf.Tensor:
    """The recurrence over int32 [batch, segments, L] inputs (L static, segments any) ->
    float32 content states [batch, segments, L, d_model]; 0 at padding positions.

    Segment s reads the memory of segments first..s-1 (the last ``network.config.mem_len``
    positions, padding and absent segments hidden by the memory mask), where ``first`` is
    :func:`first_real_segment`.
    """
    check_recurrent(network)
    config = network.config
    segments, length = tf.shape(input_ids)[1], input_ids.shape[2]
    first = first_real_segment(input_mask)
    states = tf.TensorArray(tf.float32, size=segments - first, element_shape=[None, length, config.d_model])

    def read_one(index, mems, mem_mask, states):
        mask = input_mask[:, index]
        hidden, new_mems = network.encode(input_ids[:, index], segment_ids[:, index], input_mask=mask, mems=mems,
                                          mem_mask=mem_mask, training=False)
        new_mask = network.memory_mask(mask, mem_mask)
        return index + 1, new_mems, new_mask, states.write(index - first, tf.cast(hidden, tf.float32))

    # The first segment read has no memory to see: read without one (as encode_segments does, and a
    # one-segment export costs), then its memory padded to mem_len positions with hidden ones, so
    # the loop's state keeps one shape.
    index, mems, mem_mask, states = read_one(first, None, None, states)
    missing = config.mem_len - min(length, config.mem_len)
    mems = [tf.pad(mem, [[0, 0], [missing, 0], [0, 0]]) for mem in mems]
    mem_mask = tf.pad(mem_mask, [[0, 0], [missing, 0]])
    _, _, _, states = tf.while_loop(lambda index, *_: index < segments, read_one, [index, mems, mem_mask, states])
    read = tf.transpose(states.stack(), [1, 0, 2, 3])  # [batch, segments - first, L, d_model]
    read = tf.pad(read, [[0, 0], [first, 0], [0, 0], [0, 0]])
    return read * tf.cast(input_mask > 0, tf.float32)[..., None]
