"""Hostile clients of every server hyperhive runs: the bash MCP server on stdio (standalone and forwarding to
the service), the HTTP tools, and the control socket from another local user.

Everything is driven from outside, as a client or another user would: bytes on a pipe or a socket, and
what comes back. The random streams are seeded; the seed is printed and recorded in the row, and
HIVE_FAULTS_SEED=N replays one.
"""

from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.faults.conftest import Record, soak
from tests.faults.stdio_peer import (
    NULL,
    PARSE_ERROR,
    RESULT,
    HostileFrames,
    StdioPeer,
    key,
    outcome,
)
from tests.unit.bash_client import server_env
from tests.unit.harness_service import Service, running_service

SEED = int(os.environ.get("HIVE_FAULTS_SEED") or random.randrange(2**32))
MODES = ["standalone", "forwarding"]


@contextmanager
def bash_server_env(tmp_path: Path, mode: str) -> Iterator[tuple[dict[str, str], Path, Service | None]]:
    """The environment a bash server is started with, its state directory, and the service behind it."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    if mode == "standalone":
        state = tmp_path / "state"
        yield server_env(state, work), state, None
        return
    with running_service(tmp_path) as service:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HIVE_SOCKET": str(service.state / "harness.sock")}
        yield env, service.state, service


def task_rows(state: Path) -> list[tuple[int, str]]:
    db = sqlite3.connect(f"file:{state / 'hyperhive.db'}?mode=ro", uri=True)
    try:
        return [(int(r[0]), str(r[1])) for r in db.execute("SELECT id, cmd FROM tasks ORDER BY id")]
    finally:
        db.close()


def start_legit_task(peer: StdioPeer) -> int:
    """One real task the hostile stream's in-flight requests can wait on (they start nothing themselves)."""
    peer.request("init", "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}})
    peer.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    peer.request("legit", "tools/call", {"name": "run", "arguments": {"cmd": "sleep 60", "wait_seconds": 0}})
    answer = peer.answer("legit")
    assert outcome(answer) == RESULT, answer
    return int(answer["result"]["structuredContent"]["id"])


# -- the bash server on stdio ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_bash_server_answers_every_hostile_frame_with_the_right_code_and_starts_nothing(
    tmp_path: Path, mode: str, record: Record
) -> None:
    print(f"HIVE_FAULTS_SEED={SEED}")
    n = soak(400, 5000)
    with bash_server_env(tmp_path, mode) as (env, state, service):
        peer = StdioPeer(env, tmp_path / "bash-mcp.err")
        # Out of order: tools are called before initialize, which a lenient server answers anyway.
        peer.request("before-init", "tools/list")
        assert outcome(peer.answer("before-init")) == RESULT
        task_id = start_legit_task(peer)
        before = peer.count()
        frames = HostileFrames(SEED, task_id)
        started = time.monotonic()
        for frame in frames.frames(n):
            peer.send(frame)
        # One line of 20 MB (over the 16 MiB bound): one error, the rest of the line skipped.
        peer.send(b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"pad":"' + b"x" * (20 << 20) + b'"}}\n')
        frames.expect(None, -32600)
        peer.request("final", "ping")
        frames.expect("final", RESULT)
        want = sum(frames.expected.values())
        got = peer.wait_count(before + want, within=60) - before
        time.sleep(0.3)  # anything beyond what is owed would show up now
        elapsed = time.monotonic() - started
        answers = peer.answers[before:]
        alive = peer.proc.poll() is None
        service_up = service is None or (service.proc.poll() is None and bool(service.status()["service"]["pid"]))
        code = peer.close()
        tasks = task_rows(state)

    seen: Counter[tuple[Any, int]] = Counter((key(m.get("id")), outcome(m)) for m in answers)
    missing = frames.expected - seen
    extra = seen - frames.expected
    right = sum((frames.expected & seen).values())
    assert not peer.bad_lines, peer.bad_lines[:3]
    assert all(m.get("jsonrpc") == "2.0" for m in answers)
    assert not missing and not extra, f"seed {SEED}: missing {list(missing.items())[:5]}, extra {list(extra.items())[:5]}"
    assert alive and code == 0, peer.stderr_text()
    assert [cmd for _, cmd in tasks] == ["sleep 60"], tasks  # nothing but the test's own task
    assert not (tmp_path / "work" / "should-not-exist").exists()
    assert service_up
    parse_errors = seen[(NULL, PARSE_ERROR)]
    record(
        f"bash-mcp ({mode}) fed a seeded stream (seed {SEED}) of {n} hostile frames over stdio: garbage bytes, "
        "NaN, nesting to 200k, 20k-digit ids, raw and escaped lone surrogates, batches, unasked responses, "
        "unknown methods and tools, bad ids and params, duplicate ids and an id reused in flight, cancels of "
        "unknown ids, tool arguments that must start nothing, and one 20 MB line",
        "every frame gets exactly the answers JSON-RPC 2.0 owes it (code and id), none more; the server stays "
        "up and exits 0 at EOF; no task is started by any of it"
        + ("; the service behind it stays up" if service else ""),
        f"{right} of {want} answers right ({parse_errors} parse errors, {len(frames.kinds)} frame kinds) in "
        f"{elapsed:.1f} s; exit {code}; tasks started by the stream: {len(tasks) - 1}",
    )
    assert got == want


@pytest.mark.parametrize("mode", MODES)
def test_bash_server_with_a_client_that_never_reads_stays_bounded_and_answers_everything_later(
    tmp_path: Path, mode: str, record: Record
) -> None:
    n = soak(3000, 20000)
    with bash_server_env(tmp_path, mode) as (env, _state, service):
        peer = StdioPeer(env, tmp_path / "bash-mcp.err", read=False)
        frames = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/list"}).encode() + b"\n" for i in range(n)
        )
        # The writes block once the server stops reading (its answers have nowhere to go): write in a thread.
        writer = threading.Thread(target=lambda: _write_quietly(peer, frames), daemon=True)
        writer.start()
        time.sleep(2.0)
        rss = _rss_kib(peer.proc.pid)
        alive = peer.proc.poll() is None
        status_secs = None
        if service is not None:
            t0 = time.monotonic()
            service.status()  # the service is not held up by a stuck per-turn server
            status_secs = time.monotonic() - t0
        peer.start_reading()
        got = peer.wait_count(n, within=60)
        writer.join(10)
        code = peer.close()
    ids = sorted(int(m["id"]) for m in peer.answers)
    answer_mib = sum(len(json.dumps(m)) + 1 for m in peer.answers) / (1 << 20)
    assert alive, peer.stderr_text()
    assert ids == list(range(n)), f"{len(ids)} answers"
    assert code == 0
    assert rss < 200 * 1024, f"RSS {rss} KiB while nobody read"
    record(
        f"bash-mcp ({mode}): a client writes {n} requests ({len(frames) // 1024} KiB, owed {answer_mib:.0f} MiB "
        "of answers) and reads nothing for 2 s",
        "the server stays up with bounded memory"
        + (" and the service keeps answering" if service else "")
        + "; once the client reads, every request is answered once",
        f"RSS {rss // 1024} MiB while stuck"
        + (f"; service status in {status_secs:.2f} s" if status_secs is not None else "")
        + f"; {got} of {n} answered; exit {code}",
    )


def _write_quietly(peer: StdioPeer, data: bytes) -> None:
    try:
        peer.send(data)
    except (BrokenPipeError, ValueError, OSError):
        pass


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0
