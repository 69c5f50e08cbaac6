"""What a `send` may carry, checked once: by the service for every client, and by `hyperhive send` before it
asks the service or, when none answers, stores the wake itself. Both paths refuse exactly the same things
with the same words (the offline path used to store a 10 MiB body or a 5,000-character `from`).

- `body`: text, not blank, at most 1 MiB in UTF-8. The body itself is measured, not its JSON on the wire
  (an escape sequence costs 6 bytes there: the wire's own bound leaves room for that). Lone surrogates
  (from a terminal in a broken locale, or a raw `\\ud800` escape) cannot be stored as UTF-8: each becomes `?`.
- `from`: a name of 1 to 64 characters of ASCII letters, digits and `. _ - @ : / +`. It goes into the
  header of each wake in the agent's prompt and into every line the operator reads: no spaces, line
  breaks, control characters or look-alikes of other letters may come with it.
- `from` never starts with `agent:`: the hive's messages carry that, and nothing else may pass for them.
- `request_id`: optional, 1 to 200 printable ASCII characters (no spaces).

Standard library only, as the rest of control/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hyperhive.addresses import WAKE_PREFIX as AGENT_PREFIX
from hyperhive.errors import HyperhiveError

OPERATOR = "operator"
MAX_BODY = 1 << 20  # bytes of UTF-8
MAX_SOURCE = 64
MAX_REQUEST_ID = 200
SOURCE_CHARS = "ASCII letters, digits and . _ - @ : / +"
SOURCE = re.compile(rf"[A-Za-z0-9._@:/+-]{{1,{MAX_SOURCE}}}")
_SOURCE_BAD = re.compile(r"[^A-Za-z0-9._@:/+-]")
_REQUEST_ID = re.compile(rf"[!-~]{{1,{MAX_REQUEST_ID}}}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadSend(HyperhiveError):
    """A `send` that is refused as it stands: the message names the field and what is wrong with it, never
    echoing the value raw (it may hold anything)."""


@dataclass(frozen=True)
class Send:
    body: str
    source: str
    request_id: str | None


def check_send(body: object, source: object = OPERATOR, request_id: object = None) -> Send:
    """The send to store, or BadSend naming what is wrong."""
    if not isinstance(body, str) or not body.strip():
        raise BadSend("nothing to send: the message is empty", field="body")
    if _SURROGATE.search(body):
        body = _SURROGATE.sub("?", body)
    size = len(body.encode("utf-8"))
    if size > MAX_BODY:
        raise BadSend(
            f"the message is {size} bytes, over the limit of {MAX_BODY} (1 MiB); send a file path instead",
            field="body",
            size=size,
        )
    return Send(body, _check_source(source), _check_request_id(request_id))


def _check_source(source: object) -> str:
    if not isinstance(source, str):
        raise BadSend("`from` must be a string", field="from")
    if not source:
        raise BadSend(f"`from` must be a name of 1 to {MAX_SOURCE} {SOURCE_CHARS}; it is empty", field="from")
    if len(source) > MAX_SOURCE:
        raise BadSend(
            f"`from` must be a name of 1 to {MAX_SOURCE} {SOURCE_CHARS}; it has {len(source)} characters",
            field="from",
        )
    bad = _SOURCE_BAD.search(source)
    if bad is not None:
        raise BadSend(
            f"`from` must be a name of 1 to {MAX_SOURCE} {SOURCE_CHARS}; it holds {_describe(bad.group())}",
            field="from",
        )
    if source.startswith(AGENT_PREFIX):
        raise BadSend(
            f"`from` may not start with {AGENT_PREFIX!r}: that names another agent of the hive, whose messages"
            " come only through the hive (docs/hive.md)",
            field="from",
        )
    return source


def _check_request_id(request_id: object) -> str | None:
    if request_id is None:
        return None
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        raise BadSend(
            f"`request_id` must be 1 to {MAX_REQUEST_ID} printable ASCII characters without spaces",
            field="request_id",
        )
    return request_id


def _describe(char: str) -> str:
    """A character named so that it can be printed anywhere: `' ' (U+0020)`, `U+000A`, or for a byte that
    was not UTF-8 on the command line (Python hands it over as a surrogate escape) `the byte 0xFF`."""
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"the byte 0x{code - 0xDC00:02X} (not UTF-8)"
    return f"{char!r} (U+{code:04X})" if char.isascii() and char.isprintable() else f"U+{code:04X}"
