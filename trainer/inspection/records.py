"""Records of a data directory read back and decoded into text with its own vocabulary.

A record (tfrecords/schema.py) is ``memory-reuse part + A + <sep> + B + <sep> + <cls>``: the first
``reuse_len`` positions are the part whose hidden states the trainer keeps as the next record's
memory, A follows up to the first ``<sep>`` (segment 0 like the memory-reuse part), B up to the
second ``<sep>`` (segment 1), ``<cls>`` last (segment 2). ``is_masked`` marks the span-mask targets;
the text shows them as ``[[...]]``. Records of reversed streams (bi_data) hold their pieces right to
left; each part is shown flipped back into reading order.

Reading stops with ``DamagedDataError`` (exit status 3) naming the file and the record's index in
it when a record cannot be read, does not parse, sits where the manifest's stream layout does not
put it, or holds a token id outside the vocabulary: the checks of `xlnet inspect --verify`
(tfrecords/verification.py), run on the records read.
"""
from __future__ import annotations

import dataclasses
import textwrap
from typing import Sequence

import numpy as np

from tfrecords.errors import UsageError
from tfrecords.manifest import Manifest, ShardEntry, load_manifest, vocabulary_path
from tfrecords.schema import SEG_A, parse_records
from tfrecords.tensorflow_errors import error_text
from tfrecords.verification import DamagedDataError, record_checker
from tfrecords.vocabulary import WORD_BOUNDARY, Vocab, is_tokenised_with, parse_vocab

OPEN_MARK, CLOSE_MARK = "[[", "]]"
LABELS = {1: "B continues A", 0: "B is a random span"}


class InspectionError(UsageError):
    """A request the data directory cannot answer (a split, stream or record it lacks); the message
    names the flag. Exit status 2."""


@dataclasses.dataclass(frozen=True)
class DataDirectory:
    """A data directory's manifest and the SentencePiece model its records were tokenised with."""

    manifest: Manifest
    vocab: Vocab
    pieces: tuple[str, ...]  # the piece of every id
    symbols: np.ndarray  # bool [vocab_size]: control, unknown and <...> symbols such as <eop> (set apart in text)

    @classmethod
    def open(cls, path: str) -> "DataDirectory":
        """Loads DIR/manifest.json and the vocabulary it names (ManifestError when either is missing);
        a vocabulary whose checksum differs from the manifest's is damaged data."""
        import tensorflow as tf

        manifest = load_manifest(path)
        vocab_file = vocabulary_path(manifest)
        with tf.io.gfile.GFile(vocab_file, "rb") as handle:
            vocab = parse_vocab(handle.read(), vocab_file)
        if not is_tokenised_with(manifest.vocab, vocab.sha256):
            raise DamagedDataError(f"{vocab_file} has sha256 {vocab.sha256}, but the data in {manifest.directory} "
                                   f"was tokenised with sha256 {manifest.vocab.get('sha256')}: the records cannot "
                                   "be decoded with it")
        processor = vocab.processor()
        pieces = tuple(processor.id_to_piece(i) for i in range(vocab.vocab_size))
        symbols = np.array([processor.is_control(i) or processor.is_unknown(i) or
                            (len(pieces[i]) > 2 and pieces[i][0] == "<" and pieces[i][-1] == ">")
                            for i in range(len(pieces))])
        return cls(manifest, vocab, pieces, symbols)

    @property
    def directory(self) -> str:
        return self.manifest.directory

    def split_entry(self, split: str):
        if split not in self.manifest.splits:
            raise InspectionError(f"--split {split}: {self.directory} has the splits "
                                  f"{', '.join(sorted(self.manifest.splits))}")
        return self.manifest.split(split)

    def stream_count(self, split: str) -> int:
        """Stream ids of ``split`` run from 0 to this minus one (reversed copies included)."""
        return self.split_entry(split).num_streams * (2 if self.manifest.bi_data else 1)

    def is_reversed(self, split: str, stream_id: int) -> bool:
        return stream_id >= self.split_entry(split).num_streams

    def display(self, token_id: int) -> str:
        """How one piece reads in running text: '▁' as a space, special symbols set apart."""
        piece = self.pieces[token_id]
        return f" {piece}" if self.symbols[token_id] else piece.replace(WORD_BOUNDARY, " ")


