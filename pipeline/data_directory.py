"""The output data directory of `xlnet preprocess`, through Beam's FileSystems (local, gs://, ...).

The pipeline's side of tfrecords/manifest.py: preparing the directory before a run, measuring
the finished shards, writing the manifest last and atomically, reading it back for the summary,
and clearing away what a failed run wrote.

Workers never write into the directory itself. Each run has a staging place inside it,
``OUTPUT/.preprocess-run-TOKEN/`` (TOKEN: the run's lock token), opened by the launcher with a
marker file before the pipeline runs. The pipeline writes its shards, manifest and report there,
each through ``create_in_run``: refused when the marker is gone, and on a local disk unable to
re-create a removed staging directory; a file finished after the marker went is removed by its
writer. Only the launcher, still holding the lock, moves the shards and then the manifest into
OUTPUT (``publish_run``). A run that ends any other way closes its staging place (marker first),
so workers it could no longer stop (a Dask scheduler lost mid-run) write nothing anywhere.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import re
import shutil
import uuid
from typing import BinaryIO, Iterator

from apache_beam.io.filesystem import CompressedFile, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipeline.output_lock import LOCK_NAME
from tfrecords.errors import DataError, UsageError
from tfrecords.manifest import MANIFEST_NAME, Manifest, manifest_location, missing_manifest_error, parse_manifest

# The run's report, written by the pipeline's last stage for the launcher (read, then removed).
REPORT_PREFIX = ".preprocess-report-"
# Names of what a run writes; anything else in the directory is left alone.
# A run's staging place (see above) and the marker that keeps it open to the run's workers.
STAGING_PREFIX = ".preprocess-run-"
OPEN_MARKER = ".open"
OWN_PREFIXES = ("train-", "valid-", f".{MANIFEST_NAME}", REPORT_PREFIX, STAGING_PREFIX)
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
    else:  # an object store has no directories: a name with more below it is listed once, as NAME/
        paths = sorted({_first_entry(output, m.path)
                        for m in FileSystems.match([FileSystems.join(output, "**")])[0].metadata_list})
    return sorted(path for path in paths if posixpath.basename(path) != LOCK_NAME)  # the writer's lock


def _first_entry(output: str, path: str) -> str:
    """The entry of ``output`` that holds an object store's ``path``: itself, or ``output/NAME/``."""
    head, below, _ = path[len(output.rstrip("/")):].lstrip("/").partition("/")
    return FileSystems.join(output, head) + ("/" if below else "")


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
    """What a run writes into ``output`` (shards, scratch manifests, staging places), leaving anything
    else alone."""
    return [path for path in entries(output) if posixpath.basename(path.rstrip("/")).startswith(OWN_PREFIXES)]


def remove_run_files(output: str) -> list[str]:
    """Deletes the shards, scratch manifests and staging places in ``output``: an earlier run's before
    a new one, or those of a run that failed, so that none of its files can pass for data. Staging
    places are closed first (their markers), so that no late worker writes into them. Returns the
    paths removed."""
    ours = own_entries(output)
    for path in ours:
        if posixpath.basename(path.rstrip("/")).startswith(STAGING_PREFIX):
            close_staging(path.rstrip("/"))
    rest = [path for path in ours if not posixpath.basename(path.rstrip("/")).startswith(STAGING_PREFIX)]
    if rest:
        FileSystems.delete(rest)
    return ours


def staging_directory(output: str, run_id: str) -> str:
    """The staging place of run ``run_id`` inside ``output`` (see the module docstring)."""
    return FileSystems.join(output, f"{STAGING_PREFIX}{run_id}")


def open_staging(staging: str) -> None:
    """Opens a run's staging place to its workers (the launcher, before the pipeline runs)."""
    if is_local_path(staging):
        os.makedirs(staging, exist_ok=True)
    try:
        with FileSystems.create(FileSystems.join(staging, OPEN_MARKER)) as handle:
            handle.write(b"")
    except OSError as error:
        raise OutputWriteError.of(staging, error) from error


def staging_is_open(staging: str) -> bool:
    """Whether the run owning ``staging`` still accepts its workers' files."""
    return FileSystems.exists(FileSystems.join(staging, OPEN_MARKER))


def close_staging(staging: str) -> None:
    """Closes a run's staging place (its marker first: from then on no worker writes there) and
    removes it with everything in it."""
    marker = FileSystems.join(staging, OPEN_MARKER)
    if FileSystems.exists(marker):
        FileSystems.delete([marker])
    if is_local_path(staging):
        if os.path.isdir(staging):
            FileSystems.delete([staging])
    elif FileSystems.match([FileSystems.join(staging, "*")])[0].metadata_list:
        FileSystems.delete([staging.rstrip("/") + "/"])  # an object store's recursive delete


class RunClosedError(DataError):
    """A worker's file belongs to a run whose staging place is closed: that run has ended, and its
    late workers write nothing (exit status 3 if it ever reached a launcher)."""


