"""Which agent an operator command is for (cli/which_agent.py): `--agent NAME`, HIVE_AGENT, the roster that
HIVE_HIVE names, HIVE_STATE_DIR; and `hyperhive hive`'s lines (cli/hive.py) from what each service answers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hyperhive.cli import main
from hyperhive.cli.hive import AgentLine, age, agent_lines, in_flight_text, table
from hyperhive.cli.which_agent import AgentChoiceError, Choice, choose
from hyperhive.control.wire import ControlError, no_answer, unavailable
from hyperhive.store.database import Store
from hyperhive.store.tables import Tables

# Every variable the choice reads, unset unless a test sets it (the runner's own environment may have them).
CLEAN: dict[str, str | None] = {
    "HIVE_HIVE": None,
    "HIVE_AGENT": None,
    "HIVE_STATE_DIR": None,
    "STATE_DIRECTORY": None,
    "HIVE_AGENT_NAME": None,
}


def roster(tmp_path: Path, *names: str, file: str = "hive.json") -> Path:
    path = tmp_path / file
    agents = {n: {"user": "nobody", "stateDir": str(tmp_path / n / "state")} for n in names}
    path.write_text(json.dumps({"version": 1, "dir": str(tmp_path / "hive"), "agents": agents}))
    return path


def run(*args: str, **env: str) -> Any:
    return CliRunner().invoke(main, list(args), env={**CLEAN, **env})


def with_store(state: Path, waiting: int = 0) -> None:
    store = Store(state / "hyperhive.db")
    for i in range(waiting):
        Tables(store).wakes.add("operator", f"w{i}")
    store.close()


# -- the rules ------------------------------------------------------------------------------------------


def test_without_a_roster_nothing_changes(tmp_path: Path) -> None:
    assert choose(None, {}) == Choice()
    assert choose(None, {"HIVE_STATE_DIR": str(tmp_path)}) == Choice()


def test_an_agent_named_is_the_rosters_entry_and_wins_over_hive_state_dir(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice", "bob")
    env = {"HIVE_HIVE": str(path), "HIVE_STATE_DIR": str(tmp_path / "elsewhere")}
    assert choose("bob", env) == Choice("bob", tmp_path / "bob" / "state")


def test_an_agent_named_without_hive_hive_is_an_error_saying_hive_hive_must_name_the_roster() -> None:
    with pytest.raises(AgentChoiceError, match="HIVE_HIVE is not set: HIVE_HIVE must name the roster"):
        choose("alice", {})
    with pytest.raises(AgentChoiceError, match=r"^HIVE_AGENT=alice names an agent"):
        choose("alice", {}, asked_by="HIVE_AGENT")


def test_an_unknown_name_is_an_error_listing_the_rosters_names(tmp_path: Path) -> None:
    path = roster(tmp_path, "bob", "alice")
    with pytest.raises(AgentChoiceError, match=r"has no agent 'nobody'; its agents: alice, bob$"):
        choose("nobody", {"HIVE_HIVE": str(path)})


def test_a_roster_of_one_agent_is_that_agent_without_naming_it(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice")
    assert choose(None, {"HIVE_HIVE": str(path)}) == Choice("alice", tmp_path / "alice" / "state")


def test_several_agents_and_none_named_is_an_error_naming_them_unless_hive_state_dir_says(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice", "bob")
    with pytest.raises(AgentChoiceError, match=r"has 2 agents \(alice, bob\): pass --agent NAME or set HIVE_AGENT"):
        choose(None, {"HIVE_HIVE": str(path)})
    # A service's own tasks run with its HIVE_STATE_DIR (and HIVE_HIVE): they mean their own agent.
    assert choose(None, {"HIVE_HIVE": str(path), "HIVE_STATE_DIR": str(tmp_path)}) == Choice()
    assert choose(None, {"HIVE_HIVE": str(path), "STATE_DIRECTORY": str(tmp_path)}) == Choice()


def test_a_roster_that_cannot_be_used_is_an_error_with_its_problems(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "dir": "relative", "agents": {}}))
    with pytest.raises(AgentChoiceError, match="dir: 'relative' is not an absolute path"):
        choose("alice", {"HIVE_HIVE": str(bad)})
    with pytest.raises(AgentChoiceError, match="cannot read the roster"):
        choose(None, {"HIVE_HIVE": str(tmp_path / "missing.json")})


# -- through the command line ---------------------------------------------------------------------------


def test_agent_picks_that_agents_state_directory_for_an_operator_command(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice", "bob")
    with_store(tmp_path / "alice" / "state", waiting=1)
    with_store(tmp_path / "bob" / "state", waiting=2)
    for args, env, waiting in (
        (["--agent", "alice"], {}, 1),
        (["--agent", "bob"], {}, 2),
        ([], {"HIVE_AGENT": "bob"}, 2),
        (["--agent", "alice"], {"HIVE_AGENT": "bob"}, 1),  # the option over the variable
        (["--agent", "bob"], {"HIVE_STATE_DIR": str(tmp_path / "alice" / "state")}, 2),  # over HIVE_STATE_DIR
    ):
        result = run(*args, "status", "--json", HIVE_HIVE=str(path), **env)
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["queue"]["waiting"] == waiting, (args, env)


def test_every_operator_command_takes_the_agent(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice", "bob")
    for command in (["send", "hi"], ["status"], ["outbox"], ["tail"], ["tasks"], ["subagents"], ["cancel"]):
        result = run("--agent", "nobody", *command, HIVE_HIVE=str(path))
        assert result.exit_code == 2, (command, result.output)
        assert "has no agent 'nobody'; its agents: alice, bob" in result.output, command
    result = run("--agent", "nobody", "web-login", HIVE_HIVE=str(path))
    assert result.exit_code == 2 and "its agents: alice, bob" in result.output


def test_the_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice", "bob")
    result = run("--agent", "alice", "status")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "hyperhive: --agent alice names an agent of a hive, but HIVE_HIVE is not set: HIVE_HIVE must name the "
        "roster (the host's agents and their state directories, docs/hive.md)"
    )
    result = run("status", HIVE_HIVE=str(path))
    assert result.exit_code == 2
    assert "has 2 agents (alice, bob): pass --agent NAME or set HIVE_AGENT" in result.output


def test_one_agent_in_the_roster_needs_no_name_and_no_roster_is_as_before(tmp_path: Path) -> None:
    with_store(tmp_path / "alice" / "state", waiting=3)
    result = run("status", "--json", HIVE_HIVE=str(roster(tmp_path, "alice", file="one.json")))
    assert result.exit_code == 0 and json.loads(result.output)["queue"]["waiting"] == 3
    with_store(tmp_path / "solo", waiting=1)
    result = run("status", "--json", HIVE_STATE_DIR=str(tmp_path / "solo"))
    assert result.exit_code == 0 and json.loads(result.output)["queue"]["waiting"] == 1


def test_the_operators_hive_hive_without_hive_agent_name_does_not_break_tasks(tmp_path: Path) -> None:
    """The configuration reads HIVE_HIVE as the service's (with HIVE_AGENT_NAME): not for an operator command."""
    with_store(tmp_path / "alice" / "state")
    result = run("--agent", "alice", "tasks", HIVE_HIVE=str(roster(tmp_path, "alice", "bob")))
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "no tasks"


