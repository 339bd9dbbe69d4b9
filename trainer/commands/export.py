"""`xlnet export`: a model directory -> a serving SavedModel under OUTPUT/<version>/."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time

from tfrecords.errors import UsageError
from tfrecords.interruption import ending_on_signals
from trainer.serving.export_config import ExportConfig  # TensorFlow-free: --help imports no TensorFlow

CASING_DEFAULT = "default: as training recorded, else detected from the vocabulary"


def exit_quietly_on_signals(args: argparse.Namespace) -> contextlib.AbstractContextManager:
    """While the block runs, SIGINT and SIGTERM end the process at once: what the export wrote is
    removed, one line says so, and the status is 128 + the signal's number
    (tfrecords/interruption.py)."""
    return ending_on_signals("export", lambda: _abandon(args))


def _abandon(args: argparse.Namespace) -> str:
    """Removes what an interrupted export wrote, where it can; says what is left."""
    if args.format != "savedmodel":
        return f"{args.output} may hold a partial {args.format} export"
    from trainer.serving.publishing import abandon_export

    try:
        complete = abandon_export()
    except Exception as error:  # the handler must still exit; the next export removes the staging
        return f"what it wrote could not all be removed ({error})"
    return "nothing was published" if complete is None else f"{complete} had been published"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `xlnet export`, and its interrupted exit status after the shared ones."""
    parser.epilog = "; ".join(filter(None, [parser.epilog, "130 or 143 interrupted by SIGINT or SIGTERM (a "
                                                         "SavedModel export then publishes nothing)"]))
    parser.add_argument("--model-dir", required=True,
                        help="model directory written by `xlnet train` or `xlnet import-checkpoint` (local or gs://)")
    parser.add_argument("--output", required=True,
                        help="base directory of the SavedModel versions (TF Serving's model base path; "
                             "local or gs://)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="sequence length every signature pads to (left padding, <cls> last); longer texts "
                             "are truncated from the right (default: a fine-tuned model's max_seq_length, "
                             f"else {ExportConfig.max_length})")
    parser.add_argument("--format", choices=("savedmodel", "huggingface", "tf1"), default="savedmodel",
                        help="savedmodel: the serving SavedModel under OUTPUT/<version>/; huggingface: config.json, "
                             "model.safetensors and tokenizer files in OUTPUT for transformers (docs/interop.md); "
                             "tf1: the original release layout (xlnet_model.ckpt, xlnet_config.json) in OUTPUT")
    parser.add_argument("--max-segments", type=int, default=None,
                        help="segments of --max-length a text may span, 1 to 32: more than 1 reads them in order "
                             "with Transformer-XL memory, in the graph (docs/serving.md, long texts) (default: a "
                             "fine-tuned model's max_segments, else 1)")
    parser.add_argument("--mem-len", type=int, default=None,
                        help="with --max-segments above 1: the memory, how many states of the segments before "
                             "a segment it sees (default: the model's mem_len from model_config.json; required "
                             "for a model fine-tuned on one segment, whose mem_len is 0)")
    parser.add_argument("--generation-mem-len", type=int, default=0,
                        help="positions of the generate signature's key/value cache, which fixes its memory; "
                             "0: the model's mem_len from model_config.json, else --max-length; a cache that would "
                             "not fit this machine's memory is refused, naming the largest that fits")
    parser.add_argument("--top-k", type=int, default=ExportConfig.top_k,
                        help="candidates predict_masked returns for each <mask>")
    parser.add_argument("--version", type=int, default=None,
                        help="version number of the export (default: one more than the highest in --output)")
    parser.add_argument("--checkpoint", default=None,
                        help="checkpoint prefix to export (default: the latest in MODEL_DIR/checkpoints)")
    casing = parser.add_mutually_exclusive_group()
    # default=None on both: the casing is resolved from the model directory, and HelpFormatter
    # would otherwise print --cased's store_false default as "(default: True)".
    casing.add_argument("--uncased", action=argparse.BooleanOptionalAction, default=None,
                        help=f"lower-case input text, or not ({CASING_DEFAULT})")
    casing.add_argument("--cased", dest="uncased", action="store_false", default=None,
                        help=f"keep the case of input text, the same as --no-uncased ({CASING_DEFAULT})")


def run(args: argparse.Namespace) -> int:
    """Exports and prints where the output went; bad input raises a UsageError (exit 2). SIGINT
    and SIGTERM end it with 128 + the signal's number and one line (exit_quietly_on_signals)."""
    with exit_quietly_on_signals(args):
        return _run_format_export(args) if args.format != "savedmodel" else _run_savedmodel_export(args)


