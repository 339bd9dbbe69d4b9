"""TensorFlow's errors told in one line, for the messages of the data checks and of training.

TensorFlow wraps an op's error in the names of the function and the op that raised it
(``{{function_node ...}} ... [Op:IteratorGetNext] name:``) and sometimes adds lines of graph
context; a message to a user needs only the kind of error and what it says (:func:`error_text`);
and whether a filesystem error means storage that did not answer (:func:`is_unreachable`), the
one rule of trainer/runtime/storage.py and of the fine-tuning input files. Used by
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


# What TensorFlow's GCS filesystem says when the network, not the path, failed: libcurl's
# resolve (6), connect (7), timeout (28) and TLS (35) failures, and its retries given up.
_UNREACHABLE = ("libcurl code 6 ", "libcurl code 7 ", "libcurl code 28 ", "libcurl code 35 ",
                "retry attempts failed")
# What to do about it: the command line may well be right.
UNREACHABLE_ADVICE = "no network, or the storage service is down; the command line may be right, try again later"


def is_unreachable(message: str) -> bool:
    """Whether a filesystem error's ``message`` says the storage did not answer (no network, a host
    that cannot be resolved or connected to, retries exhausted) rather than that the path is wrong."""
    return any(mark in message for mark in _UNREACHABLE)
