"""How a service's connection to the hive's broker is said (issue 26: "Broker unreachable: ... `status` says
so"): `hyperhive status`'s `broker:` line, `hyperhive hive`'s header for this host, hive/nats.py's words for
a failure to reach the broker."""

from __future__ import annotations

from typing import Any

from hyperhive.cli.hive import AgentLine, host_broker
from hyperhive.cli.status import _format_status
from hyperhive.hive.link import broker_text
from hyperhive.hive.nats import Link, server_url, why_not
from tests.unit.test_status_lines import answer

NOW = 10_000.0


def connected(since: float = NOW - 200) -> dict[str, Any]:
    return {"connected": True, "server": "nats://10.0.0.5:4222", "since": since, "error": None}


def unreachable(since: float = NOW - 40, error: str | None = "connection refused") -> dict[str, Any]:
    return {"connected": False, "server": None, "since": since, "error": error}


def test_connected_and_unreachable_are_said_with_how_long() -> None:
    assert broker_text(connected(), NOW) == "connected to nats://10.0.0.5:4222 for 3 min"
    assert broker_text(unreachable(), NOW) == (
        "unreachable for 40 s (connection refused); messages to other hosts wait queued"
    )
    assert broker_text(unreachable(error=None), NOW) == "unreachable for 40 s; messages to other hosts wait queued"
    assert broker_text(None, NOW) is None


def test_status_prints_a_broker_line_only_in_a_hive_of_several_hosts() -> None:
    hive = {"name": "alice", "may_write_to": ["bob@gpu"], "in_flight": [], "last_sent": None, "last_received": None}
    one_host = _format_status(answer(hive=hive | {"broker": None}))
    assert "broker:" not in one_host
    text = _format_status(answer(hive=hive | {"broker": unreachable(since=0.0)}))
    (line,) = [line for line in text.splitlines() if line.startswith("broker:")]
    assert line.startswith("broker:   unreachable for ") and "(connection refused)" in line, line
    assert text.splitlines().index(line) == 1 + next(
        i for i, ln in enumerate(text.splitlines()) if ln.startswith("hive:")
    )


def test_the_hive_header_says_the_hosts_connection() -> None:
    up = [AgentLine("alice", "idle", up=True, broker=connected()), AgentLine("carol", "stopped")]
    assert host_broker("build", up, NOW) == "host build: broker connected to nats://10.0.0.5:4222 for 3 min"
    down = [AgentLine("alice", "idle", up=True, broker=unreachable())]
    assert host_broker("build", down, NOW) == (
        "host build: broker unreachable for 40 s (connection refused); messages to other hosts wait queued"
    )
    both = [*up, AgentLine("dave", "idle", up=True, broker=unreachable())]
    said = host_broker("build", both, NOW)
    assert said is not None and said.endswith("(from dave; the others connected)"), said
    assert host_broker("build", [AgentLine("carol", "stopped")], NOW) is None


def test_a_failure_to_reach_the_broker_in_a_few_words() -> None:
    assert why_not(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert why_not(OSError("Multiple exceptions: [Errno 111] Connect call failed ('127.0.0.1', 4222)")) == (
        "connection refused"
    )
    assert why_not(TimeoutError()) == "timed out"
    assert why_not(RuntimeError("nats: authorization violation")) == "authorization violation"


def test_the_link_keeps_when_it_changed() -> None:
    link = Link()
    assert not link.connected and link.error is None
    link.down("connection refused")
    assert link.as_dict()["error"] == "connection refused"
    link.up("nats://127.0.0.1:4222")
    assert link.connected and link.error is None and link.server == "nats://127.0.0.1:4222"
    since = link.since
    link.down()
    assert not link.connected and link.since >= since and link.error is None
    link.down("connection refused")
    assert link.error == "connection refused"


def test_the_server_is_named_without_its_password() -> None:
    from urllib.parse import urlparse

    assert server_url(urlparse("nats://host-build:secret@10.0.0.5:4222")) == "nats://10.0.0.5:4222"
    assert server_url(urlparse("tls://[::1]:4222")) == "tls://[::1]:4222"
    assert server_url(None) is None
