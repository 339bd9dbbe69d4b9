"""What `xlnet train` and `xlnet finetune` share: the run flags (configuration file, overrides,
strategy), reading the --config file, help texts derived from the configuration classes, and the
exit codes of a training run."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from typing import TYPE_CHECKING, Any, Callable

from trainer.commands import EXIT_DATA, EXIT_USAGE

if TYPE_CHECKING:  # imported where used: `xlnet --help` should not load TensorFlow
    from trainer.configs.overrides import ConfigFile


def add_config_arguments(parser: argparse.ArgumentParser, scope: str) -> None:
    """--config and --set (`xlnet train`, `xlnet finetune`, `xlnet plan`); ``scope`` names the run's
    own configuration in the config file and in --set keys."""
    parser.add_argument("--config", help=f'JSON file {{"model": {{...}}, "{scope}": {{...}}}} applied over the preset')
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override one field: model.NAME=..., {scope}.NAME=... or a bare NAME (repeatable)")


def add_run_arguments(parser: argparse.ArgumentParser, scope: str) -> None:
    """--config, --set, --strategy and --tpu, shared by `xlnet train` and `xlnet finetune`;
    ``scope`` names the run's own configuration in the config file and in --set keys."""
    from trainer.runtime.distribution import STRATEGIES

    add_config_arguments(parser, scope)
    parser.add_argument("--strategy", default="auto", choices=STRATEGIES, help="tf.distribute strategy")
    parser.add_argument("--tpu", help="TPU name, grpc:// address, or 'local' on a TPU VM (implies --strategy tpu)")


def read_config_file(path: str | None) -> ConfigFile | None:
    """The ``--config`` file's JSON value (local or gs://), or None without the flag; a missing file
    or one that is not JSON is a ValueError naming the flag."""
    from trainer.configs.overrides import ConfigFile
    from trainer.runtime.storage import StorageError, read_json

    if not path:
        return None
    try:
        return ConfigFile(read_json(path), path)
    except StorageError as error:
        raise ValueError(f"--config {error}") from None


def field_help(config_class: type, name: str) -> str:
    """The help text of a configuration field with a flag of its own: the field's ``help`` metadata
    and its default, so that a flag's help never drifts from the class that owns the default."""
    field = {field.name: field for field in dataclasses.fields(config_class)}[name]
    return f"{field.metadata['help']} (default {field.default})"


def configure_logging() -> None:
    """Our own progress at INFO; libraries (TensorFlow's Python side, Keras, absl) only from WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("trainer").setLevel(logging.INFO)


def run_training(command: str, train: Callable[[], dict[str, Any]], bad_input: tuple[type[BaseException], ...],
                 bad_data: tuple[type[BaseException], ...] = ()) -> int:
    """Runs ``train`` (which returns the run's summary) and turns how it ended into the exit code:
    0 with the summary as one JSON line on standard output, EXIT_DATA when the run stopped on its state
    (diverged, no readable checkpoint, unreadable input: TrainingStopped) or
    damaged data (the ``bad_data`` errors), EXIT_USAGE with the message on bad input (the
    ``bad_input`` errors); both on standard error."""
    from trainer.runtime.controller import TrainingStopped

    try:
        summary = train()
    except TrainingStopped as error:  # diverged, no readable checkpoint, unreadable input
        print(f"{command}: stopped: {error}", file=sys.stderr, flush=True)
        return EXIT_DATA
    except bad_data as error:
        print(f"{command}: error: {error}", file=sys.stderr, flush=True)
        return EXIT_DATA
    except bad_input as error:
        print(f"{command}: error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    print(json.dumps(summary), flush=True)
    return 0


def settings_replacement(model_dir, name: str, config) -> Callable[[int], None] | None:
    """Saves a run's settings ``config`` as ``name`` in the model directory: at once when none are
    saved; when they differ from the saved ones, prints every difference and returns what saves
    them after the run's first checkpoint (Controller's ``after_first_save``), keeping the old
    file as ``name.step-N.json``; None when nothing is left to do."""
    if not model_dir.has(name):
        model_dir.write_json(name, config.to_dict())
        return None
    changes = model_dir.settings_changes(name, config)
    if not changes:
        return None
    print(f"resuming with other settings than {model_dir.join(name)}: " + "; ".join(changes)
          + f". {name} takes them once this run saves a checkpoint; the saved ones are kept beside it", flush=True)

    def replace(resumed_at: int) -> None:
        kept = model_dir.replace_settings(name, config, resumed_at)
        print(f"saved the new settings in {model_dir.join(name)}; the earlier ones are in {kept}", flush=True)

    return replace
