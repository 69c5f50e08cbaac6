"""The permission requests' table (store/permissions.py): one answer wins whatever races it (another
answer, on another connection as another process would; the deadline), the loser is told what happened; a
re-run turn asking the same finds the same request or its stored answer; rules allow at once until revoked."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hyperhive.errors import AnswerRefused
from hyperhive.store.database import Store
from hyperhive.store.permissions import PermissionTable


def table(path: Path) -> PermissionTable:
    return PermissionTable(Store(path / "hyperhive.db"))


def race(tmp_path: Path, request: int, racers: int) -> tuple[list[str], list[str]]:
    """`racers` answers to `request` at once, each on its own connection: who won, what the others were told."""
    tables = [table(tmp_path) for _ in range(racers)]
    won: list[str] = []
    refused: list[str] = []
    start = threading.Barrier(racers)

    def answer(i: int, t: PermissionTable) -> None:
        start.wait()
        try:
            t.answer(request, allow=i % 2 == 0, by=f"racer-{i}")
            won.append(f"racer-{i}")
        except AnswerRefused as exc:
            refused.append(exc.message)

    threads = [threading.Thread(target=answer, args=(i, t)) for i, t in enumerate(tables)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    for t in tables:
        t.store.close()
    return won, refused


def test_of_many_answers_racing_on_their_own_connections_exactly_one_wins(tmp_path: Path) -> None:
    first = table(tmp_path)
    for round_ in range(20):
        row, fresh = first.open(0, 1, "bash", "ls", f'{{"round": {round_}}}', 600)
        assert fresh
        won, refused = race(tmp_path, row.id, 6)
        assert len(won) == 1 and len(refused) == 5
        final = first.get(row.id)
        assert final.answered_by == won[0]
        assert all(f"was already {final.state}" in m for m in refused)


def test_an_answer_after_the_deadline_is_refused_and_the_request_is_expired(tmp_path: Path) -> None:
    t = table(tmp_path)
    row, _ = t.open(0, 1, "bash", "ls", "{}", 10, now=1000.0)
    with pytest.raises(AnswerRefused, match="expired"):
        t.answer(row.id, allow=True, by="cli", now=1010.0)
    assert t.get(row.id).state == "expired"
    assert t.expire(now=2000.0) == []  # expired once


def test_the_deadline_and_an_answer_racing_end_in_exactly_one_of_them(tmp_path: Path) -> None:
    t = table(tmp_path)
    row, _ = t.open(0, 1, "bash", "ls", "{}", 10, now=1000.0)
    [expired] = t.expire(now=1010.0)
    assert expired.id == row.id
    with pytest.raises(AnswerRefused, match="expired"):
        t.answer(row.id, allow=True, by="cli", now=1005.0)  # a clock behind: still too late


def test_a_re_run_asking_the_same_waits_on_the_same_request_and_then_gets_its_stored_answer(tmp_path: Path) -> None:
    t = table(tmp_path)
    row, fresh = t.open(0, 1, "Write", "write a", '{"path": "a"}', 600)
    again, fresh_again = t.open(0, 2, "Write", "write a", '{"path": "a"}', 600)
    assert fresh and not fresh_again and again.id == row.id
    t.answer(row.id, allow=True, by="cli")
    given, _ = t.open(0, 3, "Write", "write a", '{"path": "a"}', 600)
    assert (given.id, given.state) == (row.id, "allowed")
    t.deliver(row.id)
    # Given once: the next time it is a new question.
    new, fresh_new = t.open(0, 4, "Write", "write a", '{"path": "a"}', 600)
    assert fresh_new and new.id != row.id
    # Another agent's same question, or another input, is its own request.
    assert t.open(3, 4, "Write", "write a", '{"path": "a"}', 600)[0].id != new.id
    assert t.open(0, 4, "Write", "write b", '{"path": "b"}', 600)[0].id != new.id


def test_an_always_rule_allows_its_tool_at_once_until_revoked(tmp_path: Path) -> None:
    t = table(tmp_path)
    row, _ = t.open(0, 1, "mcp__bash__run", "run", '{"cmd": "make"}', 600)
    answered, rule = t.answer(row.id, allow=True, always=True, by="web")
    assert answered.always and rule is not None and rule.tool == "mcp__bash__run"
    passed, fresh = t.open(2, 5, "mcp__bash__run", "run", '{"cmd": "make test"}', 600)
    assert not fresh and (passed.state, passed.answered_by) == ("allowed", f"rule {rule.id}")
    assert passed.delivered_at is not None
    t.revoke(rule.id)
    with pytest.raises(AnswerRefused, match="no rule"):
        t.revoke(rule.id)
    asked, fresh = t.open(2, 6, "mcp__bash__run", "run", '{"cmd": "make test"}', 600)
    assert fresh and asked.state == "waiting"


def test_always_comes_only_with_allow_and_a_withdrawn_request_takes_no_answer(tmp_path: Path) -> None:
    t = table(tmp_path)
    row, _ = t.open(0, 1, "bash", "ls", "{}", 600)
    denied, rule = t.answer(row.id, allow=False, always=True, reason="no", by="cli")
    assert not denied.always and rule is None and t.rules() == []
    other, _ = t.open(0, 1, "bash", "rm", '{"x": 1}', 600)
    assert t.withdraw(other.id, "the turn ended")
    assert not t.withdraw(other.id, "again")
    with pytest.raises(AnswerRefused, match="withdrawn"):
        t.answer(other.id, allow=True, by="cli")
    with pytest.raises(AnswerRefused, match="no permission request 999"):
        t.answer(999, allow=True, by="cli")
