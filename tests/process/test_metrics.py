"""The metrics endpoint of a running service (docs/metrics.md): served when HIVE_METRICS_PORT is set, before
READY, showing the turns it ran; not served, no port opened, when it is not."""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.process.harness_service import Service, running_service

LISTEN = "0A"  # a TCP socket's state in /proc/net/tcp: listening


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the endpoint's answer by name (a counter's with its `_total`), as prometheus_client
    parses it."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = answer.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its sockets' inodes found in /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if (m := re.fullmatch(r"socket:\[(\d+)\]", target)) is not None:
            inodes.add(m.group(1))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def port_of(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def answered_turns(svc: Service, n: int) -> None:
    def done() -> bool:
        status = svc.status()
        last = status.get("last_turn") or {}
        return status["turns"] == n and last.get("outcome") == "answered" and status["state"] == "idle"

    svc.wait_for(f"{n} answered turns", done)


def test_after_turns_the_scrape_shows_them_by_outcome_with_their_durations_and_context(tmp_path: Path) -> None:
    with running_service(tmp_path, HIVE_METRICS_PORT="0") as svc:
        url = svc.status()["metrics"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        before = scrape(url)
        assert [v for _, v in before["hyperhive_turns_total"]] == [0] * 8
        svc.cli("send", "say:one usage:1200/200000")
        answered_turns(svc, 1)
        svc.cli("send", "say:two prompt-usage")
        answered_turns(svc, 2)
        assert (svc.status()["last_turn"]["input_tokens"], svc.status()["last_turn"]["output_tokens"]) == (10, 5)

        got = scrape(url)
        turns = {(labels["agent"], labels["outcome"]): v for labels, v in got["hyperhive_turns_total"]}
        assert turns[("main", "answered")] == 2 and sum(turns.values()) == 2
        (count,) = [v for labels, v in got["hyperhive_turn_duration_seconds_count"] if labels["agent"] == "main"]
        assert count == 2
        assert got["hyperhive_context_used_tokens"] == [({}, 1200)]
        assert got["hyperhive_context_size_tokens"] == [({}, 200_000)]
        assert [labels["state"] for labels, v in got["hyperhive_agent_state"] if v == 1] == ["idle"]
        assert [v for _, v in got["hyperhive_wakes_waiting"]] == [0, 0]
        assert got["hyperhive_permission_requests_pending"] == [({}, 0)]
        tokens = {(labels["agent"], labels["direction"]): v for labels, v in got["hyperhive_tokens_total"]}
        assert (tokens[("main", "input")], tokens[("main", "output")]) == (10, 5)  # the fake's prompt usage
        (info,) = got["hyperhive_build_info"]
        assert info[0]["runtime"] == "acp" and info[1] == 1
        # Anything but GET /metrics is refused from its head.
        try:
            urllib.request.urlopen(url.removesuffix("/metrics") + "/", timeout=10)
            raise AssertionError("/ was answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
        assert port_of(url) in listening_ports(svc.proc.pid)
        # `status` tells the cost in all (the fake agent tells none) and where the metrics are.
        status = svc.status()
        assert status["cost_usd"] is None and status["metrics"] == url
        assert "cost:     - (no turn told its cost)" in svc.cli("status").stdout.splitlines()


def test_off_by_default_the_service_opens_no_port_for_metrics(tmp_path: Path) -> None:
    with running_service(tmp_path) as svc:
        status = svc.status()
        assert status["metrics"] is None
        # The one TCP port it listens on is hyperhive's own tools' (no web view is configured either).
        assert listening_ports(svc.proc.pid) == {port_of(status["http"])}


def test_a_port_taken_by_another_program_fails_the_start_naming_the_step(tmp_path: Path) -> None:
    import socket

    from tests.process.harness_service import run_cli, service_env

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = service_env(tmp_path, HIVE_METRICS_PORT=str(port))
        result = run_cli(env, "agent", check=False)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1 port {port} for the metrics" in result.stderr
