"""Agents of one hive as real `hyperhive agent` services on this machine: a roster in a temporary directory
(every agent the current user's: the boundary between users is tested in tests/faults), each agent's own
state and working directory, and the demo agent (or any runtime's variables) as its agent."""

from __future__ import annotations

import getpass
import json
import sqlite3
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.process.harness_service import Service, service_env, start_service

DEMO_AGENT = {
    "HIVE_RUNTIME": "acp",
    "HIVE_ACP_COMMAND": sys.executable,
    "HIVE_ACP_ARGS": json.dumps(["-m", "hyperhive", "demo-agent"]),
}


def write_roster(tmp: Path, names: Iterable[str], *, user: str | None = None, **settings: Any) -> Path:
    """The roster of agents `names` (their state directories `tmp/<name>/state`); `settings` go in at the top
    (hopLimit, ratePerMinute) or, as `agents={name: {...}}`, into each agent's entry."""
    hive = tmp / "hive"
    hive.mkdir(mode=0o755, exist_ok=True)
    extra: Mapping[str, Mapping[str, Any]] = settings.pop("agents", {})
    agents = {
        name: {"user": user or getpass.getuser(), "stateDir": str(tmp / name / "state"), **extra.get(name, {})}
        for name in names
    }
    path = tmp / "hive.json"
    path.write_text(json.dumps({"version": 1, "dir": str(hive), "agents": agents, **settings}))
    return path


def agent_env(tmp: Path, name: str, roster: Path, **extra: str) -> dict[str, str]:
    """`name`'s service variables: its own directories under `tmp/<name>`, the roster, the demo agent unless
    `extra` names another runtime."""
    (tmp / name).mkdir(exist_ok=True)
    return service_env(tmp / name, HIVE_HIVE=str(roster), HIVE_AGENT_NAME=name, **{**DEMO_AGENT, **extra})


def start_agent(tmp: Path, name: str, roster: Path, *, log: str | None = None, **extra: str) -> Service:
    return start_service(agent_env(tmp, name, roster, **extra), tmp / (log or f"{name}.log"))


def hive_rows(service: Service, table: str) -> list[dict[str, Any]]:
    """The rows of one of the hive's tables in `service`'s store, oldest first: read only, with sqlite3 itself
    (the store's own opening refuses a directory of another user's, as a service run as one has)."""
    db = sqlite3.connect(f"file:{service.state / 'hyperhive.db'}?mode=ro", uri=True, timeout=10)
    try:
        cursor = db.execute(f"SELECT * FROM {table} ORDER BY rowid")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        db.close()


def replies(service: Service) -> list[str]:
    out = service.cli("outbox", "--json", "-n", "100").stdout
    return [row["body"] for line in out.splitlines() if line.strip() and (row := json.loads(line))["source"] == "agent"]


def stop_all(services: Iterable[Service]) -> None:
    """Stop each service still running (SIGTERM, then its wait): a test's `finally`."""
    for service in services:
        if service.proc.poll() is None:
            service.stop()


def settled(service: Service) -> bool:
    """Nothing of the hive in flight: every message sent read to its end, every receipt told, no wake owed."""
    sent = hive_rows(service, "hive_sent")
    received = hive_rows(service, "hive_received")
    waiting = [w for w in hive_rows(service, "wakes") if w["delivered_at"] is None and w["set_aside_at"] is None]
    return (
        all(r["state"] in ("answered", "failed", "refused") for r in sent)
        and all(r["receipt_at"] is not None for r in received)
        and not waiting
    )


def answered_turns(service: Service, wake_id: int) -> int:
    """How many answered turns of `service` carried wake `wake_id` (a message answered once: 1)."""
    return sum(
        1 for t in hive_rows(service, "turns") if t["outcome"] == "answered" and wake_id in json.loads(t["wake_ids"])
    )
