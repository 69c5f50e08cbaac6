"""The hive under faults (docs/hive.md): agents' services killed while messages flow both ways, agents
that would answer each other forever, names that are no agent's or not allowed, processes that pose as
an agent, a recipient down for a while. Every agent is a real `hyperhive agent` service with the demo
agent (or a variant of it) as its agent, talking over the real one-host transport."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import Record, soak
from tests.process.harness_service import Service, run_cli, start_service
from tests.process.hive_services import (
    agent_env,
    answered_turns,
    hive_rows,
    replies,
    settled,
    start_agent,
    stop_all,
    write_roster,
)

HERE = Path(__file__).resolve().parent
PINGPONG = {"HIVE_ACP_COMMAND": sys.executable, "HIVE_ACP_ARGS": json.dumps([str(HERE / "pingpong_agent.py")])}
ROOT = os.geteuid() == 0


@pytest.mark.timeout(900)  # rounds of service starts: each takes seconds on a loaded 2-core machine
def test_messages_flowing_both_ways_survive_kill_9_of_either_service_or_both(tmp_path: Path, record: Record) -> None:
    rounds = soak(30, 120)
    rng = random.Random(25)
    # Two messages a round each way, a round a second or two: over the default rate (30 a minute), which
    # would refuse some (as it should) and leave their orders unanswered.
    roster = write_roster(tmp_path, ["alice", "bob"], ratePerMinute=1000)
    services = {name: start_agent(tmp_path, name, roster) for name in ("alice", "bob")}
    other = {"alice": "bob", "bob": "alice"}
    kills = 0
    try:
        for r in range(rounds):
            for name, svc in services.items():
                svc.cli("send", f"ask {other[name]}: note {name}-{r}")
            time.sleep(rng.uniform(0.0, 1.2))
            victims = rng.choice([["alice"], ["bob"], ["alice", "bob"]])
            for name in victims:
                services[name].stop(signal.SIGKILL)
                kills += 1
            time.sleep(rng.uniform(0.0, 0.3))
            for name in victims:
                services[name] = start_agent(tmp_path, name, roster, log=f"{name}-{r}.log")
        for svc in services.values():
            svc.wait_for("the hive to settle", lambda s=svc: settled(s), within=240)
        # Settled on both sides at once (a receipt told after one side looked): look again.
        for svc in services.values():
            svc.wait_for("the hive to settle", lambda s=svc: settled(s), within=60)
        total, failed = 0, 0
        for name, svc in services.items():
            peer = services[other[name]]
            sent = {r["message_id"]: r for r in hive_rows(svc, "hive_sent")}
            got = {r["message_id"]: r for r in hive_rows(peer, "hive_received")}
            assert set(sent) == set(got), f"{name}'s sent and {other[name]}'s received differ"
            peer_wakes = {w["id"]: w for w in hive_rows(peer, "wakes")}
            told = {w["body"] for w in hive_rows(svc, "wakes") if w["source"] == "hive"}
            for mid, row in got.items():
                assert sent[mid]["state"] == row["outcome"], (sent[mid], row)
                if row["outcome"] == "answered":
                    assert answered_turns(peer, row["wake_id"]) == 1, row
                    continue
                # Kill -9 three times over the turns carrying it: the harness sets a wake aside after three
                # cut turns (docs/reliability.md), and the sender is told, once.
                assert row["outcome"] == "failed", row
                assert peer_wakes[row["wake_id"]]["set_aside_reason"].startswith("3 turns carrying it"), row
                assert answered_turns(peer, row["wake_id"]) == 0, row
                assert sum(f"your message {mid} failed" in body for body in told) == 1, (mid, told)
                failed += 1
            total += len(sent)
            # Each order the peer's answer to reached this agent's turn, answered: told to the operator.
            answers = {r["reply_to"] for r in hive_rows(peer, "hive_sent") if r["state"] == "answered"}
            orders = {r["body"] for r in sent.values() if r["reply_to"] is None and r["message_id"] in answers}
            replied = " ".join(replies(svc))
            assert all(order in replied for order in orders), sorted(o for o in orders if o not in replied)
    finally:
        stop_all(services.values())
    record(
        "kill -9 of the sender, the recipient or both at random points while messages flow both ways",
        "every message stored by its sender is in its recipient's ledger and no other; each answered by exactly "
        "one turn, or (its wake set aside after three cut turns) failed with its sender told once; every receipt "
        "back; every answered order's answer reached the operator",
        f"{rounds} rounds, {kills} kills, {total} messages ({failed} failed after 3 cut turns), none lost or "
        "answered twice",
    )


def test_two_agents_answering_each_other_forever_are_stopped_by_the_hop_limit(tmp_path: Path, record: Record) -> None:
    roster = write_roster(tmp_path, ["ping", "pong"], hopLimit=20)
    ping = start_agent(tmp_path, "ping", roster, **PINGPONG)
    pong = start_agent(tmp_path, "pong", roster, **PINGPONG)
    try:
        started = time.monotonic()
        ping.cli("send", "start pong")
        for svc in (ping, pong):
            svc.wait_for("the loop to stop", lambda s=svc: settled(s) and hive_rows(s, "hive_sent"), within=120)
        time.sleep(1.5)  # nothing more comes
        sent = hive_rows(ping, "hive_sent") + hive_rows(pong, "hive_sent")
        assert len(sent) == 20 and max(r["hop"] for r in sent) == 20
        assert {r["conversation"] for r in sent} == {"ping.1"}
        refused = [
            s for s in (ping, pong) if "has carried 20 messages, its hop limit" in s.cli("tail", "-n", "50").stdout
        ]
        assert len(refused) == 1, "the agent that would have sent the 21st was told why"
        seconds = time.monotonic() - started
    finally:
        for svc in (ping, pong):
            svc.stop()
    record(
        "two agents told to answer each other forever",
        "the conversation stops at its hop limit (20); the agent that would go on is refused with the reason",
        f"20 messages in {seconds:.1f} s, then none",
    )


def test_unknown_and_forbidden_names_are_refused_at_once(tmp_path: Path, record: Record) -> None:
    roster = write_roster(tmp_path, ["alice", "bob", "carol"], agents={"alice": {"canMessage": ["bob"]}})
    alice = start_agent(tmp_path, "alice", roster)
    try:
        for order, reason in (
            ("ask dave: hello", "there is no agent 'dave' on this host"),
            ("ask carol: hello", "alice may not write to carol"),
        ):
            before = time.monotonic()
            alice.cli("send", order)
            alice.wait_for("the refusal", lambda r=reason: r in alice.cli("tail", "-n", "50").stdout, within=30)
            took = time.monotonic() - before
        assert hive_rows(alice, "hive_sent") == []
        assert not (tmp_path / "hive" / "dave").exists()
    finally:
        alice.stop()
    record(
        "a message to an unknown name, and to an agent the sender may not write to",
        "refused by the tool at once with the reason (no phantom inbox, nothing queued)",
        f"answered in the same turn; the turn took {took:.2f} s",
    )


@pytest.mark.timeout(900)  # rounds of service starts: each takes seconds on a loaded 2-core machine
def test_a_recipient_down_for_a_minute_gets_everything_when_it_comes_back(tmp_path: Path, record: Record) -> None:
    down_for = soak(60, 120)
    roster = write_roster(tmp_path, ["alice", "bob"])
    alice = start_agent(tmp_path, "alice", roster)
    bob = start_agent(tmp_path, "bob", roster)
    bob.stop()
    try:
        stopped = time.monotonic()
        for i in range(5):
            alice.cli("send", f"ask bob: while you were away {i}")
        alice.wait_for("five messages queued", lambda: len(hive_rows(alice, "hive_sent")) == 5, within=60)
        assert {r["state"] for r in hive_rows(alice, "hive_sent")} == {"queued"}
        time.sleep(max(0.0, down_for - (time.monotonic() - stopped)))
        assert {r["state"] for r in hive_rows(alice, "hive_sent")} == {"queued"}
        bob = start_agent(tmp_path, "bob", roster, log="bob-again.log")
        back = time.monotonic()
        alice.wait_for(
            "every answer", lambda: len([x for x in replies(alice) if "while you were away" in x]) >= 5, within=120
        )
        took = time.monotonic() - back
        assert [r["message_id"] for r in hive_rows(bob, "hive_received")] == [f"alice.{i}" for i in range(1, 6)]
    finally:
        alice.stop()
        if bob.proc.poll() is None:
            bob.stop()
    record(
        "a recipient's service down while messages are sent to it",
        "each is queued in the sender's store; all are delivered, in order, and answered once it is back",
        f"down {down_for} s, 5 messages; all answered {took:.1f} s after it started",
    )


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory other users can reach (pytest's own is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="hive-users-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def reachable_by_all(path: Path) -> bool:
    """Whether any user may run `path`: every directory on its real path searchable by others."""
    real = path.resolve()
    return bool(real.stat().st_mode & 0o001) and all(p.stat().st_mode & 0o001 for p in real.parents)


def python_for_all(where: Path) -> str:
    """An interpreter other users can run, with this checkout's hyperhive and dependencies importable: ours,
    or (ours under a private home, as pyenv's under /root) a virtual environment in `where` of the system's
    python of the same version, its site-packages pointing at ours (a .pth file: no variable to carry
    through the MCP servers' environments); the test is skipped when there is neither."""
    if reachable_by_all(Path(sys.executable)):
        return sys.executable
    system = Path("/usr/bin/python3")
    if not system.exists() or not reachable_by_all(system):
        pytest.skip(f"{sys.executable} is not reachable by other users, and there is no /usr/bin/python3")
    version = subprocess.run(
        [str(system), "-c", "import sys; print(tuple(sys.version_info[:2]))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if version != str(tuple(sys.version_info[:2])):
        pytest.skip(f"{sys.executable} is not reachable by other users, and /usr/bin/python3 is another version")
    import pydantic

    import hyperhive

    ours = [Path(hyperhive.__file__).parents[1], Path(pydantic.__file__).parents[1]]
    if not all(reachable_by_all(p) for p in ours):
        pytest.skip("this checkout or its site-packages is not reachable by other users")
    venv = where / "venv"
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "hyperhive-test.pth").write_text("".join(f"{p}\n" for p in ours))
    return str(venv / "bin" / "python")


def as_user(user: str) -> list[str]:
    import pwd

    entry = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]


@pytest.mark.skipif(not ROOT, reason="runs each agent as its own user: needs root")
def test_another_user_and_a_task_of_an_agent_cannot_pose_as_an_agent(shared_tmp: Path, record: Record) -> None:
    import pwd

    users = {"alice": "daemon", "bob": "nobody"}
    roster = write_roster(shared_tmp, ["alice", "bob"], agents={n: {"user": u} for n, u in users.items()})
    python = python_for_all(shared_tmp)
    runs_as_anyone = {"HIVE_ACP_COMMAND": python, "HIVE_ACP_ARGS": json.dumps(["-m", "hyperhive", "demo-agent"])}
    services: dict[str, Service] = {}
    try:
        for name, user in users.items():
            entry = pwd.getpwnam(user)
            env = agent_env(shared_tmp, name, roster, **runs_as_anyone)
            for path in (shared_tmp / name, Path(env["HIVE_WORKDIR"])):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            (shared_tmp / "hive" / name).mkdir(mode=0o755)  # as the unit's RuntimeDirectory makes it
            os.chown(shared_tmp / "hive" / name, entry.pw_uid, entry.pw_gid)
            services[name] = start_service(env, shared_tmp / f"{name}.log", wrapper=as_user(user), python=python)
        alice = services["alice"]
        poser = [python, str(HERE / "hive_poser.py"), str(roster)]
        # Another local user (bin) writes to bob as alice, and to alice as bob.
        outsider = [
            json.loads(
                subprocess.run(
                    [*as_user("bin"), *poser, claimed, target],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=30,
                ).stdout
            )
            for claimed, target in (("alice", "bob"), ("bob", "alice"))
        ]
        # A task of alice (run by her agent, as her user) writes to alice as bob, then to bob as alice
        # herself (bypassing her service's ledger and guards), and tries each one's store.
        out = Path(alice.env["HIVE_WORKDIR"]) / "posed.jsonl"
        task = f"{' '.join(poser)} bob alice {out}; {' '.join(poser)} alice bob {out}"
        alice.cli("send", f"run: {task}")
        alice.wait_for(
            "the task's attempts", lambda: out.exists() and len(out.read_text().splitlines()) == 2, within=60
        )
        as_bob, as_alice = (json.loads(line) for line in out.read_text().splitlines())
        for found in [*outsider, as_bob]:
            assert found["message"].startswith("refused: a process of uid"), found
            assert found["message"].endswith(f"is not agent '{found['claimed']}''s user"), found
        assert as_alice["message"].startswith("refused: pid "), as_alice
        assert as_alice["message"].endswith("only the service writes as alice"), as_alice
        # Each store is its own agent's user's: alice's task may write her own, no one another's.
        for found in [*outsider, as_alice]:
            assert found["store"].startswith("refused"), found
        assert as_bob["store"] == "writable", as_bob
        for svc in services.values():
            assert hive_rows(svc, "hive_received") == []
            assert not [w for w in hive_rows(svc, "wakes") if w["source"].startswith("agent:")]
        # The real thing still goes through, each way.
        alice.cli("send", "ask bob: hello from daemon")
        alice.wait_for("bob's answer", lambda: any("hello from daemon" in r for r in replies(alice)), within=60)
    finally:
        stop_all(services.values())
    record(
        "another local user, and a task of agent A, write to the hive's sockets claiming to be an agent",
        "refused by the recipient from the socket's peer credentials: not the agent's user, or (a task of A "
        "writing as A) not the process serving A's socket; nothing stored; neither can open another agent's "
        "store; the agents' own messages still pass",
        "4 attempts, 4 refused, 0 wakes stored",
    )


def test_the_cli_refuses_agent_as_from(tmp_path: Path) -> None:
    roster = write_roster(tmp_path, ["alice", "bob"])
    env = agent_env(tmp_path, "alice", roster)
    result = run_cli(env, "send", "--from", "agent:bob", "hi", check=False)
    assert result.returncode != 0 and "may not start with 'agent:'" in result.stderr
