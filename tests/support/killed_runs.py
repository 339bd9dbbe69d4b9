"""A fine-tuning (or training) command run straight and run killed then restarted, for the exact-resume
tests: ``straight_and_resumed_losses``."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import xlnet_cli
from support.processes import signal_and_wait, start, wait_for
from trainer.runtime.model_dir import ModelDirectory


def straight_and_resumed_losses(args_for: Callable[[Path], list[str]], root: Path, checkpoint: int = 4,
                                killed_at: int = 6) -> tuple[dict[int, float], dict[int, float], ModelDirectory]:
    """Runs ``xlnet ARGS`` (``args_for(model_dir)``) to the end in ``root/straight``; runs it again in
    ``root/killed``, SIGKILLs it once ``ckpt-<checkpoint>`` exists and step ``killed_at`` is logged,
    and restarts it to the end. Returns both step losses and the killed run's model directory."""
    straight = root / "straight"
    assert xlnet_cli.main(args_for(straight)) == 0
    killed = root / "killed"
    process = start(["-m", "xlnet_cli"] + args_for(killed))
    log = killed / ModelDirectory.STEP_LOG
    wait_for(lambda: (killed / "checkpoints" / f"ckpt-{checkpoint}.index").exists() and log.exists()
             and len(log.read_text().splitlines()) >= killed_at, process, timeout=300, interval=0.1,
             what=f"step {killed_at}")
    signal_and_wait(process)  # SIGKILL
    assert xlnet_cli.main(args_for(killed)) == 0
    return ModelDirectory(straight).step_losses(), ModelDirectory(killed).step_losses(), ModelDirectory(killed)
