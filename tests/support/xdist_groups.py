"""``pytest -n 2 --dist loadgroup`` (make test, make test-slow): the ``xdist_group`` marker honoured on pytest 9.

pytest-xdist 3.8 groups a test by appending ``@GROUP`` to ``item._nodeid`` in each worker; its
controller then sends every test whose id ends in the same ``@GROUP`` to one worker, so that a
module fixture those tests share is built once. Since pytest 9 a node's id is ``item._id`` and
``nodeid`` is read from it: xdist's assignment changes nothing, every group marker was ignored and
such fixtures were built on both workers (a module's export, a pair of backend runs: minutes of
CI). :func:`apply_groups` gives the id xdist meant to give; where xdist's own assignment worked
(pytest 8) the id already ends in its group and is left alone.
"""
from __future__ import annotations

import pytest


def group_of(item: pytest.Item) -> str | None:
    """The group xdist would give ``item``: its ``xdist_group`` names joined by ``_``, or None."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) or None


def apply_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker under ``--dist loadgroup``: each grouped item's id ends in ``@GROUP``."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        group = group_of(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        from _pytest.nodeid import NodeId  # pytest 9's structured id, where nodeid is read from

        item._id = NodeId.parse(f"{item.nodeid}@{group}")
