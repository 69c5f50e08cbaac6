"""The ACP translator and the wire-order gate, fed the frames real agents sent (no process involved).

The golden tests replay the captures of `opencode acp` 1.18.33 and claude-agent-acp 0.23.1
(reference/captures); a few of their frames are also inlined here so the essentials are checked without them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp.schema import PermissionOption, SessionNotification, Usage

from hyperhive.runtime.acp import Translator, choose_option, mcp_tool_name, tool_name
from hyperhive.runtime.acp.gate import UpdateFeed, UpdateGate
from hyperhive.runtime.acp.translate import (
    BLOCK_MAX_CHARS,
    RESULT_CUT,
    RESULT_MAX_CHARS,
    UNFINISHED_TOOL_RESULT,
    usage_fields,
)
from hyperhive.runtime.acp.turn import StopControl
from hyperhive.runtime.stream import (
    AssistantLine,
    ContextUsage,
    StreamLine,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserLine,
)

CAPTURES = Path(__file__).parents[1] / "fixtures" / "captures"
SERVERS = ("fake", "fakehttp", "bash")


def translate(updates: list[dict[str, Any]], servers: tuple[str, ...] = SERVERS) -> tuple[Translator, list[Any]]:
    """Feed `session/update` params to a translator; returns it and a compact picture of its lines."""
    translator = Translator(session_id="s", mcp_servers=servers, model="agent")
    lines: list[StreamLine] = []
    for params in updates:
        lines += translator.feed(SessionNotification.model_validate(params).update)
    lines += translator.finish()
    assert all(isinstance(line, AssistantLine | UserLine) and line.session_id == "s" for line in lines)
    return translator, [picture(line) for line in lines]


def picture(line: StreamLine) -> Any:
    assert isinstance(line, AssistantLine | UserLine)
    assert isinstance(line.message.content, list)
    (block,) = line.message.content  # one block per line, as claude prints them
    if isinstance(block, TextBlock):
        return ("text", block.text)
    if isinstance(block, ThinkingBlock):
        return ("thinking", block.thinking)
    if isinstance(block, ToolUseBlock):
        return ("tool_use", block.id, block.name, block.input)
    assert isinstance(block, ToolResultBlock)
    return ("tool_result", block.tool_use_id, block.content, block.is_error)


def update(tag: str, /, **fields: Any) -> dict[str, Any]:
    return {"sessionId": "s", "update": {"sessionUpdate": tag, **fields}}


def chunk(text: str, tag: str = "agent_message_chunk", **fields: Any) -> dict[str, Any]:
    return update(tag, content={"type": "text", "text": text}, **fields)


# -- inlined real frames -----------------------------------------------------------------------------------

# opencode 1.18.33, an MCP tool on the stdio server "fake": input only with in_progress.
OPENCODE_MCP_TOOL = [
    update(
        "tool_call",
        toolCallId="call_143cec5ec22c40a09859",
        title="fake_echo",
        kind="other",
        status="pending",
        locations=[],
        rawInput={},
    ),
    update(
        "tool_call_update",
        toolCallId="call_143cec5ec22c40a09859",
        status="in_progress",
        kind="other",
        title="fake_echo",
        locations=[],
        rawInput={"text": "ping-stdio"},
    ),
    update(
        "tool_call_update",
        toolCallId="call_143cec5ec22c40a09859",
        status="completed",
        content=[{"type": "content", "content": {"type": "text", "text": "echo: ping-stdio"}}],
        rawOutput={"output": "echo: ping-stdio", "metadata": {"truncated": False}},
    ),
    chunk("tool ", messageId="msg_22ad28ad6001ypLvl3FBacZIyY"),
    chunk("result ", messageId="msg_22ad28ad6001ypLvl3FBacZIyY"),
    chunk("was: echo: ping-stdio", messageId="msg_22ad28ad6001ypLvl3FBacZIyY"),
    update("usage_update", used=10, size=100000, cost={"amount": 0, "currency": "USD"}),
]

# claude-agent-acp 0.23.1, the built-in Bash: title "Terminal", name in _meta, input in a status-less update.
CLAUDE_BASH = [
    update(
        "tool_call",
        _meta={"claudeCode": {"toolName": "Bash"}},
        toolCallId="toolu_e10bf7733fb045d58c982dfe",
        rawInput={},
        status="pending",
        title="Terminal",
        kind="execute",
        content=[],
    ),
    update(
        "tool_call_update",
        _meta={"claudeCode": {"toolName": "Bash"}},
        toolCallId="toolu_e10bf7733fb045d58c982dfe",
        rawInput={"command": "touch cc-acp-file && echo made", "description": "make file"},
        title="touch cc-acp-file && echo made",
        kind="execute",
        content=[{"type": "content", "content": {"type": "text", "text": "make file"}}],
    ),
    update(
        "tool_call_update",
        _meta={"claudeCode": {"toolResponse": {"stdout": "made", "stderr": ""}, "toolName": "Bash"}},
        toolCallId="toolu_e10bf7733fb045d58c982dfe",
    ),
    update(
        "tool_call_update",
        _meta={"claudeCode": {"toolName": "Bash"}},
        toolCallId="toolu_e10bf7733fb045d58c982dfe",
        status="completed",
        rawOutput="made",
        content=[{"type": "content", "content": {"type": "text", "text": "```console\nmade\n```"}}],
    ),
    chunk(""),  # claude-agent-acp opens every message with an empty chunk
    chunk("tool "),
    chunk("result was: made"),
    update("usage_update", used=11, size=200000, cost={"amount": 0.000735, "currency": "USD"}),
]


def test_opencode_mcp_tool_frames() -> None:
    translator, lines = translate(OPENCODE_MCP_TOOL)
    assert lines == [
        ("tool_use", "call_143cec5ec22c40a09859", "mcp__fake__echo", {"text": "ping-stdio"}),
        ("tool_result", "call_143cec5ec22c40a09859", "echo: ping-stdio", False),
        ("text", "tool result was: echo: ping-stdio"),
    ]
    assert translator.text == "tool result was: echo: ping-stdio"
    assert translator.context_usage == ContextUsage(used=10, size=100000)


def test_claude_bash_frames() -> None:
    translator, lines = translate(CLAUDE_BASH)
    assert lines == [
        (
            "tool_use",
            "toolu_e10bf7733fb045d58c982dfe",
            "Bash",
            {"command": "touch cc-acp-file && echo made", "description": "make file"},
        ),
        ("tool_result", "toolu_e10bf7733fb045d58c982dfe", "```console\nmade\n```", False),
        ("text", "tool result was: made"),
    ]
    assert translator.context_usage == ContextUsage(used=11, size=200000)


# -- golden: whole captured turns ------------------------------------------------------------------------------


def captured_turns(name: str) -> list[list[dict[str, Any]]]:
    """The session/update params of each prompt of a capture, between the prompt and its answer."""
    turns: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] | None = None
    prompt_id = None
    for raw in (CAPTURES / name).read_text(encoding="utf-8").splitlines():
        frame = json.loads(raw)
        msg = frame["msg"]
        if frame["dir"] == "send" and msg.get("method") == "session/prompt":
            current, prompt_id = [], msg["id"]
        elif current is not None and frame["dir"] == "recv":
            if msg.get("method") == "session/update":
                current.append(msg["params"])
            elif "method" not in msg and msg.get("id") == prompt_id:
                turns.append(current)
                current = None
    return turns


def test_golden_opencode_basic_session() -> None:
    say_hi, echo, add, bash = captured_turns("opencode-acp-frames-basic.jsonl")
    translator, lines = translate(say_hi)
    assert lines == [("text", "hi from fake openai")]
    assert translator.context_usage == ContextUsage(used=10, size=100000)
    _, lines = translate(echo)
    assert lines == [
        ("tool_use", "call_143cec5ec22c40a09859", "mcp__fake__echo", {"text": "ping-stdio"}),
        ("tool_result", "call_143cec5ec22c40a09859", "echo: ping-stdio", False),
        ("text", "tool result was: echo: ping-stdio"),
    ]
    _, lines = translate(add)
    assert lines == [
        ("tool_use", "call_30bd863bc6b8476f943d", "mcp__fakehttp__add", {"a": 2, "b": 3}),
        ("tool_result", "call_30bd863bc6b8476f943d", "5", False),
        ("text", "tool result was: 5"),
    ]
    _, lines = translate(bash)
    command = "echo hello-from-oc-bash > oc-bash.txt; cat oc-bash.txt"
    assert lines == [
        # The name is the first title; later titles are the command line. The input is the in_progress one.
        (
            "tool_use",
            "call_da2d5619eba14a059e28",
            "bash",
            {"command": command, "description": "write a file", "cwd": "/srv/agent"},
        ),
        ("tool_result", "call_da2d5619eba14a059e28", "hello-from-oc-bash\n", False),
        ("text", "tool result was: hello-from-oc-bash\n"),
    ]


def test_golden_opencode_permission_and_cancel_and_429() -> None:
    *_, bash = captured_turns("opencode-acp-frames-permission-ask.jsonl")
    _, lines = translate(bash)
    assert [line[0] for line in lines] == ["tool_use", "tool_result", "text"]
    assert lines[0][2] == "bash"
    cancelled, _ = captured_turns("opencode-acp-frames-cancel.jsonl")
    translator, lines = translate(cancelled)
    assert [line[0] for line in lines] == ["text"]
    assert translator.text.startswith("tick 0 ")
    (failed,) = captured_turns("opencode-acp-frames-429.jsonl")
    translator, lines = translate(failed)  # silence, then a JSON-RPC error: nothing to report but usage
    assert lines == []
    assert translator.context_usage is not None


def test_golden_claude_agent_acp_session() -> None:
    say_hi, echo, add, bash, cancelled = captured_turns("claude-agent-acp-frames.jsonl")
    translator, lines = translate(say_hi)
    assert lines == [("text", "hi from fake anthropic")]
    assert translator.context_usage == ContextUsage(used=11, size=200000)
    _, lines = translate(echo)
    assert lines == [
        ("tool_use", "toolu_ec24f5e2d393471284d283fd", "mcp__fake__echo", {"text": "ping-acp"}),
        ("tool_result", "toolu_ec24f5e2d393471284d283fd", '{"result":"echo: ping-acp"}', False),
        ("text", 'tool result was: {"result":"echo: ping-acp"}'),
    ]
    _, lines = translate(add)
    assert lines[0] == ("tool_use", "toolu_aa5b7714a01b4beda4e78b81", "mcp__fakehttp__add", {"a": 2, "b": 3})
    assert lines[1] == ("tool_result", "toolu_aa5b7714a01b4beda4e78b81", '{"result":5}', False)
    _, lines = translate(bash)
    assert [line[:3] for line in lines[:2]] == [
        ("tool_use", "toolu_e10bf7733fb045d58c982dfe", "Bash"),
        ("tool_result", "toolu_e10bf7733fb045d58c982dfe", "```console\nmade\n```"),
    ]
    _, lines = translate(cancelled)
    assert lines == [("text", "tick 0 tick 1 tick 2 tick 3 ")]


async def replay_through_gate(name: str) -> list[StreamLine]:
    """Every frame of a capture through an UpdateGate armed from the start; the lines its prompt got."""
    send, receive = anyio.create_memory_object_stream[StreamLine](math.inf)
    translator = Translator(session_id=_session_of(name), mcp_servers=SERVERS)
    gate = UpdateGate()
    gate.arm(UpdateFeed(translator.session_id, translator, send, StopControl()))  # armed before the load
    ours: dict[int, str] = {}
    for raw in (CAPTURES / name).read_text(encoding="utf-8").splitlines():
        frame = json.loads(raw)
        msg = frame["msg"]
        if frame["dir"] == "send":
            if "method" in msg and "id" in msg:
                ours[msg["id"]] = msg["method"]
            gate.outgoing(msg)
        else:
            answered = ours.pop(msg["id"], None) if "method" not in msg else None
            gate.incoming(msg, answered)
    send.close()
    async with receive:
        lines = [line async for line in receive]
    return lines + translator.finish()


def _session_of(name: str) -> str:
    for raw in (CAPTURES / name).read_text(encoding="utf-8").splitlines():
        msg = json.loads(raw)["msg"]
        if msg.get("method") == "session/prompt":
            return str(msg["params"]["sessionId"])
    raise AssertionError(name)


@pytest.mark.anyio
@pytest.mark.parametrize("capture", ["opencode-acp-frames-load.jsonl", "claude-agent-acp-frames-load.jsonl"])
async def test_golden_load_replay_never_reaches_the_turn(capture: str) -> None:
    lines = await replay_through_gate(capture)
    # Only the prompt's own answer: none of the replayed user/agent chunks and tool calls (17 and 19 of
    # them), nor opencode's available_commands_update sent after the load's answer.
    assert [picture(line) for line in lines] == [("text", "loaded ok")]


# -- the translator's rules --------------------------------------------------------------------------------------


def test_text_and_thinking_alternate_as_separate_blocks() -> None:
    _, lines = translate(
        [
            chunk("a", "agent_thought_chunk"),
            chunk("b", "agent_thought_chunk"),
            chunk("c"),
            chunk("d"),
            chunk("e", "agent_thought_chunk"),
            chunk("f"),
        ]
    )
    assert lines == [("thinking", "ab"), ("text", "cd"), ("thinking", "e"), ("text", "f")]


def test_usage_and_other_updates_do_not_split_a_text_block() -> None:
    translator, lines = translate(
        [
            chunk("one "),
            update("usage_update", used=1, size=2),
            update("plan", entries=[{"content": "x", "priority": "high", "status": "pending"}]),
            update("current_mode_update", currentModeId="code"),
            update("session_info_update", title="t"),
            update("user_message_chunk", content={"type": "text", "text": "echoed prompt"}),
            chunk("two"),
        ]
    )
    assert lines == [("text", "one two")]
    assert translator.context_usage == ContextUsage(used=1, size=2)


def test_a_flood_of_text_chunks_is_reported_in_bounded_blocks_as_it_comes() -> None:
    # A hostile agent's flood of chunks must not be held whole until the turn ends (tests/faults).
    translator = Translator(session_id="s", model="agent")
    piece = "0123456789" * 10
    total = 5 * BLOCK_MAX_CHARS // 2
    early: list[str] = []
    for _ in range(total // len(piece)):
        for line in translator.feed(SessionNotification.model_validate(chunk(piece)).update):
            early.append(picture(line)[1])
    late = [picture(line)[1] for line in translator.finish()]
    assert len(early) == 2 and len(late) == 1  # two full blocks while it flooded, the rest at the end
    assert all(len(text) < BLOCK_MAX_CHARS + len(piece) for text in early + late)
    assert "".join(early + late) == piece * (total // len(piece))  # nothing lost, no separator inserted
    # The result keeps the beginning, contiguous across the cut blocks, and says it was cut.
    assert translator.text == (piece * (total // len(piece)))[:RESULT_MAX_CHARS] + RESULT_CUT


def test_result_text_joins_separate_blocks_with_a_blank_line() -> None:
    translator, _ = translate([chunk("one"), chunk("hm", "agent_thought_chunk"), chunk("two")])
    assert translator.text == "one\n\ntwo"


def test_non_text_message_content_is_not_reported() -> None:
    _, lines = translate([update("agent_message_chunk", content={"type": "image", "data": "AA==", "mimeType": "x"})])
    assert lines == []


def test_tool_call_started_running_is_reported_at_once() -> None:
    _, lines = translate(
        [
            update(
                "tool_call", toolCallId="t", title="Run ls", kind="execute", status="in_progress", rawInput={"c": 1}
            ),
            update("tool_call_update", toolCallId="t", status="failed", rawOutput={"error": "nope"}),
        ]
    )
    assert lines == [("tool_use", "t", "Run ls", {"c": 1}), ("tool_result", "t", '{"error": "nope"}', True)]


def test_tool_call_without_input_is_reported_at_the_latest_when_it_completes() -> None:
    _, lines = translate(
        [
            update("tool_call", toolCallId="t", title="", kind="search", status="pending"),
            update("tool_call_update", toolCallId="t", status="completed", rawOutput="found"),
        ]
    )
    assert lines == [("tool_use", "t", "search", {}), ("tool_result", "t", "found", False)]


def test_unfinished_tool_calls_get_a_failed_result_at_the_end_of_the_turn() -> None:
    _, lines = translate(
        [
            update("tool_call", toolCallId="running", title="bash", status="in_progress", rawInput={"c": "x"}),
            update("tool_call", toolCallId="pending", title="fake_echo", status="pending", rawInput={}),
            chunk("interrupted"),
        ]
    )
    assert lines == [
        ("tool_use", "running", "bash", {"c": "x"}),
        ("text", "interrupted"),
        ("tool_result", "running", UNFINISHED_TOOL_RESULT, True),
        ("tool_use", "pending", "mcp__fake__echo", {}),
        ("tool_result", "pending", UNFINISHED_TOOL_RESULT, True),
    ]


def test_update_for_an_unknown_tool_call_is_named_from_itself() -> None:
    _, lines = translate([update("tool_call_update", toolCallId="x", title="fake_echo", status="completed")])
    assert lines == [("tool_use", "x", "mcp__fake__echo", {}), ("tool_result", "x", "", False)]


def test_updates_after_a_tool_result_are_ignored() -> None:
    _, lines = translate(
        [
            update("tool_call", toolCallId="t", title="bash", status="completed", rawInput={}, rawOutput="a"),
            update("tool_call_update", toolCallId="t", status="completed", rawOutput="b"),
        ]
    )
    assert lines == [("tool_use", "t", "bash", {}), ("tool_result", "t", "a", False)]


def test_tool_content_of_every_kind_becomes_text() -> None:
    _, lines = translate(
        [
            update(
                "tool_call",
                toolCallId="t",
                title="edit",
                status="completed",
                content=[
                    {"type": "content", "content": {"type": "text", "text": "done"}},
                    {"type": "diff", "path": "/a.py", "newText": "x"},
                    {"type": "terminal", "terminalId": "term1"},
                    {"type": "content", "content": {"type": "resource_link", "uri": "file:///b", "name": "b"}},
                ],
            )
        ]
    )
    assert lines[1] == ("tool_result", "t", "done\nedited /a.py\n[terminal term1]\nfile:///b", False)


# -- names, policy, usage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("mcp__fake__echo", "mcp__fake__echo"),
        ("fake_echo", "mcp__fake__echo"),
        ("fake_http_add", "mcp__fake_http__add"),  # the longest server name wins
        ("fake_http", "mcp__fake__http"),
        ("my_server_tool", "mcp__my.server__tool"),  # opencode's sanitized server name
        ("Tool: fake/echo", "mcp__fake__echo"),  # codex-acp
        ("echo (fake_http MCP Server)", "mcp__fake_http__echo"),  # gemini-cli
        ("Tool: other/echo", None),
        ("echo (other MCP Server)", None),
        ("bash", None),
        ("fake_", None),
        ("webfetch", None),
    ],
)
def test_mcp_tool_name(title: str, expected: str | None) -> None:
    assert mcp_tool_name(title, ["fake", "fake_http", "my.server", "bash", "web"]) == expected


def test_codex_style_wrapped_mcp_arguments_become_the_tool_input() -> None:
    raw = {"server": "fake", "tool": "echo", "arguments": {"text": "ping"}}
    _, lines = translate(
        [
            update("tool_call", toolCallId="c", title="Tool: fake/echo", status="in_progress", rawInput=raw),
            update("tool_call_update", toolCallId="c", status="completed", rawOutput={"isError": False}),
        ]
    )
    assert lines[0] == ("tool_use", "c", "mcp__fake__echo", {"text": "ping"})
    # A dict that only looks like the wrapper, for another tool, stays as it is.
    _, lines = translate([update("tool_call", toolCallId="d", title="run", status="in_progress", rawInput=raw)])
    assert lines[0] == ("tool_use", "d", "run", raw)


def test_tool_name_prefers_claudes_meta_then_mcp_then_title_then_kind() -> None:
    meta = {"claudeCode": {"toolName": "Bash"}}
    assert tool_name("Terminal", "execute", meta, ["bash"]) == "Bash"
    assert tool_name("bash_run", "other", None, ["bash"]) == "mcp__bash__run"
    assert tool_name("Run ls", "execute", None, ["bash"]) == "Run ls"
    assert tool_name("", "execute", None, []) == "execute"
    assert tool_name(None, None, {"claudeCode": "odd"}, []) == "tool"


def options(*kinds: str) -> list[PermissionOption]:
    return [PermissionOption(option_id=f"id-{k}", name=k, kind=k) for k in kinds]  # type: ignore[arg-type]


def test_allow_policy_picks_the_narrowest_grant() -> None:
    assert choose_option(options("allow_always", "allow_once", "reject_once"), "allow") == options("allow_once")[0]
    assert choose_option(options("reject_once", "allow_always"), "allow") == options("allow_always")[0]
    assert choose_option(options("reject_once"), "allow") is None


def test_deny_policy_picks_the_narrowest_refusal() -> None:
    assert choose_option(options("allow_once", "reject_always", "reject_once"), "deny") == options("reject_once")[0]
    assert choose_option(options("allow_once", "reject_always"), "deny") == options("reject_always")[0]
    assert choose_option(options("allow_once"), "deny") is None


def test_prompt_usage_in_claudes_key_names() -> None:
    assert usage_fields(None) == {}
    full = Usage(
        input_tokens=1, output_tokens=2, total_tokens=9, thought_tokens=3, cached_read_tokens=4, cached_write_tokens=5
    )
    assert usage_fields(full) == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 5,
        "thought_tokens": 3,
        "total_tokens": 9,
    }


def test_a_turns_cost_is_the_rise_of_the_sessions_count_and_a_fresh_count_is_all_the_turns() -> None:
    from hyperhive.runtime.acp.translate import turn_share

    # As claude-agent-acp counted five prompts of one session (tests/fixtures/captures).
    before, shares = 0.0, []
    for said in (0.000105, 0.000315, None, 0.000525, 0.0001):
        share, before = turn_share(before, said)
        shares.append(None if share is None else round(share, 9))
    assert shares == [0.000105, 0.00021, None, 0.00021, 0.0001]  # the last: a new process counting afresh
