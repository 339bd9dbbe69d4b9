"""TensorFlow's errors in one line (tfrecords/tensorflow_errors.py)."""
from __future__ import annotations

import tensorflow as tf

from tfrecords.tensorflow_errors import error_text


def test_the_kind_and_the_first_line_without_function_and_op_names():
    error = tf.errors.DataLossError(None, None, "{{function_node __inference_next_7}} corrupted record at 12 "
                                                "[Op:IteratorGetNext] name: \nmore context")
    assert error_text(error) == "DataLossError: corrupted record at 12"


def test_any_exception_is_told_by_its_class_and_message():
    assert error_text(ValueError("no such file")) == "ValueError: no such file"
    assert error_text(OSError()) == "OSError: "
