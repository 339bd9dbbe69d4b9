"""The model directory (written by `xlnet train` and `xlnet import-checkpoint`, read by training
--init-checkpoint and by `xlnet export`): model_config.json, spiece.model, special_ids.json,
text_normalization.json (when known) and checkpoints/. Paths go through tf.io.gfile so a
directory may live on Cloud Storage."""
from __future__ import annotations

import json
import posixpath
from typing import Mapping

from trainer.config import ModelConfig

# How the training text was normalised ({"uncased": bool}), so that serving normalises alike.
# Written by `xlnet train` from the data's manifest; an imported release does not say.
TEXT_NORMALIZATION = "text_normalization.json"


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to a local or gs:// path."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(text)


def write_model_files(model_dir: str, model_config: ModelConfig, special_ids: Mapping[str, int],
                      vocab_path: str, uncased: bool | None = None) -> None:
    """Writes model_config.json and special_ids.json, copies the SentencePiece model to spiece.model
    and, when ``uncased`` is known (not None), writes text_normalization.json."""
    import tensorflow as tf

    model_dir = str(model_dir)
    tf.io.gfile.makedirs(model_dir)
    write_text(posixpath.join(model_dir, "model_config.json"),
               json.dumps(model_config.to_dict(), indent=2, sort_keys=True) + "\n")
    write_text(posixpath.join(model_dir, "special_ids.json"),
               json.dumps(dict(special_ids), indent=2, sort_keys=True) + "\n")
    if uncased is not None:
        write_text(posixpath.join(model_dir, TEXT_NORMALIZATION), json.dumps({"uncased": bool(uncased)}) + "\n")
    target = posixpath.join(model_dir, "spiece.model")
    if str(vocab_path) != target:
        tf.io.gfile.copy(str(vocab_path), target, overwrite=True)


def read_uncased(model_dir: str) -> bool | None:
    """The casing recorded in ``model_dir``'s text_normalization.json, or None when it has none."""
    import tensorflow as tf

    path = posixpath.join(str(model_dir), TEXT_NORMALIZATION)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        try:
            value = json.loads(handle.read()).get("uncased")
        except (ValueError, AttributeError):
            value = None
    if not isinstance(value, bool):
        raise ValueError(f"{path}: expected {{\"uncased\": true|false}}")
    return value
