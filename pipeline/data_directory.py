"""The output data directory of `xlnet preprocess`, through Beam's FileSystems (local, gs://, ...).

The pipeline's side of tfrecords/manifest.py: preparing the directory before a run, measuring
the finished shards, writing the manifest last and atomically, reading it back for the summary,
and clearing away what a failed run wrote. Shard files are written by the pipeline's shard stage
(pipeline/beam_pipeline.py) into the same directory.
"""
from __future__ import annotations

import errno
import json
import os
import posixpath
import re
import uuid

from apache_beam.io.filesystems import FileSystems

from pipeline.output_lock import LOCK_NAME
from tfrecords.errors import DataError, UsageError
from tfrecords.manifest import MANIFEST_NAME, Manifest, manifest_location, missing_manifest_error, parse_manifest

# The run's report, written by the pipeline's last stage for the launcher (read, then removed).
REPORT_PREFIX = ".preprocess-report-"
# Names of what a run writes; anything else in the directory is left alone.
OWN_PREFIXES = ("train-", "valid-", f".{MANIFEST_NAME}", REPORT_PREFIX)
# A full disk or quota is a state problem (exit 3); a path that cannot be written as given, a flag's (exit 2).
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
_NOT_A_DIRECTORY = (errno.ENOTDIR, errno.EEXIST)


class OutputError(UsageError):
    """The output directory cannot be used as asked."""


class OutputFullError(DataError):
    """The disk (or quota) holding --output filled up during the run (exit status 3)."""


class OutputWriteError(DataError):
    """A worker could not write a file of the run. Its text has one fixed form, because from a
    worker process it reaches the launcher only as text (in the run's report, or inside the
    runner's error): ``found_write_error`` finds it there and ``output_error`` turns it into one
    sentence. Made by
    ``of``; the constructor takes the text alone, as Beam re-creates an error from its args."""

    def __init__(self, message: str, number: int = 0):
        super().__init__(message)
        self.errno = number

    @classmethod
    def of(cls, path: str, error: OSError) -> "OutputWriteError":
        number = error.errno or 0
        return cls(f"cannot write {path} (errno {number}: {error.strerror or error})", number)

    @property
    def lasting(self) -> bool:
        """Whether trying again cannot help (a full disk, a read-only or misplaced output): then the
        worker reports it rather than raising, so that Beam prints no traceback and retries nothing."""
        return self.errno in _FULL + _NOT_WRITABLE + _NOT_A_DIRECTORY

    def text(self) -> str:
        return f"{type(self).__name__}: {self}"


_WRITE_ERROR = re.compile(r"OutputWriteError: cannot write (?P<path>.+?) \(errno (?P<errno>\d+): (?P<reason>[^)\n]*)\)")


def found_write_error(error: BaseException | str) -> tuple[str, int, str] | None:
    """(path, errno, reason) of the first OutputWriteError in a text, or in an error's text or causes."""
    if isinstance(error, str):
        match = _WRITE_ERROR.search(error)
        return (match["path"], int(match["errno"]), match["reason"]) if match else None
    seen = 0
    while error is not None and seen < 10:
        text = f"{type(error).__name__}: {error}"
        match = _WRITE_ERROR.search(text)
        if match:
            return match["path"], int(match["errno"]), match["reason"]
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def output_error(output: str, path: str, number: int, reason: str) -> Exception:
    """One sentence for a file of --output that could not be written: a full disk is a DataError (3),
    a path that cannot be written as given (read-only, a file in the way) names --output (2)."""
    if number in _FULL:
        return OutputFullError(f"the disk holding --output {output} is full ({reason} while writing {path}); "
                               "free space there or choose another --output, then run again")
    if number == errno.EROFS:
        return OutputError(f"--output {output} is on a read-only filesystem ({path}: {reason}); "
                           "choose a writable directory")
    if number in _NOT_WRITABLE:
        return OutputError(f"--output {output} is not writable ({path}: {reason}); "
                           "choose a directory you may write, or change its permissions")
    if number in _NOT_A_DIRECTORY:
        return OutputError(f"--output {output}: a part of its path is a file, not a directory ({path}: "
                           f"{reason}); give the path of a new or empty directory")
    return DataError(f"could not write --output {output} ({reason} while writing {path}); "
                     "check that filesystem, then run again")


