"""`python -m trainer.task`: `xlnet train` under the module name a Vertex AI custom job runs.

The same flags as `xlnet train` (trainer/commands/train.py); this entry point only hands them on.
"""
from __future__ import annotations

import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `xlnet train` with ``argv`` (default: the process's arguments)."""
    from xlnet_cli import install_crash_report, process_started, run_subcommand

    started = None
    if argv is None:  # this process's command: its start-up counts from the process's, a native crash is reported
        started = process_started()
        install_crash_report("train")
    return run_subcommand("train", list(sys.argv[1:] if argv is None else argv), prog="python -m trainer.task",
                          started=started)


if __name__ == "__main__":
    sys.exit(main())
