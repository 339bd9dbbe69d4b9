"""The manifest of a preprocessed data directory: what `xlnet preprocess` wrote, and where.

``DIR/manifest.json`` is written last and atomically (pipeline/data_directory.py), so its
presence means the shards are complete. This module holds the format and its validation;
``load_manifest`` reads it through tf.io.gfile for the trainer, the pipeline reads and writes
it through Beam's FileSystems. Layout::

    {
      "format_version": 1,
      "config": {... full preprocess config: seq_len, reuse_len, num_predict, perm_size,
                 bi_data, num_streams, seed, uncased, compression, ...},
      "vocab": {"path": ..., "sha256": ..., "vocab_size": ...},
      "special_ids": {"unk": 0, ..., "eop": 8},
      "splits": {
        "train": {
          "num_shards": 8, "num_streams": 128,   # forward streams; with bi_data ids go to 2 * num_streams
          "shards": [{"file": "train-00000-of-00008.tfrecord", "records": ..., "tokens": ...,
                      "masked_tokens": ..., "documents": ..., "bytes": ...,
                      "streams": [{"stream_id": 0, "records": 12, "first_record_index_in_file": 0}, ...]}],
          "totals": {"records": ..., "tokens": ..., "masked_tokens": ..., "documents": ...}
        },
        "valid": {...}
      }
    }

``file`` is relative to the manifest's directory. ``tokens`` counts corpus tokens of the
shard's documents (forward text, including ``<eod>``), ``records`` counts every record in
the file (forward and reversed streams). Each stream lives in one file, its records
contiguous in stream_pos order starting at ``first_record_index_in_file``, so a reader
takes a stream as ``TFRecordDataset(file).skip(first).take(records)``. ``bytes`` is the shard
file's size once complete; manifests written before it existed lack it, so it is optional
(``None``) and checks that use it are skipped for them.
"""
from __future__ import annotations

import json
import os
import posixpath
from dataclasses import asdict, dataclass, field

from tfrecords.errors import DataError, UsageError
from tfrecords.json_documents import load_json
from tfrecords.schema import FORMAT_VERSION

MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "valid")
COUNT_KEYS = ("records", "tokens", "masked_tokens", "documents")


class ManifestError(UsageError):
    """A missing, unreadable or inconsistent manifest; the message names the file."""


class ShardNameError(DataError):
    """A manifest names a shard outside its data directory (``..``, an absolute path, another scheme):
    a damaged or forged manifest, never read; the message names the manifest and the name."""


def shard_name_problem(name) -> str | None:
    """Why ``name`` (a shard's ``file`` as a manifest lists it) is not a file inside the manifest's
    directory, or None: it must be a relative name, without ``..``, a backslash or a scheme."""
    if not isinstance(name, str) or not name:
        return f"found {_json_type(name)}" if not isinstance(name, str) else "it is empty"
    if name.startswith("/"):
        return "it is an absolute path"
    if ":" in name.split("/", 1)[0]:
        return "it names another location (a scheme or drive)"
    if "\\" in name:
        return "it holds a backslash"
    if any(part in ("..", ".", "") for part in name.split("/")):
        return "it has an empty, '.' or '..' part"
    return None


@dataclass(frozen=True)
class StreamEntry:
    stream_id: int
    records: int
    first_record_index_in_file: int


def _object(value, where: str) -> dict:
    """``value`` when it is a JSON object; otherwise a TypeError naming where it sits in the file
    (indexing a list with a field name would only say "list indices must be integers")."""
    if not isinstance(value, dict):
        raise TypeError(f"{where} must be a JSON object, found {_json_type(value)}")
    return value


def _json_type(value) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class ShardEntry:
    file: str
    records: int
    tokens: int
    masked_tokens: int
    documents: int
    streams: tuple[StreamEntry, ...]
    bytes: int | None = None  # the file's size; None in manifests written before it was recorded

    def to_dict(self) -> dict:
        values = asdict(self)
        if self.bytes is None:
            del values["bytes"]  # an older manifest saved again stays as it was
        return values

    @classmethod
    def from_dict(cls, values: dict, where: str = "shard") -> "ShardEntry":
        values = _object(values, where)
        streams = tuple(StreamEntry(**_object(stream, f"{where}.streams[{i}]"))
                        for i, stream in enumerate(values["streams"]))
        return cls(**{**{k: values[k] for k in ("file",) + COUNT_KEYS}, "streams": streams,
                      "bytes": values.get("bytes")})


