"""The benchmarks' ``--set KEY=VALUE`` option: more settings for the runs a benchmark starts (e.g.
``n_layer=1`` for a smoke run), handed on as `xlnet`'s own ``--set`` flags."""
from __future__ import annotations

import argparse
from typing import Iterable


def add_set_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE``, repeatable, into ``args.sets`` (a list, empty by default)."""
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help)


def set_flags(items: Iterable[str]) -> list[str]:
    """``--set ITEM`` for each item, in order."""
    return [arg for item in items for arg in ("--set", item)]
