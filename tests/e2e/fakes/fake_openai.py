"""Fake OpenAI API on loopback: chat completions and Responses, steered by directives in the prompt (stdlib only).

Run: ``python3 fake_openai.py --port 0 --port-file F --log oai.jsonl``; in-process: ``start()``.
Directives are described in ``fakebase``; the default answer is ``hi from fake openai``. Tool names are
matched exactly against ``tools[].function.name`` (opencode names MCP tools ``<server>_<tool>``).
opencode's title-generation requests (``tools: []``) embed the user's prompt; since they carry no tools
they never get a tool call, an error or a slow stream, just a short title.

``POST /v1/responses`` is the Responses API that codex speaks (codex removed ``wire_api = "chat"``): the
request's ``input`` items are read the same way (trailing ``function_call_output`` items are tool results),
tool names come from ``tools[].name`` (functions) and ``tools[].tools[].name`` (namespaces), and the stream
is ``event: response.*`` frames ending in ``response.completed``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

if __package__:
    from . import fakebase as fb
else:  # run as a script: the sibling module is importable from the script's directory
    import fakebase as fb  # type: ignore[import-not-found,no-redef]


DEFAULT_TEXT = "hi from fake openai"
TITLE_TEXT = "Fake session title"
MODELS = ("fake-model",)

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_denied",
    404: "not_found",
    429: "rate_limit_exceeded",
}


def latest_message(messages: Any) -> fb.Latest:
    """Latest non-system message; trailing ``role:"tool"`` messages are tool results (parallel calls)."""
    if not isinstance(messages, list):
        return fb.Latest()
    results: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") == "system":
            continue
        role = message.get("role")
        if role == "tool":
            results.insert(0, fb.content_text(message.get("content")))
            continue
        if results:
            break
        if role == "user":
            return fb.Latest(text=fb.content_text(message.get("content")))
    return fb.Latest(tool_results=results) if results else fb.Latest()


def tool_names(body: dict[str, Any]) -> set[str]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return set()
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def response_tool_names(body: dict[str, Any]) -> dict[str, tuple[str | None, str]]:
    """Function tools of a Responses request: directive name -> (namespace, function name).

    codex groups each MCP server's tools under a ``namespace`` tool named ``mcp__<server>``; such a tool
    is offered to directives as ``mcp__<server>__<tool>`` (the name claude gives it too).
    """
    names: dict[str, tuple[str | None, str]] = {}
    for tool in body.get("tools") if isinstance(body.get("tools"), list) else []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") == "function":
            names[tool["name"]] = (None, tool["name"])
        elif tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            for inner in tool["tools"]:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    names[f"{tool['name']}__{inner['name']}"] = (tool["name"], inner["name"])
    return names


def latest_input(items: Any) -> fb.Latest:
    """Latest Responses ``input`` item: trailing ``function_call_output`` items are tool results, else the
    latest user message (``developer``/``system`` messages, codex's instructions, are skipped)."""
    if isinstance(items, str):
        return fb.Latest(text=items)
    if not isinstance(items, list):
        return fb.Latest()
    results: list[str] = []
    for item in reversed(items):
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "function_call_output":
            output = item.get("output")
            results.insert(0, output if isinstance(output, str) else fb.content_text(output))
            continue
        if results:
            break
        if kind == "message" and item.get("role") == "user":
            return fb.Latest(text=fb.content_text(item.get("content")))
    return fb.Latest(tool_results=results) if results else fb.Latest()


def is_title_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    return any(
        isinstance(m, dict) and m.get("role") == "system" and "title generator" in fb.content_text(m.get("content"))
        for m in messages
    )


class OpenAIHandler(fb.FakeHandler):
    def do_GET(self) -> None:
        self.log_request_entry(None, "")
        if self.path.split("?")[0] == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in MODELS]
            self.send_json(200, {"object": "list", "data": data})
        else:
            self.send_error_json(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        body, raw = self.read_json()
        path = self.path.split("?")[0]
        if path == "/v1/responses" and isinstance(body, dict):
            self.answer_responses(body, raw)
            return
        if path != "/v1/chat/completions" or not isinstance(body, dict):
            self.log_request_entry(body, raw)
            self.send_error_json(404 if path != "/v1/chat/completions" else 400, f"cannot handle POST {self.path}")
            return
        names = tool_names(body)
        if is_title_request(body) and not names:
            reply = fb.Reply("text", text=TITLE_TEXT)
        else:
            reply = fb.decide(latest_message(body.get("messages")), names, DEFAULT_TEXT)
        self.log_request_entry(body, raw, reply.describe())
        model = str(body.get("model") or MODELS[0])
        if reply.kind == "status":
            headers = {"retry-after": "1"} if reply.retry_after else {}
            self.send_error_json(reply.status, f"fake status {reply.status}", headers)
        elif body.get("stream"):
            options = body.get("stream_options")
            self.stream(reply, model, isinstance(options, dict) and bool(options.get("include_usage")))
        else:
            self.respond_whole(reply, model)

    def send_error_json(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        kind = _OPENAI_ERROR_TYPES.get(status, "server_error")
        self.send_json(status, {"error": {"message": message, "type": kind, "param": None, "code": kind}}, headers)

    def respond_whole(self, reply: fb.Reply, model: str) -> None:
        """Non-streaming answer; a slow reply sleeps first and returns all ticks at once."""
        reply = self.whole_slow_reply(reply)
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        finish = "stop"
        if reply.kind == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [self.tool_call(reply)]}
            finish = "tool_calls"
        payload = {
            "id": fb.new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        self.send_json(200, payload)

    @staticmethod
    def tool_call(reply: fb.Reply) -> dict[str, Any]:
        return {
            "id": fb.new_id("call_"),
            "type": "function",
            "function": {"name": reply.tool_name, "arguments": json.dumps(dict(reply.tool_input))},
        }

    def stream(self, reply: fb.Reply, model: str, include_usage: bool) -> None:
        chunk_id, created = fb.new_id("chatcmpl-"), int(time.time())

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> None:
            data = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
                **extra,
            }
            self.write_raw(f"data: {json.dumps(data)}\n\n".encode())

        def delta(d: dict[str, Any], finish: str | None = None) -> None:
            chunk([{"index": 0, "delta": d, "finish_reason": finish}])

        self.start_sse()
        finish = "stop"
        if reply.kind == "tool":
            call = self.tool_call(reply)
            args = call["function"]["arguments"]
            half = len(args) // 2
            first = {**call, "function": {"name": reply.tool_name, "arguments": args[:half]}}
            delta({"role": "assistant", "content": None, "tool_calls": [{"index": 0, **first}]})
            # The rest of the arguments in a second chunk: clients must concatenate.
            delta({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]})
            finish = "tool_calls"
        elif reply.kind == "slow":
            delta({"role": "assistant", "content": ""})
            for i in range(1, reply.seconds + 1):
                delta({"content": f"tick {i}\n"})
                if not self.sleep_tick(1.0):
                    return
        else:
            for n, piece in enumerate(fb.chunk_text(reply.text)):
                delta({"role": "assistant", "content": piece} if n == 0 else {"content": piece})
        delta({}, finish)
        if include_usage:
            chunk([], usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
        self.write_raw(b"data: [DONE]\n\n")

    # -- Responses API (codex) ------------------------------------------------------------------------

    def answer_responses(self, body: dict[str, Any], raw: str) -> None:
        tools = response_tool_names(body)
        reply = fb.decide(latest_input(body.get("input")), set(tools), DEFAULT_TEXT)
        self.log_request_entry(body, raw, reply.describe())
        model = str(body.get("model") or MODELS[0])
        if reply.kind == "status":
            headers = {"retry-after": "1"} if reply.retry_after else {}
            self.send_error_json(reply.status, f"fake status {reply.status}", headers)
            return
        if not body.get("stream"):
            reply = self.whole_slow_reply(reply)
            item = self.response_item(reply, tools)
            self.send_json(200, self.response_object(model, "completed", [item]))
            return
        self.start_sse()
        self.response_event("response.created", response=self.response_object(model, "in_progress", []))
        if reply.kind == "tool":
            item = self.response_item(reply, tools)
            self.response_event("response.output_item.added", output_index=0, item={**item, "arguments": ""})
            args = item["arguments"]
            for piece in (args[: len(args) // 2], args[len(args) // 2 :]):  # clients must join the deltas
                self.response_event(
                    "response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=piece
                )
            self.response_event("response.output_item.done", output_index=0, item=item)
            self.response_event("response.completed", response=self.response_object(model, "completed", [item]))
            return
        message_id = fb.new_id("msg_")
        empty = {"type": "message", "id": message_id, "role": "assistant", "status": "in_progress", "content": []}
        self.response_event("response.output_item.added", output_index=0, item=empty)
        pieces: list[str] = []
        if reply.kind == "slow":
            for i in range(1, reply.seconds + 1):
                pieces.append(f"tick {i}\n")
                self.text_delta(message_id, pieces[-1])
                if not self.sleep_tick(1.0):
                    return
        else:
            for piece in fb.chunk_text(reply.text):
                pieces.append(piece)
                self.text_delta(message_id, piece)
        item = self.response_item(fb.Reply("text", text="".join(pieces)), {}, message_id)
        self.response_event("response.output_item.done", output_index=0, item=item)
        self.response_event("response.completed", response=self.response_object(model, "completed", [item]))

    def text_delta(self, item_id: str, delta: str) -> None:
        self.response_event("response.output_text.delta", item_id=item_id, output_index=0, content_index=0, delta=delta)

    def response_event(self, name: str, **data: Any) -> None:
        self.write_raw(f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n".encode())

    @staticmethod
    def response_item(
        reply: fb.Reply, tools: dict[str, tuple[str | None, str]], item_id: str | None = None
    ) -> dict[str, Any]:
        if reply.kind == "tool":
            namespace, name = tools.get(reply.tool_name, (None, reply.tool_name))
            call = {
                "type": "function_call",
                "id": item_id or fb.new_id("fc_"),
                "call_id": fb.new_id("call_"),
                "name": name,
                "arguments": json.dumps(dict(reply.tool_input)),
                "status": "completed",
            }
            return call if namespace is None else {**call, "namespace": namespace}
        return {
            "type": "message",
            "id": item_id or fb.new_id("msg_"),
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }

    @staticmethod
    def response_object(model: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        response: dict[str, Any] = {
            "id": fb.new_id("resp_"),
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": status,
            "output": output,
        }
        if status == "completed":
            response["usage"] = {
                "input_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15,
            }
        return response


class FakeOpenAI(fb.FakeServer):
    """Fake OpenAI API (POST /v1/chat/completions and /v1/responses, SSE) for end-to-end tests."""

    name = "fake_openai"
    handler_class = OpenAIHandler

    @property
    def v1_url(self) -> str:
        """Base URL for OpenAI-compatible clients (``baseURL`` in opencode's provider options)."""
        return f"{self.url}/v1"


def start(port: int = 0, log_path: str | os.PathLike[str] | None = None) -> tuple[FakeOpenAI, int]:
    """Start in-process on 127.0.0.1 on a daemon thread; stop with ``server.stop()``."""
    return fb.start_server(FakeOpenAI, port, log_path)


if __name__ == "__main__":
    sys.exit(fb.serve_main(FakeOpenAI))