@dataclass(frozen=True)
class SplitEntry:
    num_shards: int
    num_streams: int
    shards: tuple[ShardEntry, ...]

    @property
    def totals(self) -> dict[str, int]:
        return {key: sum(getattr(shard, key) for shard in self.shards) for key in COUNT_KEYS}

    def stream_locations(self) -> dict[int, tuple[str, int, int]]:
        """stream_id -> (file, first_record_index_in_file, records)."""
        return {stream.stream_id: (shard.file, stream.first_record_index_in_file, stream.records)
                for shard in self.shards for stream in shard.streams}

    def to_dict(self) -> dict:
        return {"num_shards": self.num_shards, "num_streams": self.num_streams,
                "shards": [shard.to_dict() for shard in self.shards], "totals": self.totals}

    @classmethod
    def from_dict(cls, values: dict, where: str = "split") -> "SplitEntry":
        values = _object(values, where)
        return cls(num_shards=values["num_shards"], num_streams=values["num_streams"],
                   shards=tuple(ShardEntry.from_dict(shard, f"{where}.shards[{i}]")
                                for i, shard in enumerate(values["shards"])))


@dataclass(frozen=True)
class Manifest:
    """A data directory's manifest; ``directory`` is where it was loaded from (not serialised)."""

    config: dict
    vocab: dict
    special_ids: dict
    splits: dict[str, SplitEntry]
    format_version: int = FORMAT_VERSION
    directory: str = field(default="", compare=False)
    # What the run read and skipped (files, lines, invalid_lines, dropped_bytes, ...): its end-of-run
    # counters; None in manifests written before they were recorded.
    counters: dict | None = None

    # Convenience views of the config every consumer needs.
    @property
    def seq_len(self) -> int:
        return int(self.config["seq_len"])

    @property
    def reuse_len(self) -> int:
        return int(self.config["reuse_len"])

    @property
    def num_predict(self) -> int:
        return int(self.config["num_predict"])

    @property
    def perm_size(self) -> int:
        return int(self.config["perm_size"])

    @property
    def bi_data(self) -> bool:
        return bool(self.config["bi_data"])

    @property
    def num_streams(self) -> int:
        return int(self.config["num_streams"])

    @property
    def compression_type(self) -> str:
        """'GZIP' or '' as tf.data.TFRecordDataset expects."""
        return "GZIP" if self.config.get("compression") == "gzip" else ""

    def split(self, name: str) -> SplitEntry:
        if name not in self.splits:
            raise ManifestError(f"manifest in {self.directory or '?'} has no split {name!r} "
                                f"(has {', '.join(sorted(self.splits))})")
        return self.splits[name]

    def resolve(self, name: str) -> str:
        """The path of a file the manifest names relative to its own directory."""
        return posixpath.join(self.directory, name) if self.directory else name

    def shard_path(self, shard: ShardEntry | str) -> str:
        """Where a shard (an entry, or its file name as listed) lives: next to the manifest."""
        return self.resolve(shard if isinstance(shard, str) else shard.file)

    def to_dict(self) -> dict:
        return {"format_version": self.format_version, "config": self.config, "vocab": self.vocab,
                "special_ids": self.special_ids,
                "splits": {name: entry.to_dict() for name, entry in self.splits.items()},
                **({"counters": self.counters} if self.counters is not None else {})}

    @classmethod
    def from_dict(cls, values: dict, directory: str = "") -> "Manifest":
        values = _object(values, "the manifest")
        splits = _object(values["splits"], "splits")
        return cls(config=_object(values["config"], "config"), vocab=_object(values["vocab"], "vocab"),
                   special_ids=values["special_ids"],
                   splits={name: SplitEntry.from_dict(entry, f"splits.{name}") for name, entry in splits.items()},
                   format_version=values["format_version"], directory=directory,
                   counters=values.get("counters"))

    def validate(self) -> list[str]:
        """Problems found (empty when consistent): version, shard/stream bookkeeping, totals."""
        problems = []
        if self.format_version != FORMAT_VERSION:
            problems.append(f"format_version {self.format_version} != supported {FORMAT_VERSION}; "
                            "re-run `xlnet preprocess` with this version")
        for key in ("seq_len", "reuse_len", "num_predict", "perm_size", "bi_data", "num_streams"):
            if key not in self.config:
                problems.append(f"config lacks {key}")
        for name, entry in self.splits.items():
            if len(entry.shards) != entry.num_shards:
                problems.append(f"{name}: {len(entry.shards)} shards listed, num_shards says {entry.num_shards}")
            expected_streams = entry.num_streams * (2 if self.config.get("bi_data") else 1)
            seen: set[int] = set()
            for shard in entry.shards:
                position = 0
                for stream in sorted(shard.streams, key=lambda s: s.first_record_index_in_file):
                    if stream.stream_id in seen:
                        problems.append(f"{name}: stream {stream.stream_id} listed in more than one place")
                    seen.add(stream.stream_id)
                    if stream.first_record_index_in_file != position:
                        problems.append(f"{shard.file}: stream {stream.stream_id} starts at "
                                        f"{stream.first_record_index_in_file}, expected {position}")
                    position += stream.records
                if position != shard.records:
                    problems.append(f"{shard.file}: streams hold {position} records, shard says {shard.records}")
                if shard.bytes is not None and (type(shard.bytes) is not int or shard.bytes < 0):
                    problems.append(f"{shard.file}: bytes must be a file size (an integer >= 0), "
                                    f"found {shard.bytes!r}")
            if seen != set(range(expected_streams)):
                problems.append(f"{name}: streams listed {len(seen)}, expected ids 0..{expected_streams - 1}")
        return problems

    def to_json(self) -> str:
        """The manifest file's text (sorted keys, so the same run gives the same bytes)."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"


def manifest_location(path: str) -> tuple[str, str]:
    """(manifest file, data directory) for a data directory or the manifest file itself.

    Plain string joins: ``path`` may be gs://..., which pathlib would mangle."""
    path = path.rstrip("/")
    if path.endswith(".json"):
        return path, posixpath.dirname(path) or "."
    return posixpath.join(path, MANIFEST_NAME), path