def test_agent_before_a_command_that_is_not_an_operators_is_refused(tmp_path: Path) -> None:
    for command in ("agent", "turn", "demo", "hive"):
        result = run("--agent", "alice", command, "--help")
        assert result.exit_code == 2, (command, result.output)
        assert "--agent applies to the operator's commands" in result.output
    # HIVE_AGENT is only a default: it does not stop the others.
    result = run("turn", "--help", HIVE_AGENT="alice")
    assert result.exit_code == 0, result.output


def test_help_says_agent_wins_over_hive_state_dir() -> None:
    result = run("--help")
    assert "--agent NAME" in result.output
    assert "wins over HIVE_STATE_DIR" in " ".join(result.output.split())


# -- `hyperhive hive` -----------------------------------------------------------------------------------


def test_hive_without_hive_hive_says_what_it_lists() -> None:
    result = run("hive")
    assert result.exit_code == 2
    assert "lists the agents of the roster that HIVE_HIVE names" in result.output


def status_answer(state: str, **hive: Any) -> dict[str, Any]:
    return {
        "headline": {"state": state, "text": state, "busy": []},
        "state": "idle",
        "queue": {"waiting": 2, "scheduled": 0, "set_aside": 0},
        "last_turn": {"id": 4, "ended_at": 1000.0},
        "hive": {"name": "x", "may_write_to": [], "in_flight": [], "last_sent": None, "last_received": None, **hive},
    }


