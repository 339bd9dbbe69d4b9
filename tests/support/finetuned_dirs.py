"""Model directories as `xlnet finetune` writes them, with seeded random weights, for export tests."""
from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from trainer.configs.finetuning import FinetuneConfig
from trainer.models.config import model_preset, sequence_model_config
from trainer.models.network import build_network
from trainer.models.sequence_model import XLNetForSequenceTask
from trainer.runtime.model_dir import ModelDirectory


def write_finetuned_dir(path: Path, vocab, task: str, max_seq_length: int, labels=None, text_pair: bool = False,
                        max_segments: int = 1, mem_len: int = 0, seed: int = 3) -> XLNetForSequenceTask:
    """A 2-layer tiny model fine-tuned for ``task`` (as `--set max_segments=N --set mem_len=M` when
    given), its weights seeded with ``seed``; -> the head, to compare served outputs with."""
    model = sequence_model_config(model_preset("tiny").replace(vocab_size=vocab.vocab_size, n_layer=2), mem_len)
    directory = ModelDirectory(str(path))
    directory.write_model_files(model, vocab.special_ids.to_dict(), vocab.path, uncased=False)
    directory.write_finetune_files(FinetuneConfig(task=task, max_seq_length=max_seq_length, max_segments=max_segments,
                                                  text_pair=text_pair), labels)
    tf.keras.utils.set_random_seed(seed)
    network = build_network(model)
    head = XLNetForSequenceTask(network, task, len(labels) if labels else 1)
    # a larger head than initialisation gives, so that probabilities differ visibly between texts
    head.logits_proj.kernel.assign(head.logits_proj.kernel * 50.0)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=network, head=head), directory.checkpoints, 1).save()
    return head
