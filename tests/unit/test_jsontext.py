"""jsontext.loads: one nesting limit whatever the caller's stack, and a ValueError past it; and every reader
of outside JSON keeps to it (the ACP transport's and the bash servers' own tests cover theirs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hyperhive import jsontext
from hyperhive.config import load_config
from hyperhive.control.wire import ControlError, parse_answer
from hyperhive.errors import ConfigError
from hyperhive.runtime.errors import ProtocolError
from hyperhive.runtime.stream import parse_line
from hyperhive.service.http_gate import not_json

LIMIT = jsontext.MAX_DEPTH


def lists(depth: int) -> str:
    return "[" * depth + "]" * depth


def objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


@pytest.mark.parametrize("nest", [lists, objects])
def test_the_limit_is_exact_for_lists_and_objects_as_text_and_bytes(nest: Any) -> None:
    for text in (nest(LIMIT), nest(LIMIT).encode()):
        assert depth_of(jsontext.loads(text)) == LIMIT
    for text in (nest(LIMIT + 1), nest(LIMIT + 1).encode()):
        with pytest.raises(jsontext.NestedTooDeeply, match=f"nested more than {LIMIT} levels deep"):
            jsontext.loads(text)


@pytest.mark.parametrize("depth", [LIMIT + 1, 900, 5_000, 200_000])
def test_past_the_recursion_limit_it_is_still_a_value_error_never_a_recursion_error(depth: int) -> None:
    with pytest.raises(ValueError, match="nested more than"):
        jsontext.loads(lists(depth))


def test_the_answer_does_not_depend_on_how_deep_the_callers_stack_is() -> None:
    """On CPython 3.11, `json.loads` alone parses `near` here and raises RecursionError 600 frames down."""
    near = lists(sys.getrecursionlimit() - 150)
    for text in (near, lists(LIMIT), lists(LIMIT + 1)):
        assert _at_stack_depth(0, lambda t=text: _outcome(jsontext.loads, t)) == _at_stack_depth(
            600, lambda t=text: _outcome(jsontext.loads, t)
        )


def _outcome(parse: Any, text: str) -> str:
    try:
        parse(text)
    except RecursionError:
        return "RecursionError"
    except ValueError:
        return "ValueError"
    return "parsed"


def _at_stack_depth(frames: int, call: Any) -> Any:
    return call() if frames == 0 else _at_stack_depth(frames - 1, call)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"code": "[" * 10_000 + "{" * 10_000, "list": [["x"]]})
    assert jsontext.loads(text)["list"] == [["x"]]


JSON = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=400,
)


@given(JSON, st.integers(0, 6))
def test_any_document_parses_exactly_when_it_is_within_the_limit(value: Any, limit: int) -> None:
    text = json.dumps(value)
    if depth_of(value) <= limit:
        assert jsontext.loads(text, max_depth=limit) == value
    else:
        with pytest.raises(jsontext.NestedTooDeeply):
            jsontext.loads(text, max_depth=limit)


def containers_in(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(containers_in, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(containers_in, value))
    return 0


@given(JSON, st.booleans())
def test_containers_are_counted_exactly_without_parsing_whatever_the_strings_hold(value: Any, ascii: bool) -> None:
    # Strings full of brackets, quotes and backslashes (escaped as JSON escapes them) count for nothing.
    assert jsontext.containers(json.dumps(value, ensure_ascii=ascii).encode()) == containers_in(value)


def test_half_a_megabyte_of_lists_or_of_escaped_brackets_in_a_string_is_counted_right() -> None:
    lists_body = b"[" + b",".join([b"[]"] * 174_000) + b"]"
    strings_body = json.dumps({"body": '\\"[{' * 100_000}).encode()
    assert jsontext.containers(lists_body) == 174_001
    assert jsontext.containers(strings_body) == 1


# -- the readers of outside JSON ----------------------------------------------------------------------------

DEEP = lists(100_000)


def test_a_claude_stream_line_nested_too_deeply_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="nested more than"):
        parse_line('{"type":"system","x":' + DEEP + "}")


@pytest.mark.parametrize("name", ["HIVE_ACP_ARGS", "HIVE_ACP_ENV"])
def test_a_setting_nested_too_deeply_is_a_named_config_problem(tmp_path: Path, name: str) -> None:
    env = {"HIVE_RUNTIME": "acp", "HIVE_ACP_COMMAND": "agent", "HIVE_WORKDIR": str(tmp_path), name: DEEP}
    with pytest.raises(ConfigError) as err:
        load_config(env)
    assert "nested more than" in err.value.problems[name]


def test_an_mcp_servers_file_nested_too_deeply_is_named(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers":' + DEEP + "}")
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_MCP_SERVERS": str(path), "HIVE_WORKDIR": str(tmp_path)})
    assert "nested more than" in err.value.problems["HIVE_MCP_SERVERS"]


LONG = "[" + "7" * 5000 + "]"  # past Python's 4300-digit int conversion limit: a bare ValueError in json.loads


def test_an_integer_too_long_to_convert_is_refused_with_a_reason() -> None:
    with pytest.raises(jsontext.Refused, match="a number longer than 4300 digits"):
        jsontext.loads(LONG)


@pytest.mark.parametrize("name", ["HIVE_ACP_ARGS", "HIVE_ACP_ENV"])
def test_a_setting_with_an_integer_too_long_is_a_named_config_problem(tmp_path: Path, name: str) -> None:
    env = {"HIVE_RUNTIME": "acp", "HIVE_ACP_COMMAND": "agent", "HIVE_WORKDIR": str(tmp_path), name: LONG}
    with pytest.raises(ConfigError) as err:
        load_config(env)
    assert "a number longer than 4300 digits" in err.value.problems[name]


def test_an_mcp_servers_file_with_an_integer_too_long_is_named(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers":' + LONG + "}")
    with pytest.raises(ConfigError) as err:
        load_config({"HIVE_MCP_SERVERS": str(path), "HIVE_WORKDIR": str(tmp_path)})
    assert "a number longer than 4300 digits" in err.value.problems["HIVE_MCP_SERVERS"]


def test_an_http_body_nested_too_deeply_is_refused_before_the_sdk_parses_it() -> None:
    assert not_json(b'{"jsonrpc":"2.0","params":' + lists(LIMIT).encode() + b"}") == "the body is nested too deeply"
    assert not_json(b'{"jsonrpc":"2.0","params":' + lists(LIMIT - 1).encode() + b"}") is None


def test_a_control_answer_nested_too_deeply_is_not_an_answer() -> None:
    with pytest.raises(ControlError, match="not an answer"):
        parse_answer(DEEP.encode(), "/run/hyperhive.sock")
