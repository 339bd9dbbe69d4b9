"""The model directory (written by `xlnet train` and `xlnet import-checkpoint`, read by training
--init-checkpoint and by `xlnet export`): model_config.json, spiece.model, special_ids.json and
checkpoints/. Paths go through tf.io.gfile so a directory may live on Cloud Storage."""
from __future__ import annotations

import json
import posixpath
from typing import Mapping

from trainer.config import ModelConfig


def write_text(path: str, text: str) -> None:
    """Writes ``text`` to a local or gs:// path."""
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(text)


def write_model_files(model_dir: str, model_config: ModelConfig, special_ids: Mapping[str, int],
                      vocab_path: str) -> None:
    """Writes model_config.json and special_ids.json and copies the SentencePiece model to spiece.model."""
    import tensorflow as tf

    model_dir = str(model_dir)
    tf.io.gfile.makedirs(model_dir)
    write_text(posixpath.join(model_dir, "model_config.json"),
               json.dumps(model_config.to_dict(), indent=2, sort_keys=True) + "\n")
    write_text(posixpath.join(model_dir, "special_ids.json"),
               json.dumps(dict(special_ids), indent=2, sort_keys=True) + "\n")
    target = posixpath.join(model_dir, "spiece.model")
    if str(vocab_path) != target:
        tf.io.gfile.copy(str(vocab_path), target, overwrite=True)
