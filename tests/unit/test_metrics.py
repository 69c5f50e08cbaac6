"""The metrics endpoint's figures and text (docs/metrics.md): a store filled through its own tables, read in one
snapshot, written in the exposition format and parsed back with prometheus_client's parser; the endpoint's
admission from the head and its one read shared by scrapes that wait together."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hyperhive.config import load_config
from hyperhive.errors import ConfigError
from hyperhive.service.http_limits import Refusal
from hyperhive.service.metrics.endpoint import METRICS_LIMITS, MetricsEndpoint, admit
from hyperhive.service.metrics.exposition import Family, histogram, render
from hyperhive.service.metrics.families import LOOP_STATES, Live, families
from hyperhive.store.database import Store
from hyperhive.store.hive import HiveTable
from hyperhive.store.metrics import DURATION_BUCKETS, Figures
from hyperhive.store.subagents import SubagentTable
from hyperhive.store.tasks import TaskTable
from hyperhive.store.turns import TurnEnd, TurnTable
from hyperhive.store.wakes import WakeTable

LIVE = Live(version="9.9.9", runtime="acp", started_at=1_700_000_000.5, state="idle")


def turn(table: TurnTable, outcome: str = "answered", *, ms: int | None = 1000, usd: float | None = None) -> int:
    turn_id = table.begin([], 10)
    end = TurnEnd(outcome=outcome, duration_ms=ms, cost_usd=usd, context_used=1200, context_size=200_000)  # type: ignore[arg-type]
    table.end(turn_id, end, deliver=[])
    return turn_id


def parsed(store: Store) -> dict[str, tuple[str, list[Sample]]]:
    text = render(families(Figures.read(store), LIVE)).decode()
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def value(samples: list[Sample], name: str, **labels: str) -> float:
    (found,) = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return float(found)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "hyperhive.db")


def test_the_exposition_parses_with_prometheus_clients_parser_with_conventional_names_and_types(store: Store) -> None:
    main = TurnTable(store)
    for outcome, ms, usd in [("answered", 2000, 0.25), ("answered", 40_000, 0.5), ("failed", 500, None)]:
        turn(main, outcome, ms=ms, usd=usd)
    sub = SubagentTable(store).create(
        parent=0, depth=1, profile="default", task="t", workdir="/w", worktree=False, first_prompt="go"
    )
    turn(main.for_agent(sub.id), "answered", ms=3000, usd=0.125)
    WakeTable(store).insert("operator", "hello")
    WakeTable(store).insert("timer", "later", not_before=time.time() + 3600)
    HiveTable(store).queue("alice", "bob", "hi", conversation=None, hop=0)

    got = parsed(store)
    assert all(name.startswith("hyperhive_") for name in got)
    types = {name: kind for name, (kind, _) in got.items()}
    # The parser names a counter's family without its `_total`; every one of its samples has it.
    assert types["hyperhive_turns"] == "counter"
    assert types["hyperhive_cost_usd"] == "counter"
    assert types["hyperhive_turn_duration_seconds"] == "histogram"
    assert types["hyperhive_wakes_waiting"] == types["hyperhive_subagents"] == "gauge"
    assert types["hyperhive_context_used_tokens"] == types["hyperhive_permission_requests_pending"] == "gauge"
    for name, (kind, samples) in got.items():
        if kind == "counter":
            assert all(s.name == name + "_total" for s in samples), name

    turns = got["hyperhive_turns"][1]
    assert value(turns, "hyperhive_turns_total", agent="main", outcome="answered") == 2
    assert value(turns, "hyperhive_turns_total", agent="main", outcome="failed") == 1
    assert value(turns, "hyperhive_turns_total", agent="main", outcome="cancelled") == 0  # every outcome, from 0
    assert value(turns, "hyperhive_turns_total", agent="subagent", outcome="answered") == 1
    cost = got["hyperhive_cost_usd"][1]
    assert value(cost, "hyperhive_cost_usd_total", agent="main") == 0.75
    assert value(cost, "hyperhive_cost_usd_total", agent="subagent") == 0.125
    assert value(got["hyperhive_context_used_tokens"][1], "hyperhive_context_used_tokens") == 1200
    assert value(got["hyperhive_context_size_tokens"][1], "hyperhive_context_size_tokens") == 200_000
    assert value(got["hyperhive_wakes_waiting"][1], "hyperhive_wakes_waiting", agent="main") == 1
    assert value(got["hyperhive_wakes_scheduled"][1], "hyperhive_wakes_scheduled", agent="main") == 1
    assert value(got["hyperhive_subagents"][1], "hyperhive_subagents", state="working") == 1
    assert value(got["hyperhive_subagents"][1], "hyperhive_subagents", state="cancelled") == 0
    messages = got["hyperhive_hive_messages"][1]
    assert value(messages, "hyperhive_hive_messages", direction="sent", state="queued") == 1
    assert value(got["hyperhive_hive_messages_sent"][1], "hyperhive_hive_messages_sent_total") == 1
    info = got["hyperhive_build_info"][1]
    assert value(info, "hyperhive_build_info", version="9.9.9", runtime="acp") == 1
    assert value(got["hyperhive_start_time_seconds"][1], "hyperhive_start_time_seconds") == 1_700_000_000.5
    # No label names an id: a sub-agent's, a turn's, a message's.
    names = {k for _, samples in got.values() for s in samples for k in s.labels}
    assert names <= {"agent", "outcome", "state", "direction", "status", "version", "runtime", "le"}


def test_the_duration_histogram_is_cumulative_in_seconds_and_its_inf_bucket_is_its_count(store: Store) -> None:
    main = TurnTable(store)
    for ms in (200, 1000, 4000, 70_000, 7_200_000):
        turn(main, ms=ms)
    turn(main, "interrupted", ms=None)  # no duration told: counted as a turn, not in the histogram

    samples = parsed(store)["hyperhive_turn_duration_seconds"][1]
    buckets = [(s.labels["le"], s.value) for s in samples if s.name.endswith("_bucket") and s.labels["agent"] == "main"]
    assert [le for le, _ in buckets][-1] == "+Inf"
    assert [float(le) for le, _ in buckets[:-1]] == [float(b) for b in DURATION_BUCKETS]
    counts = [n for _, n in buckets]
    assert counts == sorted(counts)  # cumulative
    assert dict(buckets)["1.0" if "1.0" in dict(buckets) else "1"] == 2  # 0.2 s and 1 s: `le` is inclusive
    count = value(samples, "hyperhive_turn_duration_seconds_count", agent="main")
    assert counts[-1] == count == 5
    assert value(samples, "hyperhive_turn_duration_seconds_sum", agent="main") == pytest.approx(7_275.2)


def test_a_turn_in_flight_is_counted_by_outcome_only_once_it_ended(store: Store) -> None:
    main = TurnTable(store)
    main.begin([], 10)
    got = parsed(store)
    assert value(got["hyperhive_turns_running"][1], "hyperhive_turns_running", agent="main") == 1
    assert sum(s.value for s in got["hyperhive_turns"][1]) == 0
    main.interrupt_running()  # what the next start does with a turn its predecessor left running
    got = parsed(store)
    assert value(got["hyperhive_turns"][1], "hyperhive_turns_total", agent="main", outcome="interrupted") == 1
    assert value(got["hyperhive_turns_running"][1], "hyperhive_turns_running", agent="main") == 0


def test_counters_read_again_after_a_reopen_are_the_same(tmp_path: Path) -> None:
    path = tmp_path / "hyperhive.db"
    with Store(path) as first:
        for _ in range(3):
            turn(TurnTable(first), usd=0.5)
        before = Figures.read(first)
    with Store(path) as again:
        after = Figures.read(again)
    assert after.turns == before.turns == {("main", "answered"): 3}
    assert after.cost_usd == before.cost_usd == {"main": 1.5}


def test_tasks_are_running_until_they_end_then_counted_by_status(store: Store) -> None:
    tasks = TaskTable(store)
    task = tasks.create("sleep 1", "/", None, 1, "1")
    got = parsed(store)
    assert value(got["hyperhive_tasks_running"][1], "hyperhive_tasks_running") == 1
    tasks.write_end(task.id, "done", exit_code=0)
    got = parsed(store)
    assert value(got["hyperhive_tasks_running"][1], "hyperhive_tasks_running") == 0
    assert value(got["hyperhive_tasks_ended"][1], "hyperhive_tasks_ended_total", status="done") == 1


def test_the_loop_state_is_a_label_of_a_few_kinds_never_its_numbers_or_an_errors_text(store: Store) -> None:
    for words, kind in [
        ("idle", "idle"),
        ("turn 17", "working"),
        ("backing off 30 s after 2 failed turn(s)", "backing_off"),
        ("store unavailable: disk I/O error at /secret/path; retrying in 5 s", "store_unavailable"),
        ("something new", "other"),
    ]:
        text = render(families(Figures.read(store), dataclasses.replace(LIVE, state=words))).decode()
        (family,) = [f for f in text_string_to_metric_families(text) if f.name == "hyperhive_agent_state"]
        assert {s.labels["state"]: s.value for s in family.samples if s.value} == {kind: 1}
        assert len(family.samples) == len(LOOP_STATES)


def test_permission_requests_pending_counts_the_requests_waiting_for_the_operator(store: Store) -> None:
    from hyperhive.store.permissions import PermissionTable

    def pending() -> float:
        got = parsed(store)
        return value(got["hyperhive_permission_requests_pending"][1], "hyperhive_permission_requests_pending")

    assert pending() == 0
    requests = PermissionTable(store)
    first, _ = requests.open(0, 1, "bash", "ls", "{}", 600)
    requests.open(2, 3, "Write", "write", '{"path": "a"}', 600)
    assert pending() == 2
    requests.answer(first.id, allow=True, by="cli")
    assert pending() == 1


def test_label_values_and_help_are_escaped_so_they_parse_back_whole() -> None:
    odd = 'a "quoted"\\ value\nwith a line'
    family = Family("hyperhive_test", "gauge", "help with \\ and\na line")
    family.add(1.5, state=odd)
    (parsed_family,) = text_string_to_metric_families(render([family]).decode())
    assert parsed_family.documentation == "help with \\ and\na line"
    assert parsed_family.samples[0].labels == {"state": odd}
    assert parsed_family.samples[0].value == 1.5


def test_a_histogram_of_no_observation_writes_zero_buckets() -> None:
    family = histogram("hyperhive_h_seconds", "h", (1, 2), [((("agent", "main"),), (0, 0), 0, 0.0)])
    (parsed_family,) = text_string_to_metric_families(render([family]).decode())
    assert [s.value for s in parsed_family.samples] == [0, 0, 0, 0, 0]


def test_only_get_of_metrics_is_admitted_from_the_head() -> None:
    assert admit({"path": "/metrics", "method": "GET"}) is None
    wrong_path = admit({"path": "/", "method": "GET"})
    wrong_method = admit({"path": "/metrics", "method": "POST"})
    assert isinstance(wrong_path, Refusal) and wrong_path.status == 404
    assert isinstance(wrong_method, Refusal) and wrong_method.status == 405


def http_get(port: int, path: str = "/metrics") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


@pytest.mark.anyio
async def test_scrapes_waiting_together_share_one_read_of_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "hyperhive.db")
    turn(TurnTable(store))
    reads = 0
    release = anyio.Event()

    async def read() -> Figures:
        nonlocal reads
        reads += 1
        await release.wait()
        return Figures.read(store)

    endpoint = MetricsEndpoint("127.0.0.1", 0, read, lambda: LIVE)
    answers: list[bytes] = []

    async def scrape() -> None:
        answers.append(await endpoint.scrape())

    async with anyio.create_task_group() as tg:
        tg.start_soon(scrape)
        await anyio.wait_all_tasks_blocked()  # the first read has begun and waits
        for _ in range(5):
            tg.start_soon(scrape)
        await anyio.wait_all_tasks_blocked()
        release.set()
    # The first read, then one more for those that came while it ran: they share it.
    assert reads == 2
    assert len(answers) == 6 and len(set(answers)) == 1


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[anyio.abc.TaskGroup, int]]:
    """The endpoint over a store of one ended turn, served on a free loopback port until the caller cancels
    the task group it is given."""
    store = Store(tmp_path / "hyperhive.db")
    turn(TurnTable(store))

    async def read() -> Figures:
        return Figures.read(store)

    endpoint = MetricsEndpoint("127.0.0.1", 0, read, lambda: LIVE)
    async with anyio.create_task_group() as tg:
        url = await tg.start(endpoint.serve)
        yield tg, int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.anyio
async def test_the_endpoint_answers_the_text_format_and_refuses_other_paths(tmp_path: Path) -> None:
    async with serving(tmp_path) as (tg, port):
        ok = await anyio.to_thread.run_sync(http_get, port)
        missing = await anyio.to_thread.run_sync(http_get, port, "/")
        tg.cancel_scope.cancel()
    head, _, body = ok.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"content-type: text/plain; version=0.0.4; charset=utf-8" in head.lower()
    assert b'hyperhive_turns_total{agent="main",outcome="answered"} 1\n' in body
    assert missing.startswith(b"HTTP/1.1 404")


@pytest.mark.anyio
async def test_scrapers_that_never_finish_their_head_cannot_keep_a_scrape_out(tmp_path: Path) -> None:
    """More half-sent heads than the endpoint keeps (METRICS_LIMITS.max_unadmitted): the oldest are closed, and
    a whole request is still answered."""
    async with serving(tmp_path) as (tg, port):
        stalled = []
        for _ in range(3 * METRICS_LIMITS.max_unadmitted):
            conn = await anyio.connect_tcp("127.0.0.1", port)
            await conn.send(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
            stalled.append(conn)
        answer = await anyio.to_thread.run_sync(http_get, port)
        oldest = stalled[: 2 * METRICS_LIMITS.max_unadmitted]
        closed = 0
        for conn in oldest:  # closed to make room for the newer ones: each reads its end at once
            try:
                with anyio.fail_after(10):
                    await conn.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                closed += 1
        for conn in stalled:
            await conn.aclose()
        tg.cancel_scope.cancel()
    assert answer.startswith(b"HTTP/1.1 200")
    assert closed == len(oldest)


def test_metrics_variables_are_checked_with_the_others(tmp_path: Path) -> None:
    base = {"HIVE_STATE_DIR": str(tmp_path), "HIVE_WORKDIR": str(tmp_path)}
    config = load_config(base | {"HIVE_METRICS_PORT": "9464"})
    assert (config.metrics_port, config.metrics_address) == (9464, "127.0.0.1")
    assert load_config(base).metrics_port is None  # off unless configured
    assert load_config(base | {"HIVE_METRICS_PORT": "0", "HIVE_METRICS_ADDRESS": "::1"}).metrics_address == "::1"
    with pytest.raises(ConfigError) as caught:
        load_config(base | {"HIVE_METRICS_PORT": "99999", "HIVE_METRICS_ADDRESS": "localhost:9", "HIVE_RUNTIME": "x"})
    assert set(caught.value.problems) == {"HIVE_METRICS_PORT", "HIVE_METRICS_ADDRESS", "HIVE_RUNTIME"}
    assert "IP address" in caught.value.problems["HIVE_METRICS_ADDRESS"]
    with pytest.raises(ConfigError) as alone:
        load_config(base | {"HIVE_METRICS_ADDRESS": "0.0.0.0"})
    assert "without HIVE_METRICS_PORT" in alone.value.problems["HIVE_METRICS_ADDRESS"]


def test_tokens_are_counted_by_direction_where_the_runtime_told_them(store: Store) -> None:
    table = TurnTable(store)
    for used in ((120, 30), (None, None), (80, 20)):
        turn_id = table.begin([], 10)
        table.end(turn_id, TurnEnd(outcome="answered", input_tokens=used[0], output_tokens=used[1]), deliver=[])
    got = parsed(store)["hyperhive_tokens"]
    assert got[0] == "counter"
    assert value(got[1], "hyperhive_tokens_total", agent="main", direction="input") == 200
    assert value(got[1], "hyperhive_tokens_total", agent="main", direction="output") == 50
    assert value(got[1], "hyperhive_tokens_total", agent="subagent", direction="input") == 0
