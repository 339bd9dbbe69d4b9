"""How a text without a context is framed for natural-order scoring: ``<eod>`` + text + ``<eod>``.

One rule for `xlnet score` (trainer/commands/score.py) and the served ``score`` signature
(trainer/serving/text_generation_signatures.py). In the pretraining streams a document is
preceded and followed by ``<eod>`` (`xlnet preprocess --eod`), so the leading ``<eod>`` is the
context the first token is predicted from (a scored token needs at least one context token to
see), and the closing ``<eod>`` is scored: the likelihood of the document ending there.
"""
from __future__ import annotations

import tensorflow as tf

# Context tokens the framing puts in front of a text: the leading <eod>.
EOD_CONTEXT_TOKENS = 1


def eod_framed(token_ids: tf.RaggedTensor, eod_id: int) -> tf.RaggedTensor:
    """int [batch, (n)] token ids -> [batch, (n + 2)]: each row as ``<eod>`` + its ids + ``<eod>``;
    its first ``EOD_CONTEXT_TOKENS`` are the context (not scored)."""
    token_ids = tf.cast(token_ids, tf.int32)
    eod = tf.fill(tf.stack([token_ids.nrows(), 1]), tf.constant(eod_id, tf.int32))
    eod = tf.RaggedTensor.from_tensor(eod, row_splits_dtype=token_ids.row_splits.dtype)
    return tf.concat([eod, token_ids, eod], axis=1)
