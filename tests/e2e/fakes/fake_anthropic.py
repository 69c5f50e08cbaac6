"""Fake Anthropic Messages API on loopback, steered by directives in the prompt (stdlib only).

Run: ``python3 fake_anthropic.py --port 0 --port-file F --log anth.jsonl``; in-process: ``start()``.
Directives are described in ``fakebase``; the default answer is ``hi from fake anthropic``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

if __package__:
    from . import fakebase as fb
else:  # run as a script: the sibling module is importable from the script's directory
    import fakebase as fb  # type: ignore[import-not-found,no-redef]


DEFAULT_TEXT = "hi from fake anthropic"
MODELS = ("claude-opus-4-8", "claude-sonnet-4-6", "claude-haiku-4-5")


def latest_message(messages: Any) -> fb.Latest:
    """Latest non-system message; Claude Code puts ``role:"system"`` entries inside ``messages``."""
    if not isinstance(messages, list):
        return fb.Latest()
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "system":
            continue
        content = message.get("content")
        if isinstance(content, list):
            results = [
                fb.content_text(block.get("content"))
                for block in content
                if isinstance(block, dict) and block.get("type") == "tool_result"
            ]
            if results:
                return fb.Latest(tool_results=results)
        if message.get("role") == "user":
            return fb.Latest(text=fb.content_text(content))
        # An assistant message last (prefill) is not a prompt; keep looking for the user turn.
    return fb.Latest()


def tool_names(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return set()
    return {t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}


def _usage(output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": 10,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


class AnthropicHandler(fb.FakeHandler):
    def do_GET(self) -> None:
        self.log_request_entry(None, "")
        if self.path.split("?")[0] == "/v1/models":
            data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in MODELS]
            self.send_json(200, {"data": data, "has_more": False, "first_id": MODELS[0], "last_id": MODELS[-1]})
        else:
            self.send_error_json(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        body, raw = self.read_json()
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            self.log_request_entry(body, raw)
            self.send_json(200, {"input_tokens": max(1, len(raw) // 4)})
            return
        if path != "/v1/messages" or not isinstance(body, dict):
            self.log_request_entry(body, raw)
            self.send_error_json(404 if path != "/v1/messages" else 400, f"cannot handle POST {self.path}")
            return
        reply = fb.decide(latest_message(body.get("messages")), tool_names(body), DEFAULT_TEXT)
        self.log_request_entry(body, raw, reply.describe())
        model = str(body.get("model") or MODELS[0])
        if reply.kind == "status":
            headers = {"retry-after": "1"} if reply.retry_after else {}
            self.send_error_json(reply.status, f"fake status {reply.status}", headers)
        elif body.get("stream"):
            self.stream(reply, model)
        else:
            self.respond_whole(reply, model)

    def send_error_json(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        payload = {"type": "error", "error": {"type": fb.anthropic_error_type(status), "message": message}}
        self.send_json(status, payload, {"request-id": "req_fake", **(headers or {})})

    def respond_whole(self, reply: fb.Reply, model: str) -> None:
        """Non-streaming answer; a slow reply sleeps first and returns all ticks at once."""
        reply = self.whole_slow_reply(reply)
        if reply.kind == "tool":
            use = {"type": "tool_use", "id": fb.new_id("toolu_"), "name": reply.tool_name}
            content: list[dict[str, Any]] = [{**use, "input": dict(reply.tool_input)}]
            stop_reason = "tool_use"
        else:
            content, stop_reason = [{"type": "text", "text": reply.text}], "end_turn"
        message = {
            "id": fb.new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": _usage(5),
        }
        self.send_json(200, message, {"request-id": "req_fake"})

    def event(self, name: str, data: dict[str, Any]) -> None:
        self.write_raw(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

    def stream(self, reply: fb.Reply, model: str) -> None:
        self.start_sse({"request-id": "req_fake"})
        start: dict[str, Any] = {
            "id": fb.new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(1),
        }
        self.event("message_start", {"type": "message_start", "message": start})
        if reply.kind == "tool":
            block = {"type": "tool_use", "id": fb.new_id("toolu_"), "name": reply.tool_name, "input": {}}
        else:
            block = {"type": "text", "text": ""}
        self.event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block})
        self.event("ping", {"type": "ping"})
        stop_reason = "end_turn"
        if reply.kind == "tool":
            args = json.dumps(dict(reply.tool_input))
            half = len(args) // 2
            for piece in (args[:half], args[half:]):  # two deltas: clients must join partial JSON
                self.delta({"type": "input_json_delta", "partial_json": piece})
            stop_reason = "tool_use"
        elif reply.kind == "slow":
            for i in range(1, reply.seconds + 1):
                self.delta({"type": "text_delta", "text": f"tick {i}\n"})
                if not self.sleep_tick(1.0):
                    return
        else:
            for piece in fb.chunk_text(reply.text):
                self.delta({"type": "text_delta", "text": piece})
        self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        self.event("message_stop", {"type": "message_stop"})

    def delta(self, delta: dict[str, Any]) -> None:
        self.event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})


class FakeAnthropic(fb.FakeServer):
    """Fake Anthropic Messages API (POST /v1/messages, SSE) for end-to-end tests."""

    name = "fake_anthropic"
    handler_class = AnthropicHandler


def start(port: int = 0, log_path: str | os.PathLike[str] | None = None) -> tuple[FakeAnthropic, int]:
    """Start in-process on 127.0.0.1 on a daemon thread; stop with ``server.stop()``."""
    return fb.start_server(FakeAnthropic, port, log_path)


if __name__ == "__main__":
    sys.exit(fb.serve_main(FakeAnthropic))