def parse_manifest(text: str | bytes, file_path: str) -> Manifest:
    """The validated manifest in ``text`` (the file's bytes, or its text), read from ``file_path``
    (named in every error). The one reading of a manifest's content, whichever filesystem layer
    (tf.io.gfile here, Beam's in pipeline/data_directory.py) fetched its bytes: bytes that are not
    UTF-8 are a ManifestError like any other damage, never a UnicodeDecodeError."""
    _, directory = manifest_location(file_path)
    values = load_json(text, file_path, ManifestError, "a valid manifest")
    try:
        manifest = Manifest.from_dict(values, directory=directory)
    except KeyError as error:
        raise ManifestError(f"{file_path} is not a valid manifest: it lacks the field {error}") from None
    except (ValueError, TypeError) as error:
        raise ManifestError(f"{file_path} is not a valid manifest: {error}") from None
    for name, entry in manifest.splits.items():
        for index, shard in enumerate(entry.shards):
            problem = shard_name_problem(shard.file)
            if problem:
                raise ShardNameError(f"{file_path}: splits.{name}.shards[{index}] names {shard.file!r}, not a file "
                                     f"inside the data directory {directory} ({problem}); shard names must be "
                                     "relative to the manifest, without '..'")
    problems = manifest.validate()
    if problems:
        raise ManifestError(f"{file_path}: " + "; ".join(problems))
    return manifest


def missing_manifest_error(file_path: str) -> ManifestError:
    """The error for a data directory without a manifest (never written, or the run did not finish)."""
    return ManifestError(f"{file_path} not found: not a preprocessed data directory "
                         "(run `xlnet preprocess --output DIR` first, and let it finish)")


def load_manifest(path: str) -> Manifest:
    """Loads DIR/manifest.json (``path`` is the directory or the file itself) and validates it: a local
    one with Python's own I/O (so that a host without TensorFlow reads it), one with a scheme (gs://)
    through tf.io.gfile."""
    file_path, _ = manifest_location(path)
    if not is_file(file_path):
        raise missing_manifest_error(file_path)
    return parse_manifest(read_file(file_path), file_path)


def is_file(path: str) -> bool:
    """Whether ``path`` is a file: a local path checked by Python, one with a scheme by tf.io.gfile."""
    if "://" not in path:
        return os.path.isfile(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)


def read_file(path: str) -> bytes:
    """The bytes of ``path``: a local file read by Python, one with a scheme through tf.io.gfile."""
    if "://" not in path:
        with open(path, "rb") as handle:
            return handle.read()
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def vocabulary_path(manifest: Manifest) -> str:
    """The SentencePiece model the data was tokenised with: where the manifest says, or next to
    manifest.json (a data directory copied elsewhere, e.g. to gs://, keeps its model beside it).
    Raises ManifestError naming every place tried."""
    named = str(manifest.vocab.get("path", ""))
    candidates = [named, manifest.resolve(named), manifest.resolve(posixpath.basename(named) or "spiece.model")]
    for candidate in candidates:
        if candidate and is_file(candidate):
            return candidate
    raise ManifestError(f"the manifest's vocabulary {named!r} was not found (tried {', '.join(candidates)}); "
                        "put the SentencePiece model there or next to manifest.json")
