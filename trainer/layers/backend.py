"""The one test that chooses a TensorFlow fast path: the layers, the models and the optimizer use their
``tensorflow_*.py`` modules (imported on first use, so no other backend loads TensorFlow) when Keras
runs on TensorFlow, and ``keras.ops`` elsewhere."""
from __future__ import annotations

import keras


def on_tensorflow() -> bool:
    """Whether Keras runs on TensorFlow."""
    return keras.backend.backend() == "tensorflow"
