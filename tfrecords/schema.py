"""Feature schema of an XLNet pretraining record: the one definition both halves use.

A record is one training row of length ``seq_len``:
``[reuse_len tokens of context] + A + <sep> + B + <sep> + <cls>``.
Records of one text stream advance by ``reuse_len`` tokens, so the trainer can carry
Transformer-XL memory from record ``stream_pos`` to ``stream_pos + 1`` of the same stream.

Per-position features (int64 lists of length ``seq_len``):
  input_ids    token ids
  segment_ids  0 for context + A + first <sep>, 1 for B + second <sep>, 2 for <cls>
  is_masked    1 where the position is a prediction target (span mask), else 0
  word_start   1 where the piece starts a word (lets the trainer resample span masks)
Scalar features (int64 lists of length 1):
  label        1 when B is A's true continuation, 0 when B is a random span
  stream_id    text stream the record belongs to; with bi_data, ids >= num_streams
               are the reversed copies (stream s + num_streams reverses stream s)
  stream_pos   index of the record within its stream (0, 1, 2, ...)
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

# Bumped whenever a feature is added, removed or changes meaning; the reader refuses a
# manifest whose format_version differs.
FORMAT_VERSION = 1

SEQUENCE_FEATURES = ("input_ids", "segment_ids", "is_masked", "word_start")
SCALAR_FEATURES = ("label", "stream_id", "stream_pos")
ALL_FEATURES = SEQUENCE_FEATURES + SCALAR_FEATURES

# What the reader (tfrecords/reader.py) hands the trainer per row: the model's inputs, with
# ``perm_seed`` [2] (the row's permutation seed) in place of the stored word starts and label...
MODEL_FEATURES = ("input_ids", "segment_ids", "is_masked", "perm_seed")
# ...plus where the row sits in its text stream (memory bookkeeping, mask resampling).
COMPACT_FEATURES = MODEL_FEATURES + ("stream_id", "stream_pos")

SEG_A = 0
SEG_B = 1
SEG_CLS = 2


def feature_spec(seq_len: int) -> dict:
    """tf.io.parse_example spec for records of length ``seq_len``."""
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([seq_len], tf.int64) for name in SEQUENCE_FEATURES}
    spec.update({name: tf.io.FixedLenFeature([], tf.int64) for name in SCALAR_FEATURES})
    return spec


def serialize_record(record: Mapping[str, object]) -> bytes:
    """Serialises one record (a mapping with every feature of the schema) to tf.train.Example bytes."""
    from tensorflow.core.example import example_pb2

    missing = [name for name in ALL_FEATURES if name not in record]
    if missing:
        raise ValueError(f"record lacks schema features: {', '.join(missing)}")
    example = example_pb2.Example()
    features = example.features.feature
    for name in SEQUENCE_FEATURES:
        features[name].int64_list.value.extend(np.asarray(record[name], dtype=np.int64).tolist())
    for name in SCALAR_FEATURES:
        features[name].int64_list.value.append(int(record[name]))
    return example.SerializeToString(deterministic=True)


def parse_records(serialized, seq_len: int) -> dict:
    """Parses a batch (or a scalar) of serialized records into int32 tensors."""
    import tensorflow as tf

    parse = tf.io.parse_example if serialized.shape.rank else tf.io.parse_single_example
    parsed = parse(serialized, feature_spec(seq_len))
    return {name: tf.cast(value, tf.int32) for name, value in parsed.items()}
