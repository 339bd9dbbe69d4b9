"""The factorisation orders the trainer draws at one step, and what each target may see.

The rows of step ``STEP`` come from the pretraining task's own reader
(trainer/tasks/pretraining.py ``PretrainingTask.reader``, tfrecords/reader.py): the same records,
masks (resampled ones too, with ``train.resample_masks``) and ``perm_seed`` the trainer gets at that
step for the same data, batch size, accumulation and seed. Ranks and visibility come from the
on-device builder the pretrainer uses (trainer/models/permutation.py), run on those features:
nothing here restates the rule.

The factorisation order: each part (the memory-reuse part, then the A/B part) is cut into blocks of
``perm_size`` positions and one order of the block offsets is applied to every block of the part.
A target's query stream sees the non-target tokens of its part (the A/B part sees the whole
memory-reuse part as well), the targets and functional tokens earlier in the order, and the
memory of the previous record; never itself.
"""
from __future__ import annotations

import dataclasses
import textwrap

import numpy as np

from tfrecords.stream_layout import ManifestMismatchError, slot_start, validate_manifest
from trainer.configs.training import TrainConfig
from trainer.inspection.records import (
    CLOSE_MARK,
    OPEN_MARK,
    DataDirectory,
    InspectionError,
    RecordView,
    decode_record,
    layout_text,
    read_stream,
)
from trainer.models.config import ModelConfig

HIDDEN = "_"
QUERIES_SHOWN = 3  # the first, middle and last predicted target in the factorisation order


@dataclasses.dataclass(frozen=True)
class Query:
    """One predicted target and the positions its query stream may attend to."""

    position: int
    piece: str
    rank: int
    may_see: tuple[int, ...]
    text: str  # the record with what it may not see hidden

    def to_json(self) -> dict:
        return {"position": self.position, "piece": self.piece, "rank": self.rank, "may_see": list(self.may_see)}


@dataclasses.dataclass(frozen=True)
class PermutationView:
    """One row of one step's batch: its record, the order drawn for it, and a few targets' views."""

    step: int
    row: int
    rows: int
    micro_step: int
    epoch: int
    perm_seed: tuple[int, int]
    record: RecordView
    ranks: np.ndarray  # [seq_len] factorisation rank of every position
    perm_size: int
    predicted: tuple[int, ...]  # the positions the loss predicts (at most num_predict)
    queries: tuple[Query, ...]

    def order(self) -> list[int]:
        """Positions in factorisation order."""
        return [int(p) for p in np.argsort(self.ranks, kind="stable")]

    def block_orders(self) -> list[tuple[int, int, list[int]]]:
        """(first, last position, order of the block offsets) of each part."""
        reuse, seq_len = self.record.memory.last + 1, len(self.ranks)
        parts = [(0, reuse - 1), (reuse, seq_len - 1)] if reuse else [(0, seq_len - 1)]
        return [(first, last, [int(p) for p in np.argsort(self.ranks[first:first + self.perm_size])])
                for first, last in parts]

    def to_text(self, width: int = 100) -> str:
        micro = f", micro-step {self.micro_step}" if self.micro_step else ""
        lines = [f"step {self.step}{micro}, batch row {self.row} of {self.rows}, epoch {self.epoch}, perm_seed "
                 f"{list(self.perm_seed)}: {self.record.heading()}", self.record.to_text(width).split("\n", 1)[1],
                 f"factorisation order (each part in blocks of {self.perm_size}; one order of the offsets for every "
                 "block of a part):"]
        for first, last, offsets in self.block_orders():
            name = "memory-reuse part" if first == 0 and self.record.memory.last >= 0 else "A/B part"
            lines.append(f"  {name}, positions {first}-{last}, offsets in order:")
            lines.append(textwrap.fill(" ".join(map(str, offsets)), width, initial_indent="    ",
                                       subsequent_indent="    "))
        lines.append(f"the loss predicts {len(self.predicted)} targets; what {len(self.queries)} of them may see "
                     f"(memory-reuse part | A <sep> B <sep> <cls>; {HIDDEN} hidden; {OPEN_MARK}piece{CLOSE_MARK} the "
                     "target; the memory of the previous record is visible to all):")
        for query in self.queries:
            number = sorted(self.predicted, key=lambda p: self.ranks[p]).index(query.position) + 1
            lines.append(f"  target at {query.position} {query.piece!r} ({number} of {len(self.predicted)} in the "
                         f"order): sees {len(query.may_see)} of {len(self.ranks)} positions")
            lines.append(textwrap.fill(query.text, width, initial_indent="    ", subsequent_indent="    "))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"step": self.step, "row": self.row, "micro_step": self.micro_step, "epoch": self.epoch,
                "perm_seed": list(self.perm_seed), **self.record.to_json(), "order": self.order(),
                "predicted_targets": list(self.predicted), "queries": [q.to_json() for q in self.queries]}


