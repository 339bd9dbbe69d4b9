"""What `xlnet train` and `xlnet finetune` share: the run flags (configuration file, overrides,
strategy, device memory), help texts derived from the configuration classes, logging, and the
summary line a finished run prints."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from typing import Any


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


def field_help(config_class: type, name: str) -> str:
    """The help text of a configuration field with a flag of its own: the field's ``help`` metadata
    and its default, so that a flag's help never drifts from the class that owns the default."""
    field = {field.name: field for field in dataclasses.fields(config_class)}[name]
    return f"{field.metadata['help']} (default: {field.default})"


def configure_logging() -> None:
    """Our own progress at INFO; libraries (TensorFlow's Python side, Keras, absl) only from WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("trainer").setLevel(logging.INFO)


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    """--device-memory, shared by `xlnet train` and `xlnet finetune` (trainer/launch/fit_check.py)."""
    parser.add_argument("--device-memory", metavar="SIZE",
                        help="memory per replica (e.g. 16GiB, 80GB, 512MiB) the plan must fit; for devices that "
                             "report none (a CPU). Default: a GPU's as TensorFlow reports it, a TPU's by its "
                             "generation; none on a CPU (no check)")


def print_summary(summary: dict[str, Any]) -> None:
    """A finished (or preempted) run's summary: one JSON line on standard output."""
    print(json.dumps(summary), flush=True)