def failing(exc: BaseException, cause: BaseException | None = None) -> Any:
    def ask(socket: Path) -> dict[str, Any]:
        raise exc from cause

    return ask


def test_each_agent_is_its_services_state_or_stopped_or_unknown_with_the_reason(tmp_path: Path) -> None:
    flying = [{"id": "alice.3", "to": "bob", "state": "delivered", "hop": 1, "since": 1005.0}]
    answers: dict[str, Any] = {
        "alice": lambda s: status_answer("working", in_flight=flying, last_sent=1010.0),
        "bob": lambda s: status_answer("idle", last_received=1020.0),
        "carol": failing(unavailable("/x/harness.sock", ConnectionRefusedError()), ConnectionRefusedError()),
        "dave": failing(unavailable("/d/harness.sock", PermissionError(13, "no")), PermissionError(13, "no")),
        "erin": failing(no_answer("/e/harness.sock", 5)),
        "fay": failing(ControlError("bad answer")),
    }
    with_store(tmp_path / "carol", waiting=1)
    dirs = {name: tmp_path / name for name in answers}

    def ask(socket: Path) -> dict[str, Any]:
        answer: dict[str, Any] = answers[socket.parent.name](socket)
        return answer

    lines = {line.name: line for line in agent_lines(dirs, ask)}
    assert lines["alice"] == AgentLine("alice", "working", None, True, 2, 1010.0, flying)
    assert (lines["bob"].state, lines["bob"].last_activity) == ("idle", 1020.0)
    assert (lines["carol"].state, lines["carol"].queue, lines["carol"].up) == ("stopped", 1, False), lines["carol"]
    assert lines["dave"].state == "unknown"
    assert lines["dave"].reason == "/d/harness.sock belongs to another user's hyperhive service; run as that user"
    assert lines["erin"].state == "unknown" and "did not answer within 5 s" in str(lines["erin"].reason)
    assert (lines["fay"].state, lines["fay"].reason) == ("unknown", "bad answer")

    shown = table(list(lines.values()), now=1030.0)
    assert shown[0].split() == ["agent", "state", "queue", "last", "activity", "in", "flight"]
    assert shown[1].split() == ["alice", "working", "2", "20", "s", "ago", "1:", "alice.3→bob", "delivered"]
    assert shown[2].split() == ["bob", "idle", "2", "10", "s", "ago", "-"]
    assert shown[3].split() == ["carol", "stopped", "1", "-", "-"]
    assert shown[4].split()[1:5] == ["unknown", "-", "-", "-"]
    assert shown[4].endswith("  /d/harness.sock belongs to another user's hyperhive service; run as that user")


def test_a_stopped_agent_without_a_store_is_stopped_and_nothing_more(tmp_path: Path) -> None:
    cause = FileNotFoundError()
    (line,) = agent_lines({"bob": tmp_path / "none"}, failing(unavailable("/s", cause), cause))
    assert line == AgentLine("bob", "stopped")


def test_ages_and_messages_in_flight_read_shortly() -> None:
    assert [age(t, 100_000.0) for t in (None, 99_988.0, 99_700.0, 100_000 - 7300, 100_000 - 2 * 86400 - 5)] == [
        "-",
        "12 s ago",
        "5 min ago",
        "2 h ago",
        "2 d ago",
    ]
    many = [{"id": f"a.{i}", "to": "b", "state": "queued"} for i in range(7)]
    assert in_flight_text(many) == "7: a.0→b queued, a.1→b queued, a.2→b queued, a.3→b queued, a.4→b queued, +2 more"
    assert in_flight_text([]) == "-"


def test_hive_json_is_one_object_per_agent_per_line(tmp_path: Path) -> None:
    path = roster(tmp_path, "alice", "bob")
    result = run("hive", "--json", HIVE_HIVE=str(path))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["name"], r["state"], r["up"]) for r in rows] == [("alice", "stopped", False), ("bob", "stopped", False)]
    assert os.environ.get("HIVE_HIVE") != str(path)
