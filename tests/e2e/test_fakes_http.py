"""The fakes' own contract over plain HTTP/stdio (no agents needed, so these never skip)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import agents
from tests.e2e.fakes import fake_gemini
from tests.e2e.fakes.fake_anthropic import FakeAnthropic
from tests.e2e.fakes.fake_openai import FakeOpenAI
from tests.e2e.fakes.fakebase import parse_tool_directive

TIMEOUT = 10


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], str]:
    """POST JSON (or GET when body is None); returns status, lower-cased headers and the full text."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read().decode()


def anthropic_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for frame in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def openai_chunks(text: str) -> list[Any]:
    frames = [frame.removeprefix("data: ") for frame in text.strip().split("\n\n")]
    assert frames[-1] == "[DONE]"
    return [json.loads(f) for f in frames[:-1]]


def messages_body(
    messages: list[dict[str, Any]], tools: list[str] | None = None, stream: bool = True
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-test", "max_tokens": 100, "stream": stream, "messages": messages}
    if tools is not None:
        body["tools"] = [{"name": n, "input_schema": {"type": "object"}} for n in tools]
    return body


def anthropic_text(events: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(d["delta"].get("text", "") for name, d in events if name == "content_block_delta")


# --- Anthropic ------------------------------------------------------------------------------------


def test_anthropic_default_stream_shape(fake_anthropic: FakeAnthropic) -> None:
    status, headers, text = call(
        f"{fake_anthropic.url}/v1/messages?beta=true", messages_body([{"role": "user", "content": "hello"}])
    )
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = anthropic_events(text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert anthropic_text(events) == "hi from fake anthropic"
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert fake_anthropic.requests()[0]["messages"][0]["content"] == "hello"


def test_anthropic_tool_only_when_offered(fake_anthropic: FakeAnthropic) -> None:
    prompt = [{"role": "user", "content": [{"type": "text", "text": 'go [[tool:echo {"text":"a]]b"}]]'}]}]
    _, _, text = call(f"{fake_anthropic.url}/v1/messages", messages_body(prompt, tools=["other"]))
    assert anthropic_text(anthropic_events(text)) == "hi from fake anthropic"

    _, _, text = call(f"{fake_anthropic.url}/v1/messages", messages_body(prompt, tools=["echo"]))
    events = anthropic_events(text)
    block = events[1][1]["content_block"]
    assert (block["type"], block["name"]) == ("tool_use", "echo")
    partial = "".join(d["delta"]["partial_json"] for name, d in events if name == "content_block_delta")
    assert json.loads(partial) == {"text": "a]]b"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_tool_result_wins_over_earlier_directive(fake_anthropic: FakeAnthropic) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": '[[tool:echo {"text":"x"}]] [[status:500]]'}]},
        {"role": "system", "content": "Available agent types..."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "ok"}]}],
        },
    ]
    status, _, text = call(f"{fake_anthropic.url}/v1/messages", messages_body(messages, tools=["echo"]))
    assert status == 200
    assert anthropic_text(anthropic_events(text)) == "tool result was: ok"


@pytest.mark.parametrize(
    ("directive", "status", "retry_after"),
    [("[[status:429]]", 429, "1"), ("[[status:429/none]]", 429, None), ("[[status:500]]", 500, None)],
)
def test_anthropic_status(fake_anthropic: FakeAnthropic, directive: str, status: int, retry_after: str | None) -> None:
    body = messages_body([{"role": "user", "content": directive}], tools=["Bash"])
    got, headers, text = call(f"{fake_anthropic.url}/v1/messages", body)
    assert got == status
    assert headers.get("retry-after") == retry_after
    assert json.loads(text)["type"] == "error"
    # Side requests without tools are never failed by a directive.
    got, _, _ = call(f"{fake_anthropic.url}/v1/messages", messages_body([{"role": "user", "content": directive}]))
    assert got == 200


def test_anthropic_non_stream_count_tokens_and_models(fake_anthropic: FakeAnthropic) -> None:
    body = messages_body([{"role": "user", "content": "[[say:exact words]]"}], stream=False)
    status, _, text = call(f"{fake_anthropic.url}/v1/messages", body)
    assert status == 200
    message = json.loads(text)
    assert message["content"] == [{"type": "text", "text": "exact words"}]
    assert message["stop_reason"] == "end_turn"

    status, _, text = call(f"{fake_anthropic.url}/v1/messages/count_tokens", {"model": "m", "messages": []})
    assert status == 200
    assert json.loads(text)["input_tokens"] > 0

    status, _, text = call(f"{fake_anthropic.url}/v1/models")
    assert status == 200
    assert json.loads(text)["data"]