@contextlib.contextmanager
def create_in_run(path: str, staging: str, compression: str = CompressionTypes.UNCOMPRESSED) -> Iterator[BinaryIO]:
    """A file of a run written into its staging place, only while the run has it open: RunClosedError
    before the write if it is closed, and after it (the file removed) if it closed meanwhile. On a
    local disk the file is opened without creating directories, so a staging place already removed
    cannot come back."""
    if not staging_is_open(staging):
        raise RunClosedError(f"{staging} is closed: its run has ended; {path} not written")
    if is_local_path(path):
        try:
            raw = open(path, "wb")  # noqa: SIM115 (closed by the with below); never creates the directory
        except FileNotFoundError:
            raise RunClosedError(f"{staging} is gone: its run has ended; {path} not written") from None
        handle = raw if compression == CompressionTypes.UNCOMPRESSED else CompressedFile(raw, compression)
    else:
        handle = FileSystems.create(path, mime_type="application/octet-stream", compression_type=compression)
    with handle:
        yield handle
    if not staging_is_open(staging):
        with contextlib.suppress(Exception):
            FileSystems.delete([path])
        raise RunClosedError(f"{staging} was closed while {path} was written: its run has ended; the file "
                             "was removed")


def remove_staged_shards(staging: str) -> None:
    """Deletes the shard files in a run's staging place (after a write error: frees the space its
    report needs on a full disk), leaving the place open."""
    listed = FileSystems.match([FileSystems.join(staging, "*")])[0].metadata_list
    shards = [m.path for m in listed if posixpath.basename(m.path).startswith(("train-", "valid-"))]
    if shards:
        FileSystems.delete(shards)


def publish_run(staging: str, output: str, shard_files: list[str],
                removed: tuple[str, list[str]] | None = None) -> str:
    """Moves a finished run's shards, then its manifest (last: its presence means whole data), from
    its staging place into ``output``, and removes the staging place. Called by the launcher only,
    while it holds the lock. ``removed``: (--removed DIR, the audit files in the staging place), copied
    into DIR (anywhere: another filesystem, another store) before the manifest. Returns the manifest's
    path."""
    FileSystems.rename([FileSystems.join(staging, name) for name in shard_files],
                       [FileSystems.join(output, name) for name in shard_files])
    directory, names = removed or ("", [])
    for name in names:
        _copy(FileSystems.join(staging, name), FileSystems.join(directory, posixpath.basename(name)))
    target = FileSystems.join(output, MANIFEST_NAME)
    FileSystems.rename([FileSystems.join(staging, MANIFEST_NAME)], [target])
    close_staging(staging)
    return target


def _copy(source: str, target: str) -> None:
    """One file copied through Beam's FileSystems, whatever the two places' schemes."""
    with FileSystems.open(source, compression_type=CompressionTypes.UNCOMPRESSED) as reader, \
            FileSystems.create(target, compression_type=CompressionTypes.UNCOMPRESSED) as writer:
        shutil.copyfileobj(reader, writer, REMOVED_COPY_CHUNK)


# The audit files' names in --removed DIR, and the bytes copied at a time when they are published.
REMOVED_PATTERN = "removed-*.jsonl"
REMOVED_COPY_CHUNK = 1 << 22


def prepare_removed(directory: str, overwrite: bool) -> None:
    """--removed DIR before a run: created if need be; an earlier run's audit files there are refused
    unless ``overwrite``, which deletes them (as an earlier run's shards in --output)."""
    try:
        if is_local_path(directory):
            if os.path.exists(directory) and not os.path.isdir(directory):
                raise OutputError(f"--removed {directory} is a file, not a directory; give the path of a directory")
            os.makedirs(directory, exist_ok=True)
        earlier = [m.path for m in FileSystems.match([FileSystems.join(directory, REMOVED_PATTERN)])[0].metadata_list]
    except OSError as error:
        raise OutputError(f"--removed {directory}: cannot create or list it ({error.strerror or error})") from None
    if earlier and not overwrite:
        raise OutputError(f"--removed {directory} holds an earlier run's removed documents (e.g. {earlier[0]}); "
                          "pass --overwrite to replace them, or choose another directory")
    if earlier:
        FileSystems.delete(earlier)


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


def stage_manifest(manifest: Manifest, staging: str) -> str:
    """Writes a run's manifest into its staging place (create_in_run); publish_run moves it into the
    data directory. A file that cannot be written raises OutputWriteError."""
    path = FileSystems.join(staging, MANIFEST_NAME)
    try:
        with create_in_run(path, staging) as handle:
            handle.write(manifest.to_json().encode("utf-8"))
    except OSError as error:
        raise OutputWriteError.of(path, error) from error
    return path


def report_path(output: str, run_id: str) -> str:
    """Where the pipeline's last stage leaves the report of run ``run_id`` for its launcher: in the
    run's staging place."""
    return FileSystems.join(staging_directory(output, run_id), f"{REPORT_PREFIX}{run_id}.json")


def save_report(report: dict, path: str) -> None:
    """Writes a run's report (JSON) into its staging place (create_in_run); a file that cannot be
    written raises OutputWriteError."""
    try:
        with create_in_run(path, posixpath.dirname(path)) as handle:
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