@dataclasses.dataclass(frozen=True)
class Record:
    """One record read back: where it is, and its features (NumPy, tfrecords.schema names)."""

    split: str
    file: str
    index_in_file: int
    features: dict[str, np.ndarray]

    @property
    def stream_id(self) -> int:
        return int(self.features["stream_id"])

    @property
    def stream_pos(self) -> int:
        return int(self.features["stream_pos"])


def default_stream(data: DataDirectory, split: str) -> int:
    """The first stream of ``split`` that has records."""
    locations = data.split_entry(split).stream_locations()
    return min(stream for stream, (_, _, records) in locations.items() if records > 0)


def read_stream(data: DataDirectory, split: str, stream_id: int, count: int, first: int = 0) -> list[Record]:
    """Records ``first .. first + count - 1`` of one stream, checked as `--verify` checks them."""
    streams = data.stream_count(split)
    if not 0 <= stream_id < streams:
        raise InspectionError(f"--stream {stream_id}: the {split} split has streams 0..{streams - 1}"
                              + (" (the second half reverses the first)" if data.manifest.bi_data else ""))
    file, first_in_file, records = data.split_entry(split).stream_locations()[stream_id]
    if records == 0:
        raise InspectionError(f"--stream {stream_id}: {split} stream {stream_id} has no records (its text is "
                              "shorter than one record)")
    if count < 1 or first + count > records:
        raise InspectionError(f"--records {count}: {split} stream {stream_id} has {records} records")
    shard = next(s for s in data.split_entry(split).shards if s.file == file)
    return _read_records(data, split, shard, first_in_file + first, count)


def _read_records(data: DataDirectory, split: str, shard: ShardEntry, start: int, count: int) -> list[Record]:
    import tensorflow as tf

    path = data.manifest.shard_path(shard)
    if not tf.io.gfile.exists(path):
        raise DamagedDataError(f"{path}: missing (the manifest lists it, the directory lacks it)")
    dataset = tf.data.TFRecordDataset(path, compression_type=data.manifest.compression_type).skip(start).take(count)
    serialized, iterator = [], iter(dataset)
    while len(serialized) < count:
        try:
            serialized.append(next(iterator))
        except StopIteration:
            raise DamagedDataError(f"{path}: record {start + len(serialized)}: the file ends there, the manifest "
                                   f"lists {shard.records} records") from None
        except tf.errors.OpError as error:
            raise DamagedDataError(f"{path}: record {start + len(serialized)}: unreadable "
                                   f"({error_text(error)})") from None
    batch = tf.stack(serialized)
    bad = record_checker(shard, data.manifest.seq_len, data.vocab.vocab_size)(start, batch)
    if bad is not None:
        raise DamagedDataError(f"{path}: record {bad.index}: {bad.problem}")
    parsed = {name: value.numpy() for name, value in parse_records(batch, data.manifest.seq_len).items()}
    return [Record(split, path, start + row, {name: value[row] for name, value in parsed.items()})
            for row in range(count)]


# ------------------------------------------------------------------------------------ decoding
@dataclasses.dataclass(frozen=True)
class Part:
    """A run of positions of a record, ``first`` to ``last`` inclusive, and its text."""

    name: str
    first: int
    last: int
    text: str

    def to_json(self) -> dict:
        return {"positions": [self.first, self.last], "text": self.text}