def test_anthropic_slow_streams_ticks_and_survives_disconnect(fake_anthropic: FakeAnthropic) -> None:
    body = messages_body([{"role": "user", "content": "[[slow:1]]"}], tools=["Bash"])
    _, _, text = call(f"{fake_anthropic.url}/v1/messages", body)
    assert anthropic_text(anthropic_events(text)) == "tick 1\n"

    # Hang up mid-stream: the fake must stop quietly and keep serving.
    payload = json.dumps(messages_body([{"role": "user", "content": "[[slow:30]]"}], tools=["Bash"])).encode()
    with socket.create_connection(("127.0.0.1", fake_anthropic.port), timeout=TIMEOUT) as sock:
        head = f"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {len(payload)}\r\n\r\n"
        sock.sendall(head.encode() + payload)
        assert b"tick 1" in _recv_until(sock, b"tick 1")
    status, _, _ = call(f"{fake_anthropic.url}/v1/messages", messages_body([{"role": "user", "content": "hi"}]))
    assert status == 200


def _recv_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while marker not in data and time.monotonic() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


# --- OpenAI ---------------------------------------------------------------------------------------


def chat_body(messages: list[dict[str, Any]], tools: list[str] | None = None, stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "fake-model", "stream": stream, "messages": messages}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if tools is not None:
        body["tools"] = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in tools]
    return body


def openai_text(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def test_openai_default_stream_with_usage(fake_openai: FakeOpenAI) -> None:
    messages = [{"role": "system", "content": "be nice"}, {"role": "user", "content": "hello"}]
    status, _, text = call(f"{fake_openai.v1_url}/chat/completions", chat_body(messages, tools=["bash"]))
    assert status == 200
    chunks = openai_chunks(text)
    assert openai_text(chunks) == "hi from fake openai"
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 15


def test_openai_tool_call_and_result(fake_openai: FakeOpenAI) -> None:
    # opencode names MCP tools <server>_<tool>; `opencode run` argv quoting escapes the JSON's quotes.
    prompt = '"run [[tool:bash_run {\\"cmd\\":\\"ls\\"}]]"'
    body = chat_body([{"role": "user", "content": [{"type": "text", "text": prompt}]}], tools=["bash", "bash_run"])
    _, _, text = call(f"{fake_openai.v1_url}/chat/completions", body)
    chunks = openai_chunks(text)
    calls = [tc for c in chunks if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "bash_run"
    assert json.loads("".join(tc["function"]["arguments"] for tc in calls)) == {"cmd": "ls"}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"

    messages: list[dict[str, Any]] = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "file.txt"},
    ]
    _, _, text = call(f"{fake_openai.v1_url}/chat/completions", chat_body(messages, tools=["bash_run"]))
    assert openai_text(openai_chunks(text)) == "tool result was: file.txt"


def test_openai_title_request_ignores_directives(fake_openai: FakeOpenAI) -> None:
    messages = [
        {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
        {"role": "user", "content": "[[slow:30]] [[status:429]] [[tool:bash {}]]"},
    ]
    started = time.monotonic()
    status, _, text = call(f"{fake_openai.v1_url}/chat/completions", chat_body(messages, tools=[]))
    assert status == 200
    assert openai_text(openai_chunks(text)) == "Fake session title"
    assert time.monotonic() - started < 2


def test_openai_status_non_stream_and_models(fake_openai: FakeOpenAI) -> None:
    body = chat_body([{"role": "user", "content": "[[status:429]]"}], tools=["bash"])
    status, headers, text = call(f"{fake_openai.v1_url}/chat/completions", body)
    assert (status, headers.get("retry-after")) == (429, "1")
    assert json.loads(text)["error"]["message"] == "fake status 429"

    body = chat_body([{"role": "user", "content": "[[say:plain]]"}], stream=False)
    status, _, text = call(f"{fake_openai.v1_url}/chat/completions", body)
    assert json.loads(text)["choices"][0]["message"]["content"] == "plain"

    status, _, text = call(f"{fake_openai.v1_url}/models")
    assert [m["id"] for m in json.loads(text)["data"]] == ["fake-model"]


# --- OpenAI Responses (codex) --------------------------------------------------------------------------


def responses_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    return anthropic_events(text)  # the same `event: X` / `data: {json}` framing


def responses_body(items: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"model": "gpt-5.4", "stream": True, "input": items, "tools": tools or []}


def user_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_responses_text_stream_skips_developer_messages(fake_openai: FakeOpenAI) -> None:
    developer = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "[[say:no]]"}]}
    status, _, text = call(
        f"{fake_openai.v1_url}/responses", responses_body([user_item("[[say:two words]]"), developer])
    )
    assert status == 200
    events = responses_events(text)
    names = [name for name, _ in events]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    assert all(data["type"] == name for name, data in events)
    deltas = "".join(d["delta"] for name, d in events if name == "response.output_text.delta")
    assert deltas == "two words"
    done = next(d["item"] for name, d in events if name == "response.output_item.done")
    assert done["content"][0]["text"] == "two words"
    assert events[-1][1]["response"]["usage"]["total_tokens"] == 15


