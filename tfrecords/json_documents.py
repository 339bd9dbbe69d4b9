"""The one way a JSON file someone gave us becomes a Python value (the bottom of the import graph).

Every JSON file read from a user (a manifest, a model directory's configuration, `xlnet train --config`, a
Hugging Face directory's config.json and index, a safetensors header) comes through :func:`load_json`, so that
whatever its bytes are, the command says one sentence naming the file: bytes that are not UTF-8, text that is
not JSON, and nesting deeper than Python's parser can recurse (``[[[[...`` a hundred thousand deep raises a
RecursionError, not a ValueError) or deeper than any file of ours needs (:data:`MAX_DEPTH`, so that a value
that parsed cannot blow the stack of the code that walks or prints it afterwards).

The caller chooses the error class, and with it the exit status: a UsageError for a file named on the command
line (``--config``), a DataError for data or state (tfrecords/errors.py).
"""
from __future__ import annotations

import json
from typing import Any, Callable

# Our deepest file (a manifest) nests 5 levels; a config 3. Far below Python's recursion limit (1000), so that
# printing or walking a value this deep never raises RecursionError, and far above any real file.
MAX_DEPTH = 64


def load_json(data: bytes | str, source: str, error: Callable[[str], Exception],
              what: str = "valid JSON") -> Any:
    """The JSON value of ``data`` (a file's bytes, or its text), read from ``source`` (named in the error).

    Anything that is not a JSON document of at most :data:`MAX_DEPTH` levels raises ``error("SOURCE is not
    WHAT: REASON")``: bytes that are not UTF-8, a syntax error, nesting too deep."""
    try:
        value = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except RecursionError:
        raise error(f"{source} is not {what}: it nests arrays or objects deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as problem:  # json.JSONDecodeError is a ValueError
        raise error(f"{source} is not {what}: {problem}") from None
    if nesting_depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise error(f"{source} is not {what}: it nests arrays or objects deeper than {MAX_DEPTH} levels")
    return value


def nesting_depth(value: Any, limit: int) -> int:
    """How many arrays or objects deep ``value`` nests (a number or string: 0), counted without recursion
    and only up to ``limit + 1``: enough to know that it is too deep."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def json_kind(value: Any) -> str:
    """What a JSON value is, in words, for an error that names a value of the wrong type ("a string")."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "a list",
             dict: "an object", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)
