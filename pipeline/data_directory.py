"""The output data directory of `xlnet preprocess`, through Beam's FileSystems (local, gs://, ...).

The pipeline's side of tfrecords/manifest.py: preparing the directory before a run, measuring
the finished shards, writing the manifest last and atomically, reading it back for the summary,
and clearing away what a failed run wrote. Shard files are written by the pipeline's shard stage
(pipeline/beam_pipeline.py) into the same directory.
"""
from __future__ import annotations

import os
import posixpath
import uuid

from apache_beam.io.filesystems import FileSystems

from tfrecords.errors import UsageError
from tfrecords.manifest import MANIFEST_NAME, Manifest, manifest_location, missing_manifest_error, parse_manifest

# Names of what a run writes; anything else in the directory is left alone.
OWN_PREFIXES = ("train-", "valid-", f".{MANIFEST_NAME}")


class OutputError(UsageError):
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
    remove_run_files(output)
    if is_local_path(output):
        os.makedirs(output, exist_ok=True)


def own_entries(output: str) -> list[str]:
    """What a run writes into ``output`` (shards, scratch manifests), leaving anything else alone."""
    return [path for path in entries(output) if posixpath.basename(path.rstrip("/")).startswith(OWN_PREFIXES)]


def remove_run_files(output: str) -> list[str]:
    """Deletes the shards and scratch manifests in ``output``: an earlier run's before a new one, or
    those of a run that failed, so that none of its files can pass for data. Returns their paths."""
    ours = own_entries(output)
    if ours:
        FileSystems.delete(ours)
    return ours


def shard_sizes(directory: str, names: list[str]) -> dict[str, int]:
    """Bytes of each named file of ``directory``, from one listing (one request on an object store
    rather than one per shard). A name that is not there is an error: the shards are complete."""
    listed = FileSystems.match([FileSystems.join(directory, "*")])[0].metadata_list
    sizes = {posixpath.basename(m.path.rstrip("/")): int(m.size_in_bytes) for m in listed}
    missing = [name for name in names if name not in sizes]
    if missing:
        raise OutputError(f"shard files missing from {directory} after they were written: {', '.join(missing)}")
    return {name: sizes[name] for name in names}


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


def has_manifest(output: str) -> bool:
    """Whether ``output`` holds a manifest, i.e. complete data."""
    return FileSystems.exists(FileSystems.join(output, MANIFEST_NAME))


def read_manifest(path: str) -> Manifest:
    """The validated manifest of a data directory (or of the manifest file itself)."""
    file_path, _ = manifest_location(path)
    if not FileSystems.exists(file_path):
        raise missing_manifest_error(file_path)
    with FileSystems.open(file_path, compression_type="uncompressed") as handle:
        return parse_manifest(handle.read().decode("utf-8"), file_path)
