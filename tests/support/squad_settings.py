"""The SQuAD settings tests build features and answers with: FinetuneConfig's squad defaults
(run_squad.py's), the one place they live."""
from __future__ import annotations

from trainer.configs.finetuning import FinetuneConfig

SQUAD = FinetuneConfig().for_task("squad")
WINDOWS = dict(max_seq_length=SQUAD.max_seq_length, doc_stride=SQUAD.doc_stride,
               max_query_length=SQUAD.max_query_length)
ANSWERS = dict(n_best=SQUAD.n_best, max_answer_length=SQUAD.max_answer_length)


def windows(**changes) -> dict:
    """build_features' window settings: the squad defaults with ``changes``."""
    return {**WINDOWS, **changes}