def check_data(data: DataDirectory, model: ModelConfig, train: TrainConfig) -> None:
    """InspectionError unless the trainer would accept this data with these settings (its own check)."""
    try:
        validate_manifest(data.manifest, seq_len=train.seq_len, reuse_len=model.reuse_len, bi_data=model.bi_data,
                          num_predict=train.num_predict, vocab_size=data.vocab.vocab_size,
                          source=f"{data.directory}'s manifest")
    except ManifestMismatchError as error:
        raise InspectionError(f"{error}\n(the training settings come from --preset and --set)") from None


def step_views(data: DataDirectory, model: ModelConfig, train: TrainConfig, split: str, step: int,
               rows: int, stream: int | None = None) -> list[PermutationView]:
    """The first ``rows`` rows (or the rows reading ``stream``) of step ``step``'s batch of ``split``."""
    import tensorflow as tf

    from trainer.models.permutation import dense_inputs
    from trainer.tasks.pretraining import PretrainingTask

    if step < 0:
        raise InspectionError(f"--permutation {step}: the step must be >= 0")
    check_data(data, model, train)
    batch = train.train_batch_size if split == "train" else train.eval_batch_size
    reader = PretrainingTask(model, train, data.manifest).reader(split, batch, start_step=step)
    try:
        walks = reader.slot_walks(1, range(1))
        features = next(iter(reader.dataset()))
    except ValueError as error:  # the batch needs more streams than the split has
        raise InspectionError(f"{error} (--set train.train_batch_size=...)") from None
    flat = {name: tf.reshape(value, [-1, *value.shape[2:]]) for name, value in features.items()}
    special = data.manifest.special_ids
    dense = dense_inputs(flat["input_ids"], flat["is_masked"], flat["perm_seed"], model.reuse_len, train.perm_size,
                         train.num_predict, int(special["sep"]), int(special["cls"]))
    flat, dense = ({k: v.numpy() for k, v in d.items()} for d in (flat, dense))
    chosen = _chosen_rows(flat["stream_id"], rows, stream, step)
    return [_view(data, split, step, index, batch, flat, dense, walks, reader.accumulation_steps, train.perm_size)
            for index in chosen]


def _chosen_rows(stream_ids: np.ndarray, rows: int, stream: int | None, step: int) -> list[int]:
    if stream is None:
        if not 1 <= rows <= len(stream_ids):
            raise InspectionError(f"--records {rows}: step {step}'s batch has {len(stream_ids)} rows")
        return list(range(rows))
    chosen = [int(i) for i in np.flatnonzero(stream_ids == stream)][:rows]
    if not chosen:
        raise InspectionError(f"--stream {stream}: no row of step {step}'s batch reads it (the rows read streams "
                              f"{', '.join(map(str, sorted(set(stream_ids.tolist()))))})")
    return chosen


def _view(data: DataDirectory, split: str, step: int, index: int, batch: int, flat: dict, dense: dict,
          walks: list, accumulation: int, perm_size: int) -> PermutationView:
    micro, row = divmod(index, batch)
    stream_id, stream_pos = int(flat["stream_id"][index]), int(flat["stream_pos"][index])
    record = read_stream(data, split, stream_id, 1, first=stream_pos)[0]
    # the trainer's masks at this step (resampled after the first epoch with train.resample_masks)
    record = dataclasses.replace(record, features={**record.features, "is_masked": flat["is_masked"][index]})
    view = decode_record(data, record)
    ranks = dense["ranks"][index]
    predicted = tuple(int(p) for p in np.flatnonzero(dense["target_mapping"][index].sum(axis=0) > 0))
    in_order = sorted(predicted, key=lambda p: ranks[p])
    picks = sorted({in_order[0], in_order[len(in_order) // 2], in_order[-1]}, key=lambda p: ranks[p]) \
        if in_order else []
    blocked = dense["perm_mask"][index] > 0
    queries = tuple(_query(data, view, flat["input_ids"][index], ranks, blocked[p], p) for p in picks[:QUERIES_SHOWN])
    epoch = slot_start(walks[row], step * accumulation + micro).epoch
    return PermutationView(step, row, batch, micro, epoch, tuple(int(s) for s in flat["perm_seed"][index]), view,
                           ranks, perm_size, predicted, queries)


def _query(data: DataDirectory, view: RecordView, ids: np.ndarray, ranks: np.ndarray, blocked: np.ndarray,
           position: int) -> Query:
    texts = []
    for j, token in enumerate(ids):
        text = data.display(int(token))
        if j != position and blocked[j]:
            text = (" " if text.startswith(" ") else "") + HIDDEN
        texts.append(text)
    marked = np.arange(len(ids)) == position
    return Query(position, data.pieces[int(ids[position])], int(ranks[position]),
                 tuple(int(j) for j in np.flatnonzero(~blocked)), layout_text(view, texts, marked))