def make_output_directory(output: str) -> None:
    """Creates --output if needed; refuses, naming the flag, a file where the directory should be
    or a directory that cannot be created."""
    if is_local_path(output):
        if os.path.exists(output) and not os.path.isdir(output):
            raise OutputError(f"--output {output} is a file, not a directory; give the path of a new or "
                              "empty directory")
        try:
            os.makedirs(output, exist_ok=True)
        except OSError as error:
            raise output_error(output, output, error.errno or 0, error.strerror or str(error)) from None
        return
    listed = FileSystems.match([output])[0].metadata_list
    if any(m.path.rstrip("/") == output for m in listed if not m.path.endswith("/")):
        raise OutputError(f"--output {output} is a file, not a directory; give the path of a new or "
                          "empty directory")


def is_local_path(path: str) -> bool:
    """Whether ``path`` is on this machine's disk (no scheme such as gs://)."""
    return "://" not in path


def entries(output: str) -> list[str]:
    """Paths inside the output directory (hidden ones too, but not the lock of the run writing it),
    [] when it does not exist."""
    if is_local_path(output):  # the local filesystem's glob skips hidden files such as a scratch manifest
        paths = [os.path.join(output, name) for name in os.listdir(output)] if os.path.isdir(output) else []
    else:
        paths = [m.path for m in FileSystems.match([FileSystems.join(output, "*")])[0].metadata_list]
    return sorted(path for path in paths if posixpath.basename(path) != LOCK_NAME)  # the writer's lock


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


def abandon_run(output: str) -> None:
    """Removes what a failed run wrote: its manifest first (had it got that far), then its shards and
    scratch files, so that nothing of it passes for data. Errors are left to the caller."""
    manifest = FileSystems.join(output, MANIFEST_NAME)
    if FileSystems.exists(manifest):
        FileSystems.delete([manifest])
    remove_run_files(output)


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
    try:
        with FileSystems.create(scratch, mime_type="application/json") as handle:
            handle.write(manifest.to_json().encode("utf-8"))
    except OSError as error:
        raise OutputWriteError.of(scratch, error) from error
    if FileSystems.exists(target):
        FileSystems.delete([target])
    FileSystems.rename([scratch], [target])
    return target


def report_path(output: str, run_id: str) -> str:
    """Where the pipeline's last stage leaves the report of run ``run_id`` for its launcher."""
    return FileSystems.join(output, f"{REPORT_PREFIX}{run_id}.json")


def save_report(report: dict, path: str) -> None:
    """Writes a run's report (JSON); a file that cannot be written raises OutputWriteError."""
    try:
        with FileSystems.create(path, mime_type="application/json") as handle:
            handle.write(json.dumps(report, sort_keys=True).encode("utf-8"))
    except OSError as error:
        raise OutputWriteError.of(path, error) from error


def take_report(path: str) -> dict | None:
    """The run's report at ``path``, removed once read; None when the pipeline left none."""
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        report = json.loads(handle.read().decode("utf-8"))
    FileSystems.delete([path])
    return report


def has_manifest(output: str) -> bool:
    """Whether ``output`` holds a manifest, i.e. complete data."""
    return FileSystems.exists(FileSystems.join(output, MANIFEST_NAME))


def read_manifest(path: str) -> Manifest:
    """The validated manifest of a data directory (or of the manifest file itself)."""
    file_path, _ = manifest_location(path)
    if not FileSystems.exists(file_path):
        raise missing_manifest_error(file_path)
    with FileSystems.open(file_path, compression_type="uncompressed") as handle:
        return parse_manifest(handle.read(), file_path)