def test_responses_namespaced_mcp_tool_call_and_its_output(fake_openai: FakeOpenAI) -> None:
    tools = [
        {"type": "function", "name": "exec_command"},
        {"type": "namespace", "name": "mcp__bash", "tools": [{"type": "function", "name": "run"}]},
    ]
    prompt = user_item('go [[tool:mcp__bash__run {"cmd":"ls"}]]')
    _, _, text = call(f"{fake_openai.v1_url}/responses", responses_body([prompt], tools))
    events = responses_events(text)
    item = next(d["item"] for name, d in events if name == "response.output_item.done")
    assert (item["type"], item["namespace"], item["name"]) == ("function_call", "mcp__bash", "run")
    assert json.loads(item["arguments"]) == {"cmd": "ls"}
    joined = "".join(d["delta"] for name, d in events if name == "response.function_call_arguments.delta")
    assert json.loads(joined) == {"cmd": "ls"}

    output = {"type": "function_call_output", "call_id": item["call_id"], "output": "file.txt"}
    _, _, text = call(f"{fake_openai.v1_url}/responses", responses_body([prompt, item, output], tools))
    deltas = "".join(d["delta"] for name, d in responses_events(text) if name == "response.output_text.delta")
    assert deltas == "tool result was: file.txt"


def test_responses_status_and_non_stream(fake_openai: FakeOpenAI) -> None:
    tools = [{"type": "function", "name": "exec_command"}]
    status, headers, text = call(
        f"{fake_openai.v1_url}/responses", responses_body([user_item("[[status:429]]")], tools)
    )
    assert (status, headers.get("retry-after")) == (429, "1")
    assert json.loads(text)["error"]["message"] == "fake status 429"
    body = {**responses_body([user_item("[[say:whole]]")]), "stream": False}
    status, _, text = call(f"{fake_openai.v1_url}/responses", body)
    assert json.loads(text)["output"][0]["content"][0]["text"] == "whole"


# --- Gemini -----------------------------------------------------------------------------------------------


@pytest.fixture
def gemini(tmp_path: Path) -> Any:
    server, _ = fake_gemini.start(port=0, log_path=tmp_path / "fake_gemini.jsonl")
    try:
        yield server
    finally:
        server.stop()


def gemini_body(contents: list[dict[str, Any]], tools: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"contents": contents, "generationConfig": {"temperature": 1}}
    if tools is not None:
        body["tools"] = [{"functionDeclarations": [{"name": n, "parametersJsonSchema": {}} for n in tools]}]
    return body


def gemini_chunks(text: str) -> list[dict[str, Any]]:
    return [json.loads(frame.removeprefix("data: ")) for frame in text.strip().split("\r\n\r\n")]


def gemini_parts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [part for c in chunks for part in c["candidates"][0]["content"]["parts"]]


def test_gemini_stream_text_and_finish(gemini: Any) -> None:
    url = f"{gemini.url}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    status, headers, text = call(url, gemini_body([{"role": "user", "parts": [{"text": "[[say:a b c]]"}]}], ["x"]))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    chunks = gemini_chunks(text)
    assert "".join(p["text"] for p in gemini_parts(chunks)) == "a b c"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert chunks[-1]["usageMetadata"]["totalTokenCount"] == 15


def test_gemini_function_call_then_function_response(gemini: Any) -> None:
    url = f"{gemini.url}/v1beta/models/m:streamGenerateContent?alt=sse"
    prompt = {"role": "user", "parts": [{"text": '[[tool:mcp_bash_run {"cmd":"ls"}]]'}]}
    _, _, text = call(url, gemini_body([prompt], ["run_shell_command", "mcp_bash_run"]))
    (part,) = gemini_parts(gemini_chunks(text))
    assert part["functionCall"] == {"name": "mcp_bash_run", "args": {"cmd": "ls"}}

    contents = [
        prompt,
        {"role": "model", "parts": [part]},
        {"role": "user", "parts": [{"functionResponse": {"name": "mcp_bash_run", "response": {"output": "ok"}}}]},
    ]
    _, _, text = call(url, gemini_body(contents, ["mcp_bash_run"]))
    assert "".join(p["text"] for p in gemini_parts(gemini_chunks(text))) == 'tool result was: {"output": "ok"}'


