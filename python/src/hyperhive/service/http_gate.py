"""In front of the mcp SDK's app: who may send a body, judged from the head; and only JSON in UTF-8 gets in.

Two halves, one for each phase of service/http_connection.py:

- `Admission`, from a request's head alone: POST only, and the bearer token. Stateless, the tools' server
  never sends anything unasked, so the optional GET stream would only idle (and hold shutdown up) and
  DELETE has no session to end: both get 405, which clients take as "no stream". A request without the
  token gets 401 (worded as the SDK's own check words it) before its body is waited for or read. Checked
  after the body, as the SDK checks it, the token would let anyone hold the agent's request slots with
  heads whose bodies never come, and have costly bodies parsed on the event loop.
- `JsonBodies`, around the SDK's app, for an admitted request's body (whole, within its bound and deadline:
  the server's): one JSON document in UTF-8, nested no deeper than jsontext's limit, holding at most
  `MAX_CONTAINERS` arrays and objects, counted before anything is parsed (jsontext.containers): parsing
  174,000 empty lists costs the service a third of a second of garbage collection, and the SDK parses and
  validates the body again, on the event loop; no message of ours comes near the bound. A body over
  `INLINE_CHECK_BYTES` is checked on a worker thread, where the Python part of the check shares the
  interpreter with the event loop instead of holding it (its C parts, the count and `json.loads`, hold it
  for milliseconds: some tens at the 512 KiB bound, for a body only the agent, holding the token, can send).

The SDK checks the token again, and Host and Origin, and parses the body: this gate only keeps what cannot
pass those from costing the service more than a head.
"""

from __future__ import annotations

import json

from hyperhive import jsontext
from hyperhive.service.agent_tokens import AgentTokens
from hyperhive.service.http_asgi import App, Message, Receive, Scope, Send
from hyperhive.service.http_limits import Refusal
from hyperhive.worker import SerialWorker

# The arrays and objects one request may hold: a tool call of ours holds a handful.
MAX_CONTAINERS = 10_000
# Bodies up to this size are checked on the event loop: at most a millisecond's work, less than a thread's hop.
INLINE_CHECK_BYTES = 64 * 1024

_TEXT = (b"content-type", b"text/plain; charset=utf-8")
_NOT_POST = Refusal(405, b"only POST is served here\n", (_TEXT, (b"allow", b"POST")))
# As mcp.server.auth.middleware.bearer_auth.RequireAuthMiddleware answers a request without a valid token.
_AUTH_ERROR = 'error="invalid_token", error_description="Authentication required"'
_NO_TOKEN = Refusal(
    401,
    json.dumps({"error": "invalid_token", "error_description": "Authentication required"}).encode(),
    ((b"content-type", b"application/json"), (b"www-authenticate", f"Bearer {_AUTH_ERROR}".encode())),
)


class Admission:
    """The server's `admit`: POST only (405), with `Authorization: Bearer <token>` of an agent (401), from
    the head."""

    def __init__(self, tokens: AgentTokens) -> None:
        self._tokens = tokens

    def __call__(self, scope: Scope) -> Refusal | None:
        if scope["method"] != "POST":
            return _NOT_POST
        if not self.authorized(scope["headers"]):
            return _NO_TOKEN
        return None

    def authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Exactly one Authorization header, `Bearer ` (any case) and the token, compared in constant time."""
        values = [value for name, value in headers if name == b"authorization"]
        if len(values) != 1 or values[0][:7].lower() != b"bearer ":
            return False
        return self._tokens.agent_of(values[0][7:]) is not None


class JsonBodies:
    """The gate as an ASGI app around `app`: a body that is not one bounded JSON document in UTF-8 is
    answered 400 (a JSON-RPC parse error) without reaching `app`."""

    def __init__(self, app: App) -> None:
        self.app = app
        self._worker = SerialWorker()  # one check at a time: parallel ones would only contend for the GIL

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return
        body = bytes(message.get("body", b""))
        problem = not_json(body) if len(body) <= INLINE_CHECK_BYTES else await self._worker.run(not_json, body)
        if problem is not None:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {problem}"}}
            await _answer(send, 400, json.dumps(error).encode())
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
    """Why `body` is not one JSON document in UTF-8 that the SDK may parse, or None. The SDK parses bytes
    with `json.loads`, which guesses UTF-16/32 from NUL bytes and lets decoding and nesting errors escape as
    a 500; a body that passes here (UTF-8, nested no deeper than jsontext's limit, far from the recursion
    limit, with a bounded count of containers) parses there the same way, and quickly."""
    if jsontext.containers(body) > MAX_CONTAINERS:  # before a single one is allocated
        return f"the body holds more than {MAX_CONTAINERS} arrays and objects"
    try:
        jsontext.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    except jsontext.NestedTooDeeply:
        return "the body is nested too deeply"
    except ValueError as exc:
        return str(exc)
    return None


async def _answer(send: Send, status: int, body: bytes) -> None:
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
