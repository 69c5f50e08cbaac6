"""JSON from outside hyperhive, parsed with a fixed nesting limit.

`json.loads` has no nesting limit of its own: it recurses until Python's recursion limit, so how deep a
document may nest depends on how deep the caller's stack already is (the same line parsed in one place and
refused in another), and the error is `RecursionError`, which is no `ValueError` and so escapes the
handlers that turn bad input into a clear error. Everything read from a peer (an agent's stdout, an MCP
client, the control socket, an HTTP body) or from the operator (environment, files) goes through `loads`:
one limit whatever the stack, and `NestedTooDeeply`, a `ValueError`, when it is exceeded. An integer past
Python's int conversion limit is refused the same way (`Refused`): `json.loads` raises a bare `ValueError`
for it, which the readers that catch `JSONDecodeError` let through as a traceback.

`containers` counts a text's arrays and objects without parsing it, for a reader that must refuse a
document holding too many before anything allocates them: parsing 174,000 empty lists costs a process with
a large heap a third of a second, most of it in the garbage collector, all of it holding the interpreter.
"""

from __future__ import annotations

import json
import re
import sys

# The forwarding bash server imports this, and `typing` costs its start-up (bash_mcp/protocol.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Containers inside containers: `[]` is 1 deep, `{"a": [1]}` 2. serde_json's default limit is 128 too, so
# a Rust peer refuses what we refuse; no message of any protocol we speak comes near it.
MAX_DEPTH = 128


class Refused(ValueError):
    """JSON text we do not read though its syntax may be fine; `msg` says why, as `JSONDecodeError.msg` does."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


class NestedTooDeeply(Refused):
    """A JSON document nested deeper than the limit (whether or not the rest of it is valid JSON)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested more than {limit} levels deep")
        self.limit = limit


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH, **kwargs: Any) -> Any:
    """`json.loads(text, **kwargs)`, refusing documents nested deeper than `max_depth` (`NestedTooDeeply`)
    and integers too long to convert (`Refused`).

    Parsing first and measuring after keeps the common case at C speed: a document with no more brackets
    than the limit cannot be too deep, and one deeper than the recursion limit never finishes parsing.
    """
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise NestedTooDeeply(max_depth) from None
    except ValueError as exc:
        if type(exc) is ValueError and "integer string conversion" in str(exc):
            raise Refused(f"a number longer than {sys.get_int_max_str_digits()} digits") from None
        raise
    if _brackets(text) > max_depth and _deeper_than(value, max_depth):
        raise NestedTooDeeply(max_depth)
    return value


# A JSON string, escapes included (possessive: no backtracking, whatever the input). Compiled on first use
# (re's cache): the forwarding bash server imports this module and counts its start-up in milliseconds.
_STRING = rb'"(?:[^"\\]++|\\.)*+"'


def containers(raw: bytes) -> int:
    """How many arrays and objects the JSON text `raw` holds: its brackets outside strings, counted at C speed
    (a few milliseconds for 512 KiB) and allocating nothing per container. Exact for valid JSON; for text
    that is not, a count that parsing would refuse anyway."""
    outside = re.sub(_STRING, b"", raw)
    return outside.count(b"[") + outside.count(b"{")


def _brackets(text: str | bytes) -> int:
    if isinstance(text, str):
        return text.count("[") + text.count("{")
    return text.count(b"[") + text.count(b"{")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` has containers nested more than `limit` deep; iterative, so any depth is safe."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
