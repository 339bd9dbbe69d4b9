"""The steps every training run takes before its task is built, in one place: the ``--config`` file
read, determinism set before TensorFlow's first op, the strategy, the model directory's run lock,
the console log, and a resumed run's changed settings saved once it has a checkpoint."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable

from tfrecords.errors import UsageError

if TYPE_CHECKING:  # imported where used: `xlnet --help` should not load TensorFlow
    from trainer.configs.overrides import ConfigFile


def console_log(line: str) -> None:
    """A run's progress line on standard output, flushed at once (a job's log shows it live)."""
    print(line, flush=True)


def read_config_file(path: str | None) -> ConfigFile | None:
    """The ``--config`` file's JSON value (local or gs://), or None without the flag; a missing file
    or one that is not JSON is a UsageError naming the flag."""
    from trainer.configs.overrides import ConfigFile
    from trainer.runtime.storage import StorageError, read_json

    if not path:
        return None
    try:
        return ConfigFile(read_json(path), path)
    except StorageError as error:
        raise UsageError(f"--config {error}") from None


def start_run(config, strategy_name: str, tpu: str | None, strategy=None):
    """Determinism (``config.deterministic``) set before TensorFlow runs its first op, then the
    tf.distribute strategy named by ``--strategy`` / ``--tpu`` (``--tpu`` alone implies a TPU), or
    ``strategy`` when the caller already has one."""
    from trainer.runtime.distribution import create_strategy, make_deterministic

    if config.deterministic:
        make_deterministic()
    return strategy if strategy is not None else create_strategy(strategy_name, tpu)


def hold_run_lock(held: contextlib.ExitStack | None, model_dir, chief: bool,
                  log: Callable[[str], None] = console_log) -> None:
    """On the chief (the process that writes the model directory, whichever engine runs), takes
    ``model_dir``'s run lock (trainer/runtime/run_lock.py) until ``held`` closes; nothing without
    ``held`` (a caller that runs no training, such as a benchmark's build)."""
    from trainer.runtime.run_lock import RunLock

    if held is not None and chief:
        if not model_dir.exists():  # the lock creates it: a run refused before writing leaves none behind
            held.callback(remove_if_empty, model_dir.path)
        held.enter_context(RunLock(model_dir, log=log))


def remove_if_empty(path: str) -> None:
    """Removes the directory ``path`` if it is empty (run after its run lock is released), so that a run
    refused after taking the lock, before writing anything (its data, its labels), leaves no empty
    --model-dir. A local directory only, removed atomically (rmdir): on an object store a directory
    with nothing in it is no more than its name."""
    import os

    if "://" not in path:
        try:
            os.rmdir(path)
        except OSError:  # not empty (the run wrote something), or already gone
            pass


def settings_replacement(model_dir, name: str, config,
                         log: Callable[[str], None] = console_log) -> Callable[[int], None] | None:
    """Saves a run's settings ``config`` as ``name`` in the model directory: at once when none are
    saved; when they differ from the saved ones, logs every difference and returns what saves
    them after the run's first checkpoint (Controller's ``after_first_save``), keeping the old
    file as ``name.step-N.json``; None when nothing is left to do."""
    if not model_dir.has(name):
        model_dir.write_json(name, config.to_dict())
        return None
    changes = model_dir.settings_changes(name, config)
    if not changes:
        return None
    log(f"resuming with other settings than {model_dir.join(name)}: " + "; ".join(changes)
        + f". {name} takes them once this run saves a checkpoint; the saved ones are kept beside it")

    def replace(resumed_at: int) -> None:
        kept = model_dir.replace_settings(name, config, resumed_at)
        log(f"saved the new settings in {model_dir.join(name)}; the earlier ones are in {kept}")

    return replace
