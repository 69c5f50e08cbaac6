"""In front of the mcp SDK's app: only POST, a bounded body that arrives in time, only JSON in UTF-8.

Stateless, the tools' server never sends anything unasked, so the optional GET stream would only idle (and
hold shutdown up) and DELETE has no session to end: both get 405, which clients take as "no stream". The
body limit (413) is checked before anything parses the body; the SDK has its own only from a late mcp 1.2x
on, and this one holds on every version the project allows.
"""

from __future__ import annotations

import json

import anyio

from hyperhive import jsontext
from hyperhive.harness.http_server import App, Message, Receive, Scope, Send


class PostOnly:
    """The gate as an ASGI app around `app`: bodies up to `limit` bytes, arriving within `body_timeout`."""

    def __init__(self, app: App, limit: int, body_timeout: float) -> None:
        self.app = app
        self.limit = limit
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":
            await _plain(send, 405, "only POST is served here\n", [(b"allow", b"POST")])
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await _plain(send, 413, f"request body larger than {self.limit} bytes\n")
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        with anyio.move_on_after(self.body_timeout):
            while more:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    await _plain(send, 413, f"request body larger than {self.limit} bytes\n")
                    return
                chunks.append(chunk)
                more = message.get("more_body", False)
        if more:
            await _plain(send, 408, f"the request body did not arrive within {self.body_timeout:g} s\n")
            return
        body = b"".join(chunks)
        problem = not_json(body)
        if problem is not None:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {problem}"}}
            await _plain(send, 400, json.dumps(error), content_type=b"application/json")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def not_json(body: bytes) -> str | None:
    """Why `body` is not one JSON document in UTF-8, or None. The SDK parses bytes with `json.loads`, which
    guesses UTF-16/32 from NUL bytes and lets decoding and nesting errors escape as a 500; a body that passes
    here (UTF-8, nested no deeper than jsontext's limit, far from the recursion limit) parses there the same
    way."""
    try:
        jsontext.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    except jsontext.NestedTooDeeply:
        return "the body is nested too deeply"
    except ValueError as exc:
        return str(exc)
    return None


async def _plain(
    send: Send,
    status: int,
    text: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    content_type: bytes = b"text/plain; charset=utf-8",
) -> None:
    body = text.encode()
    head = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})