def test_gemini_json_schema_question_gets_valid_json_whatever_the_prompt(gemini: Any) -> None:
    schema = {
        "type": "OBJECT",
        "properties": {
            "reasoning": {"type": "STRING"},
            "model_choice": {"type": "STRING", "enum": ["flash", "pro"]},
            "score": {"type": "INTEGER"},
        },
        "required": ["reasoning", "model_choice"],
    }
    body = {
        "contents": [{"role": "user", "parts": [{"text": "[[status:429]] [[slow:30]]"}]}],
        "generationConfig": {"responseMimeType": "application/json", "responseJsonSchema": schema},
    }
    status, _, text = call(f"{gemini.url}/v1beta/models/gemini-2.5-flash-lite:generateContent", body)
    assert status == 200
    answer = json.loads(json.loads(text)["candidates"][0]["content"]["parts"][0]["text"])
    assert answer == {"reasoning": "fake", "model_choice": "flash"}


def test_gemini_status_count_tokens_and_models(gemini: Any) -> None:
    url = f"{gemini.url}/v1beta/models/m:generateContent"
    status, headers, text = call(url, gemini_body([{"role": "user", "parts": [{"text": "[[status:429]]"}]}], ["x"]))
    assert (status, headers.get("retry-after")) == (429, "1")
    assert json.loads(text)["error"]["status"] == "RESOURCE_EXHAUSTED"
    status, _, text = call(f"{gemini.url}/v1beta/models/m:countTokens", {"contents": []})
    assert status == 200 and json.loads(text)["totalTokens"] > 0
    status, _, text = call(f"{gemini.url}/v1beta/models")
    assert status == 200 and json.loads(text)["models"]


# --- Shared parsing, script mode, MCP server ------------------------------------------------------


def test_parse_tool_directive() -> None:
    assert parse_tool_directive("[[tool:a]]", {"a"}) == ("a", {})
    assert parse_tool_directive('[[tool:a {"x": [1]} ]]', {"a"}) == ("a", {"x": [1]})
    assert parse_tool_directive('[[tool:a {"x": 1}]] [[tool:b {"y": 2}]]', {"b"}) == ("b", {"y": 2})
    assert parse_tool_directive("[[tool:a {broken]]", {"a"}) is None
    assert parse_tool_directive("[[tool:a [1]]]", {"a"}) is None


@pytest.mark.parametrize("script", ["fake_anthropic.py", "fake_openai.py", "fake_gemini.py"])
def test_script_mode_port_file_and_log(tmp_path: Path, script: str) -> None:
    port_file, log = tmp_path / "port", tmp_path / "log.jsonl"
    args = [sys.executable, str(agents.FAKES_DIR / script), "--port", "0", "--port-file", str(port_file)]
    proc = subprocess.Popen([*args, "--log", str(log)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not port_file.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        port = int(port_file.read_text())
        path = {
            "fake_anthropic.py": "/v1/messages",
            "fake_openai.py": "/v1/chat/completions",
            "fake_gemini.py": "/v1beta/models/m:generateContent",
        }[script]
        body: dict[str, Any] = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
        if script == "fake_gemini.py":
            body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        status, _, _ = call(f"http://127.0.0.1:{port}{path}", body)
        assert status == 200
        entry = json.loads(log.read_text().splitlines()[0])
        assert (entry["method"], entry["path"], entry["body"]) == ("POST", path, body)
    finally:
        proc.terminate()
        proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0


def test_mcp_echo_server_stdio() -> None:
    requests = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 3}}},
        {"jsonrpc": "2.0", "id": 4, "method": "nope"},
    ]
    proc = subprocess.run(
        [sys.executable, str(agents.MCP_ECHO_SERVER)],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    replies = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert replies[0]["result"]["protocolVersion"] == "2025-06-18"
    assert [t["name"] for t in replies[1]["result"]["tools"]] == ["echo", "add"]
    assert replies[2]["result"]["content"] == [{"type": "text", "text": "echo: hi"}]
    assert replies[3]["result"]["content"][0]["text"] == "5"
    assert replies[4]["error"]["code"] == -32601
