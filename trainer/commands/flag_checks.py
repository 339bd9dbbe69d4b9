"""The checks of a TensorFlow command's flags that need no TensorFlow, run by xlnet_cli.py before it
imports TensorFlow (5-25 s on a busy machine), so that a usage error returns at once: a local file or
directory that does not exist, and the configuration the command's ``check_flags(args)`` resolves
(--preset, --config, --set), and a local data directory without its manifest. The command checks
everything again where it reads: a path with a scheme (gs://) and a glob are left to it, as listing them
needs TensorFlow's filesystems."""
from __future__ import annotations

import argparse
import os
from typing import Iterable

from tfrecords.errors import UsageError
from tfrecords.manifest import manifest_location, missing_manifest_error

GLOB_CHARACTERS = frozenset("*?[")


def is_local_path(path: str) -> bool:
    """Whether ``path`` is a plain local path, which Python can check without TensorFlow: no scheme
    (gs://), no glob."""
    return "://" not in path and not GLOB_CHARACTERS & set(path)


def check_local_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace, flags: Iterable[str]) -> None:
    """Raises a UsageError naming the first of ``flags`` (option strings, or a positional's metavar)
    whose value, or one of whose values (a repeated flag), is a local path that does not exist."""
    for flag, path in _local_paths(parser, args, flags):
        if not os.path.exists(path):
            raise UsageError(f"{flag} {path!r} does not exist")


def check_local_data_directories(parser: argparse.ArgumentParser, args: argparse.Namespace,
                                 flags: Iterable[str]) -> None:
    """Raises the ManifestError of tfrecords/manifest.py, naming the flag, for the first local data
    directory of ``flags`` (or manifest file) whose manifest.json is not there."""
    for flag, path in _local_paths(parser, args, flags):
        manifest, _ = manifest_location(path)
        if not os.path.isfile(manifest):
            error = missing_manifest_error(manifest)
            raise type(error)(f"{flag} {path}: {error}")


def _local_paths(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 flags: Iterable[str]) -> Iterable[tuple[str, str]]:
    """(flag, path) for each local path given to ``flags`` (a repeated flag's values one by one)."""
    for flag in flags:
        values = getattr(args, _destination(parser, flag))
        for path in values if isinstance(values, (list, tuple)) else [values]:
            if path and is_local_path(path):
                yield flag, path


def _destination(parser: argparse.ArgumentParser, flag: str) -> str:
    """The Namespace attribute of ``flag``: an option string or a positional argument's metavar."""
    for action in parser._actions:
        if flag in action.option_strings or flag == action.metavar:
            return action.dest
    raise ValueError(f"{parser.prog} has no flag {flag}")
