"""``pytest -n 2 --dist loadgroup`` (make test, make test-slow): the ``xdist_group`` marker honoured on pytest 9.

pytest-xdist 3.8 groups a test by appending ``@GROUP`` to ``item._nodeid`` in each worker; its
controller then sends every test whose id ends in the same ``@GROUP`` to one worker, so that a
module fixture those tests share is built once. Since pytest 9 a node's id is ``item._id`` and
``nodeid`` is read from it: xdist's assignment changes nothing, every group marker was ignored and
such fixtures were built on both workers (a module's export, a pair of backend runs: minutes of
CI). :func:`apply_groups` gives the id xdist meant to give; where xdist's own assignment worked
(pytest 8) the id already ends in its group and is left alone.

A test without the marker that shares a module- or class-scoped fixture with other tests of its
module is grouped with them too (:func:`shared_fixture_groups`): such a fixture (an export, a run, a
built network) is otherwise built once on each worker that draws one of its tests. The marker is
still how tests of several modules, or sharing a session fixture, are kept together.
"""
from __future__ import annotations

import pytest


def group_of(item: pytest.Item) -> str | None:
    """The group xdist would give ``item``: its ``xdist_group`` names joined by ``_``, or None."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) or None


SHARED_SCOPES = ("module", "class", "package")


def shared_fixtures(item: pytest.Item) -> list[str]:
    """The fixtures of ``item`` that live longer than one test (module, class or package scope)."""
    definitions = getattr(item, "_fixtureinfo", None)  # pytest's record of the fixtures an item uses
    if definitions is None:
        return []
    return sorted(name for name, defs in definitions.name2fixturedefs.items() if defs and defs[-1].scope in SHARED_SCOPES)


def shared_fixture_groups(items: list[pytest.Item]) -> dict[str, str]:
    """node id -> group for the unmarked tests that share a longer-lived fixture with another test of
    their module: the tests connected through such fixtures form one group, named by its module and
    the first of its fixtures. A test sharing nothing is left out (it can run anywhere)."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(key: tuple[str, str]) -> tuple[str, str]:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    uses: dict[str, list[tuple[str, str]]] = {}
    users: dict[tuple[str, str], int] = {}
    for item in items:
        if group_of(item) is not None:
            continue
        keys = [(item.nodeid.split("::")[0], name) for name in shared_fixtures(item)]
        uses[item.nodeid] = keys
        for key in keys:
            users[key] = users.get(key, 0) + 1
            parent[root(key)] = root(keys[0])
    first: dict[tuple[str, str], tuple[str, str]] = {}  # each connected set of fixtures -> its least member
    for key in parent:
        first[root(key)] = min(first.get(root(key), key), key)
    groups: dict[str, str] = {}
    for nodeid, keys in uses.items():
        if any(users[key] > 1 for key in keys):
            module, fixture = first[root(keys[0])]
            groups[nodeid] = f"{module.rsplit('/', 1)[-1].removesuffix('.py')}.{fixture}"
    return groups


def apply_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker under ``--dist loadgroup``: each grouped item's id ends in ``@GROUP``."""
    if not getattr(config.option, "loadgroup", False):
        return
    shared = shared_fixture_groups(items)
    for item in items:
        group = group_of(item) or shared.get(item.nodeid)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        from _pytest.nodeid import NodeId  # pytest 9's structured id, where nodeid is read from

        item._id = NodeId.parse(f"{item.nodeid}@{group}")
