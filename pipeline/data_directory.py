"""The output data directory of `xlnet preprocess`, through Beam's FileSystems (local, gs://, ...).

The pipeline's side of tfrecords/manifest.py: preparing the directory before a run, writing
the manifest last and atomically, and reading it back for the summary. Shard files are written
by the pipeline's shard stage (pipeline/beam_pipeline.py) into the same directory.
"""
from __future__ import annotations

import os
import posixpath
import uuid

from apache_beam.io.filesystems import FileSystems

from tfrecords.manifest import MANIFEST_NAME, Manifest, manifest_location, missing_manifest_error, parse_manifest

# Names of what a run writes; anything else in the directory is left alone.
OWN_PREFIXES = ("train-", "valid-", f".{MANIFEST_NAME}")


class OutputError(ValueError):
    """The output directory cannot be used as asked."""


def is_local_path(path: str) -> bool:
    """Whether ``path`` is on this machine's disk (no scheme such as gs://)."""
    return "://" not in path


def entries(output: str) -> list[str]:
    """Paths inside the output directory (hidden ones too), [] when it does not exist."""
    if is_local_path(output):  # the local filesystem's glob skips hidden files such as a scratch manifest
        return sorted(os.path.join(output, name) for name in os.listdir(output)) if os.path.isdir(output) else []
    return sorted(m.path for m in FileSystems.match([FileSystems.join(output, "*")])[0].metadata_list)


def prepare_output(output: str, overwrite: bool) -> None:
    """Refuses a non-empty output unless overwrite; then removes the old manifest (first) and shards."""
    existing = entries(output)
    if existing and not overwrite:
        raise OutputError(f"--output {output} is not empty ({len(existing)} entries, e.g. {existing[0]}); "
                          "pass --overwrite to replace its shards and manifest, or choose another directory")
    manifest = FileSystems.join(output, MANIFEST_NAME)
    if FileSystems.exists(manifest):
        FileSystems.delete([manifest])  # first, so a crash below never leaves a stale valid manifest
    ours = [path for path in existing if posixpath.basename(path.rstrip("/")).startswith(OWN_PREFIXES)]
    if ours:
        FileSystems.delete(ours)
    if is_local_path(output):
        os.makedirs(output, exist_ok=True)


def save_manifest(manifest: Manifest, directory: str) -> str:
    """Writes DIR/manifest.json atomically: a scratch file renamed into place (on object
    stores rename is copy + delete, and the target appears whole)."""
    target = FileSystems.join(directory, MANIFEST_NAME)
    scratch = FileSystems.join(directory, f".{MANIFEST_NAME}.{uuid.uuid4().hex}.tmp")
    with FileSystems.create(scratch, mime_type="application/json") as handle:
        handle.write(manifest.to_json().encode("utf-8"))
    if FileSystems.exists(target):
        FileSystems.delete([target])
    FileSystems.rename([scratch], [target])
    return target


def read_manifest(path: str) -> Manifest:
    """The validated manifest of a data directory (or of the manifest file itself)."""
    file_path, _ = manifest_location(path)
    if not FileSystems.exists(file_path):
        raise missing_manifest_error(file_path)
    with FileSystems.open(file_path, compression_type="uncompressed") as handle:
        return parse_manifest(handle.read().decode("utf-8"), file_path)
