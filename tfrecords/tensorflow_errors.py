"""TensorFlow's errors told in one line, for the messages of the data checks and of training.

TensorFlow wraps an op's error in the names of the function and the op that raised it
(``{{function_node ...}} ... [Op:IteratorGetNext] name:``) and sometimes adds lines of graph
context; a message to a user needs only the kind of error and what it says. Used by
tfrecords/verification.py (a damaged shard's report), trainer/runtime/controller.py (the training
input that cannot be read) and `xlnet inspect` (a data directory that cannot be read). Pure Python:
no TensorFlow import, the rule of tfrecords/.
"""
from __future__ import annotations

import re

# What TensorFlow wraps around an error's message: "{{function_node ...}} ... [Op:IteratorGetNext] name:".
_TF_FUNCTION_NAME = re.compile(r"\{\{function_node [^}]*\}\}")
_TF_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\].*$")


def error_text(error: BaseException) -> str:
    """TensorFlow's error in one line: its kind and its message without the op and function names.

    Args:
      error: any exception; a ``tf.errors.OpError``'s ``message`` is used when it has one.

    Returns:
      ``"<ErrorClass>: <first line of the message>"``, e.g. ``"DataLossError: corrupted record at 12"``.
    """
    lines = (getattr(error, "message", "") or str(error)).strip().splitlines()
    message = _TF_FUNCTION_NAME.sub("", _TF_OP_SUFFIX.sub("", lines[0] if lines else ""))
    return f"{type(error).__name__}: {message.strip()}"