def _run_savedmodel_export(args: argparse.Namespace) -> int:
    """`xlnet export` (the SavedModel): prints where it went."""
    from trainer.runtime.restore import open_model_directory, resolve_uncased
    from trainer.serving.saved_model import export_saved_model, resolve_export_config, signature_names

    started = time.time()
    model_dir = open_model_directory(args.model_dir)  # read once, for the casing and the export
    uncased, why = resolve_uncased(model_dir, args.uncased)
    config = resolve_export_config(model_dir, args.max_length, args.top_k, uncased, args.max_segments, args.mem_len)
    config = dataclasses.replace(config, generation_mem_len=args.generation_mem_len)
    check_generation_cache_fits(model_dir, config)
    task = model_dir.finetune_config.task if model_dir.finetune_config else None
    print(export_line(args.model_dir, config, task, uncased, why), flush=True)
    target = export_saved_model(model_dir, args.output, config, version=args.version, checkpoint=args.checkpoint)
    print(f"SavedModel written to {target} in {time.time() - started:.1f}s; "
          f"signatures: {', '.join(signature_names(task))}", flush=True)
    return 0


def export_line(model_dir: str, config: ExportConfig, task: str | None, uncased: bool, why: str) -> str:
    """The line an export starts with: the settings that shape the model's main signatures. top_k
    (predict_masked's candidates) for a pretrained model only: a fine-tuned model is served for its
    head (``task``), where top_k decides nothing."""
    settings = [f"max_length={config.max_length}"]
    if config.max_segments > 1:
        settings += [f"max_segments={config.max_segments}", f"mem_len={config.mem_len}"]
    if task is None:
        settings.append(f"top_k={config.top_k}")
    return f"exporting {model_dir} ({', '.join(settings)}, {'uncased' if uncased else 'cased'} text: {why})"


def check_generation_cache_fits(model_dir, config) -> None:
    """Refuses (UsageError naming --generation-mem-len) a generate signature whose cache, for one
    prompt of --max-length pieces, would not fit this machine's memory (trainer/planning/generation.py),
    before anything is built."""
    from trainer.planning.generation import check_generation_cache
    from trainer.serving.text_generation_signatures import default_generation_mem_len

    model = model_dir.model_config
    mem_len = config.generation_mem_len or default_generation_mem_len(model.mem_len, config.max_length)
    why = "" if config.generation_mem_len else " (0: the default)"
    check_generation_cache("--generation-mem-len", model, mem_len, lambda size: (config.max_length, 0), why=why)


def needs_tensorflow(args: argparse.Namespace) -> bool:
    """Whether this export needs TensorFlow (xlnet_cli.py imports it, quietly, only then): all but a
    Hugging Face export of a local directory the JAX engine trained (Orbax checkpoints, read with
    NumPy and safetensors on whatever Keras backend runs)."""
    return not is_jax_huggingface_export(args)


def is_jax_huggingface_export(args: argparse.Namespace) -> bool:
    from trainer.runtime import file_system
    from trainer.runtime.model_dir import ModelDirectory

    if args.format != "huggingface" or file_system.has_scheme(args.model_dir):
        return False
    directory = ModelDirectory(args.model_dir)
    return bool(directory.orbax_steps()) and not directory.has_tensorflow_checkpoints()


def check_flags(args: argparse.Namespace) -> None:
    """The flags that apply to the SavedModel only, refused with another --format; checked before
    TensorFlow loads (xlnet_cli.py) and again by the export. A Hugging Face export of a JAX-trained
    directory runs Keras on JAX where TensorFlow is not installed and no backend is named."""
    import importlib.util
    import os

    if is_jax_huggingface_export(args) and importlib.util.find_spec("tensorflow") is None:
        os.environ.setdefault("KERAS_BACKEND", "jax")
    if args.format == "savedmodel":
        return
    for flag, value in (("--max-segments", args.max_segments), ("--mem-len", args.mem_len)):
        if value is not None:
            raise UsageError(f"{flag} applies to the SavedModel (--format savedmodel), not to --format {args.format}")


def _run_format_export(args: argparse.Namespace) -> int:
    """`xlnet export --format huggingface|tf1`: prints where the files went."""
    from trainer.conversion.format_export import export_format

    check_flags(args)
    started = time.time()
    files, note = export_format(args.model_dir, args.output, args.format, checkpoint=args.checkpoint,
                                uncased=args.uncased)
    print(f"{args.format} export of {args.model_dir} written to {args.output} in {time.time() - started:.1f}s: "
          f"{', '.join(name.rsplit('/', 1)[-1] for name in files)}; {note}", flush=True)
    return 0