@dataclasses.dataclass(frozen=True)
class RecordView:
    """A record decoded: its parts as text with the targets marked, the label, the targets."""

    record: Record
    reversed: bool
    label: int
    memory: Part
    a: Part
    b: Part
    separators: tuple[int, int]  # positions of the two <sep>
    cls: int  # position of <cls>
    targets: tuple[int, ...]  # positions where is_masked is set, ascending
    target_pieces: tuple[str, ...]

    def heading(self) -> str:
        r = self.record
        direction = ", a reversed stream" if self.reversed else ""
        return (f"{r.split} stream {r.stream_id}{direction}, record {r.stream_pos} "
                f"({r.file}, record {r.index_in_file} of the file)")

    def to_text(self, width: int = 100) -> str:
        reuse = self.memory.last + 1
        in_memory = sum(position < reuse for position in self.targets)
        order = " (shown in reading order; the model reads it right to left)" if self.reversed else ""
        lines = [self.heading(), f"label {self.label}: {LABELS.get(self.label, 'unknown label')}"]
        for part, what in ((self.memory, "memory-reuse part (segment A; its hidden states become the next "
                                         "record's memory)"), (self.a, "A (segment A)"), (self.b, "B (segment B)")):
            lines.append(f"{what}, positions {part.first}-{part.last}{order}:")
            lines.append(textwrap.fill(part.text, width, initial_indent="  ", subsequent_indent="  ")
                         if part.text else "  (empty)")
            if part is self.a:
                lines.append(f"<sep> at {self.separators[0]}")
        lines.append(f"<sep> at {self.separators[1]}, <cls> at {self.cls} (segment 2)")
        lines.append(f"targets {OPEN_MARK}...{CLOSE_MARK}: {len(self.targets)}, {in_memory} in the memory-reuse part "
                     f"and {len(self.targets) - in_memory} in A and B")
        return "\n".join(lines)

    def to_json(self) -> dict:
        r = self.record
        return {"split": r.split, "file": r.file, "index_in_file": r.index_in_file, "stream_id": r.stream_id,
                "stream_pos": r.stream_pos, "reversed": self.reversed, "label": self.label,
                "label_meaning": LABELS.get(self.label), "memory": self.memory.to_json(), "a": self.a.to_json(),
                "sep": list(self.separators), "b": self.b.to_json(), "cls": self.cls, "targets": list(self.targets),
                "target_pieces": list(self.target_pieces)}


def decode_record(data: DataDirectory, record: Record) -> RecordView:
    """The record's parts as text, its targets marked (see the module docstring for the layout)."""
    features = record.features
    ids, masked = features["input_ids"], features["is_masked"].astype(bool)
    reuse, seq_len = data.manifest.reuse_len, len(ids)
    first_sep = int(np.count_nonzero(features["segment_ids"] == SEG_A)) - 1
    reverse = data.is_reversed(record.split, record.stream_id)
    texts = [data.display(int(i)) for i in ids]

    def part(name: str, first: int, last: int) -> Part:
        span = slice(first, last + 1)
        return Part(name, first, last, running_text(texts[span], masked[span], reverse))

    targets = tuple(int(p) for p in np.flatnonzero(masked))
    return RecordView(record, reverse, int(features["label"]), part("memory", 0, reuse - 1),
                      part("a", reuse, first_sep - 1), part("b", first_sep + 1, seq_len - 3),
                      (first_sep, seq_len - 2), seq_len - 1, targets, tuple(data.pieces[int(ids[p])] for p in targets))


def running_text(texts: Sequence[str], marked: Sequence[bool], reverse: bool = False) -> str:
    """Pieces' display texts joined, runs of ``marked`` pieces wrapped in [[...]] (the mark opening
    after the run's leading space); ``reverse`` reads the pieces right to left."""
    texts, marked = list(texts), [bool(m) for m in marked]
    if reverse:
        texts, marked = texts[::-1], marked[::-1]
    out = []
    for index, (text, mark) in enumerate(zip(texts, marked)):
        if mark and (index == 0 or not marked[index - 1]):
            stripped = text.lstrip(" ")
            text = text[:len(text) - len(stripped)] + OPEN_MARK + stripped
        if mark and (index + 1 == len(texts) or not marked[index + 1]):
            text += CLOSE_MARK
        out.append(text)
    return " ".join("".join(out).split())


def layout_text(view: RecordView, texts: Sequence[str], marked: Sequence[bool]) -> str:
    """The whole record in its layout, ``memory-reuse part | A <sep> B <sep> <cls>``, from the
    pieces' display ``texts`` with runs of ``marked`` ones in [[...]]; each part of a reversed
    stream in reading order."""
    def part(p: Part) -> str:
        return running_text(texts[p.first:p.last + 1], marked[p.first:p.last + 1], view.reversed)

    def single(position: int) -> str:
        return running_text(texts[position:position + 1], marked[position:position + 1])

    first_sep, second_sep = view.separators
    return (f"{part(view.memory)} | {part(view.a)} {single(first_sep)} {part(view.b)} {single(second_sep)} "
            f"{single(view.cls)}")
