"""Fake Gemini API (Google AI ``generateContent``) on loopback, steered by directives (stdlib only).

Run: ``python3 fake_gemini.py --port 0 --port-file F --log gemini.jsonl``; in-process: ``start()``.
Directives are described in ``fakebase``; the default answer is ``hi from fake gemini``.

Routes (any API version prefix, any model): ``POST .../models/M:generateContent`` (one JSON answer),
``POST .../models/M:streamGenerateContent?alt=sse`` (``data: {chunk}`` frames), ``POST .../models/M:countTokens``
and ``GET .../models``. Tool names are matched against ``tools[].functionDeclarations[].name``.

gemini-cli asks side questions with ``generationConfig.responseMimeType: application/json`` and a schema
(the model router's ``{reasoning, model_choice}``, the next-speaker check's ``{reasoning, next_speaker}``).
Anything but valid JSON makes it retry and then hang, so such a request is answered with the smallest
instance of its schema (enums take their first value: ``flash``, ``user``), never with a directive.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

if __package__:
    from . import fakebase as fb
else:  # run as a script: the sibling module is importable from the script's directory
    import fakebase as fb  # type: ignore[import-not-found,no-redef]


DEFAULT_TEXT = "hi from fake gemini"
MODELS = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")

_ROUTE_RE = re.compile(r"/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent|countTokens)$")
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def latest_message(contents: Any) -> fb.Latest:
    """The latest ``contents`` entry: function responses are tool results, else the user's text.

    A trailing ``model`` entry (gemini-cli never sends one, but a prefill would be) is skipped.
    """
    if not isinstance(contents, list):
        return fb.Latest()
    for content in reversed(contents):
        if not isinstance(content, dict) or content.get("role") == "model":
            continue
        parts = content.get("parts")
        responses = [
            p["functionResponse"]
            for p in (parts if isinstance(parts, list) else [])
            if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)
        ]
        if responses:
            return fb.Latest(tool_results=[json.dumps(r.get("response"), ensure_ascii=False) for r in responses])
        return fb.Latest(text=_parts_text(parts))
    return fb.Latest()


def tool_names(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools")
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for declaration in declarations if isinstance(declarations, list) else []:
            if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                names.add(declaration["name"])
    return names


def json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema of a JSON-mode request (``responseJsonSchema`` or the older ``responseSchema``), else None."""
    config = body.get("generationConfig")
    if not isinstance(config, dict) or config.get("responseMimeType") != "application/json":
        return None
    schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
    return schema if isinstance(schema, dict) else {}


def instance_of(schema: Any, depth: int = 0) -> Any:
    """The smallest value valid for a JSON schema: required properties only, first enum value, empty lists."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return instance_of(schema[key][0], depth + 1)
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else list(properties)
        return {name: instance_of(properties.get(name, {}), depth + 1) for name in required}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if kind == "string":
        return "fake"
    return None


def _usage() -> dict[str, int]:
    return {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}


class GeminiHandler(fb.FakeHandler):
    def do_GET(self) -> None:
        self.log_request_entry(None, "")
        if self.path.split("?")[0].endswith("/models"):
            self.send_json(200, {"models": [{"name": f"models/{m}", "displayName": m} for m in MODELS]})
        else:
            self.send_error_json(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        body, raw = self.read_json()
        route = _ROUTE_RE.search(self.path.split("?")[0])
        if route is None or not isinstance(body, dict):
            self.log_request_entry(body, raw)
            self.send_error_json(404 if route is None else 400, f"cannot handle POST {self.path}")
            return
        model, method = route.group("model"), route.group("method")
        if method == "countTokens":
            self.log_request_entry(body, raw)
            self.send_json(200, {"totalTokens": max(1, len(raw) // 4)})
            return
        schema = json_schema(body)
        if schema is not None:
            reply = fb.Reply("text", text=json.dumps(instance_of(schema)))
        else:
            reply = fb.decide(latest_message(body.get("contents")), tool_names(body), DEFAULT_TEXT)
        self.log_request_entry(body, raw, reply.describe())
        if reply.kind == "status":
            headers = {"retry-after": "1"} if reply.retry_after else {}
            self.send_error_json(reply.status, f"fake status {reply.status}", headers)
        elif method == "streamGenerateContent":
            self.stream(reply, model)
        else:
            self.send_json(200, self.response([self.part(self.whole_slow_reply(reply))], model, final=True))

    def send_error_json(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        error = {"code": status, "message": message, "status": _STATUS_NAMES.get(status, "UNKNOWN")}
        self.send_json(status, {"error": error}, headers)

    @staticmethod
    def part(reply: fb.Reply) -> dict[str, Any]:
        if reply.kind == "tool":
            return {"functionCall": {"name": reply.tool_name, "args": dict(reply.tool_input)}}
        return {"text": reply.text}

    @staticmethod
    def response(parts: list[dict[str, Any]], model: str, *, final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if final:
            candidate["finishReason"] = "STOP"
            out["usageMetadata"] = _usage()
        return out

    def chunk(self, parts: list[dict[str, Any]], model: str, *, final: bool = False) -> None:
        self.write_raw(f"data: {json.dumps(self.response(parts, model, final=final))}\r\n\r\n".encode())

    def stream(self, reply: fb.Reply, model: str) -> None:
        self.start_sse()
        if reply.kind == "tool":
            self.chunk([self.part(reply)], model, final=True)  # Gemini sends a function call whole
            return
        if reply.kind == "slow":
            for i in range(1, reply.seconds + 1):
                self.chunk([{"text": f"tick {i}\n"}], model)
                if not self.sleep_tick(1.0):
                    return
            self.chunk([{"text": ""}], model, final=True)
            return
        pieces = fb.chunk_text(reply.text)
        for n, piece in enumerate(pieces):
            self.chunk([{"text": piece}], model, final=n == len(pieces) - 1)


class FakeGemini(fb.FakeServer):
    """Fake Gemini API (generateContent, streamGenerateContent?alt=sse) for end-to-end tests."""

    name = "fake_gemini"
    handler_class = GeminiHandler


def start(port: int = 0, log_path: str | os.PathLike[str] | None = None) -> tuple[FakeGemini, int]:
    """Start in-process on 127.0.0.1 on a daemon thread; stop with ``server.stop()``."""
    return fb.start_server(FakeGemini, port, log_path)


if __name__ == "__main__":
    sys.exit(fb.serve_main(FakeGemini))
