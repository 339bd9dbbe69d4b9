"""`xlnet export --format huggingface|tf1`: a model directory -> another framework's checkpoint layout.

* ``huggingface``: trainer/conversion/huggingface_format.py, loaded by transformers' XLNetLMHeadModel (or,
  for a fine-tuned model directory, XLNetForSequenceClassification / XLNetForMultipleChoice /
  XLNetForQuestionAnswering) and XLNetTokenizer.
* ``tf1``: trainer/conversion/tf1_format.py, the original 2019 release layout. A SQuAD model's head is
  written under run_squad.py's variable names; the other heads are not: the original names their
  variables after its own --task_name.

The SavedModel (trainer/serving/saved_model.py) stays the default format of `xlnet export`.
"""
from __future__ import annotations

from typing import Optional

from tfrecords.errors import UsageError

# What marks an output directory as already holding an export of each format.
EXISTING = {"huggingface": "config.json", "tf1": "xlnet_model.ckpt.index"}


class FormatExportError(UsageError):
    """An --output that cannot take the export."""


def export_format(model_dir: str, output: str, export_format: str, checkpoint: Optional[str] = None,
                  uncased: Optional[bool] = None) -> tuple[list[str], str]:
    """Writes ``model_dir`` to ``output`` in ``export_format`` ('huggingface' or 'tf1'); returns the
    files written and a note on what was written. Errors are FormatExportError, HuggingFaceFormatError,
    TF1FormatError or StorageError (RestoreError among them), each naming the file, flag or field;
    an --output that is a file, read-only or unreachable names --output, and an --output this
    export created is removed when it fails."""
    from trainer.runtime import file_system
    from trainer.runtime.restore import checkpoint_to_read, open_model_directory, restore_model
    from trainer.runtime.storage import check_output_directory, failures_named

    directory = open_model_directory(model_dir)
    check_output_directory(output)  # a file, unreachable: said before the model is restored
    existing = output.rstrip("/") + "/" + EXISTING[export_format]
    with failures_named(output, "read", "--output"):
        # A local --output this export creates is removed if it fails (no recursive delete on a bucket).
        exported, created = file_system.exists(existing), "://" not in output and not file_system.exists(output)
    if exported:
        raise FormatExportError(f"--output {output} already holds an export ({existing}); choose a new directory")
    restored = restore_model(directory, checkpoint_to_read(directory, checkpoint))
    try:
        with failures_named(output, "written", "--output"):
            return _write(output, export_format, directory, restored, uncased)
    except BaseException:
        if created and file_system.exists(output):
            file_system.rmtree(output)  # this export made it: nothing half-written is left
        raise


def _write(output: str, export_format: str, directory, restored, uncased: Optional[bool]) -> tuple[list[str], str]:
    """Writes the restored model in ``export_format``; returns the files and the note."""
    from trainer.conversion.huggingface_format import TASK_ARCHITECTURES, write_huggingface_directory
    from trainer.runtime.restore import resolve_uncased

    network, head, head_spec = restored.network, restored.head, restored.head_spec
    if export_format == "huggingface":
        casing, why = resolve_uncased(directory, uncased)
        # The directory's own config, not the whole-sequence one the network was built with, so
        # that the export records the pretraining settings too.
        files = write_huggingface_directory(output, network, directory.model_config, directory.special_ids,
                                            directory.sp_model_proto, casing, head, head_spec)
        loader = "XLNetLMHeadModel" if head_spec is None else TASK_ARCHITECTURES[head_spec.task]
        return files, (f"load with transformers' {loader}.from_pretrained and XLNetTokenizer.from_pretrained "
                       f"({'uncased' if casing else 'cased'} text: {why})")
    from trainer.conversion.tf1_format import write_tf1_directory  # TensorFlow's checkpoint format

    squad = head_spec is not None and head_spec.task == "squad"
    files = write_tf1_directory(output, network, directory.sp_model_proto, head if squad else None)
    note = "the original release layout"
    if squad:
        note += " (with the squad head under run_squad.py's names: start_logits, end_logits, answer_class)"
    elif head_spec is not None:
        note += f" (the encoder only: the {head_spec.task} head is not written, the original names it per task)"
    return files, note
