"""`python -m trainer.task`: `xlnet train` under the module name a Vertex AI custom job runs.

The same flags as `xlnet train` (trainer/commands/train.py); this entry point only hands them on.
"""
from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `xlnet train` with ``argv`` (default: the process's arguments)."""
    from xlnet_cli import process_started, run_subcommand

    started = process_started() if argv is None else None  # a run's start-up counts from the process's
    return run_subcommand("train", list(sys.argv[1:] if argv is None else argv), prog="python -m trainer.task",
                          started=started)


if __name__ == "__main__":
    sys.exit(main())
