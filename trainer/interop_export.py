"""`xlnet export --format huggingface|tf1`: a model directory -> another framework's checkpoint layout.

* ``huggingface``: trainer/huggingface_format.py, loaded by transformers' XLNetLMHeadModel (or,
  for a fine-tuned model directory, XLNetForSequenceClassification / XLNetForMultipleChoice)
  and XLNetTokenizer.
* ``tf1``: trainer/tf1_format.py, the original 2019 release layout. A fine-tuned model's head is
  not written there: the original names its head variables after its own --task_name.

The SavedModel (trainer/export.py) stays the default format of `xlnet export`.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional

FORMATS = ("savedmodel", "huggingface", "tf1")
# What marks an output directory as already holding an export of each format.
EXISTING = {"huggingface": "config.json", "tf1": "xlnet_model.ckpt.index"}


def restore_model(directory, checkpoint: str, head_spec):
    """The network of ``directory`` (its own model_config.json, so the export records it whole)
    and, for a fine-tuned directory, its head, restored from ``checkpoint``."""
    import tensorflow as tf

    from trainer.export import ExportError
    from trainer.network import build_network

    network = build_network(directory.model_config)
    head = None if head_spec is None else head_spec.build(network)
    objects = {"model": network} if head is None else {"model": network, "head": head}
    try:
        status = tf.train.Checkpoint(**objects).restore(checkpoint)
        status.assert_existing_objects_matched()
    except (tf.errors.OpError, IndexError) as error:
        raise ExportError(f"cannot read checkpoint {checkpoint!r}: {getattr(error, 'message', error)}") from error
    except (AssertionError, ValueError) as error:
        raise ExportError(f"checkpoint {checkpoint!r} does not match model_config.json"
                          f"{'' if head is None else ' and the fine-tuning head'}: {error}") from error
    status.expect_partial()  # optimizer slots, step, mems and rng state are training-only
    return network, head


def export_format(model_dir: str, output: str, export_format: str, checkpoint: Optional[str] = None,
                  uncased: Optional[bool] = None) -> tuple[list[str], str]:
    """Writes ``model_dir`` to ``output`` in ``export_format`` ('huggingface' or 'tf1'); returns the
    files written and a note on what was written. Errors are ExportError, HuggingFaceFormatError,
    TF1FormatError or StorageError, each naming the file, flag or field."""
    import tensorflow as tf

    from trainer.export import ExportError, export_checkpoint, open_model_directory, resolve_uncased
    from trainer.head_files import read_head_spec
    from trainer.huggingface_format import TASK_ARCHITECTURES, write_huggingface_directory
    from trainer.tf1_format import write_tf1_directory

    directory = open_model_directory(model_dir)
    existing = output.rstrip("/") + "/" + EXISTING[export_format]
    if tf.io.gfile.exists(existing):
        raise ExportError(f"--output {output} already holds an export ({existing}); choose a new directory")
    checkpoint = export_checkpoint(directory, checkpoint)
    head_spec = read_head_spec(directory)
    network, head = restore_model(directory, checkpoint, head_spec)
    if export_format == "huggingface":
        casing, why = resolve_uncased(directory, uncased)
        files = write_huggingface_directory(output, network, directory.special_ids, directory.sp_model_proto,
                                            casing, head, head_spec)
        loader = "XLNetLMHeadModel" if head_spec is None else TASK_ARCHITECTURES[head_spec.task]
        return files, (f"load with transformers' {loader}.from_pretrained and XLNetTokenizer.from_pretrained "
                       f"({'uncased' if casing else 'cased'} text: {why})")
    files = write_tf1_directory(output, network, directory.sp_model_proto)
    note = "the original release layout"
    if head_spec is not None:
        note += f" (the encoder only: the {head_spec.task} head is not written, the original names it per task)"
    return files, note


def run_format_export(args: argparse.Namespace) -> int:
    """`xlnet export --format huggingface|tf1`: prints where the files went; 2 with a message on bad input."""
    from trainer.export import ExportError
    from trainer.huggingface_format import HuggingFaceFormatError
    from trainer.storage import StorageError
    from trainer.tf1_format import TF1FormatError

    started = time.time()
    try:
        files, note = export_format(args.model_dir, args.output, args.format, checkpoint=args.checkpoint,
                                    uncased=args.uncased)
    except (ExportError, HuggingFaceFormatError, TF1FormatError, StorageError) as error:
        print(f"xlnet export: error: {error}", file=sys.stderr)
        return 2
    print(f"{args.format} export of {args.model_dir} written to {args.output} in {time.time() - started:.1f}s: "
          f"{', '.join(name.rsplit('/', 1)[-1] for name in files)}; {note}", flush=True)
    return 0
