"""Every client call of the control socket is bounded in time (control/wire.py, `answer_wait`).

Issue 16: with the service stopped (SIGSTOP), `status`, `send` and the forwarding bash server waited for
ever. A stopped service still takes connections into its listener's backlog, so the stand-in here is a
socket that listens and never accepts.

No wall clock is read here (this tier runs in `checks.pytest` beside VM tests, on loaded builders): each
test records every wait the call arms, a socket timeout or an anyio deadline, and checks that there is
one, that it is the call's own wait at most, and what the call raised when it ran out. A call that waited
for ever would be ended by pytest-timeout."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperhive.control import wire
from hyperhive.control.wire import AnswerLost, ControlCall, NoAnswer, ServiceUnavailable, answer_wait
from hyperhive.service.control import ControlClient


@pytest.fixture
def stopped_service(tmp_path: Path) -> Iterator[Path]:
    """A socket that takes connections into its backlog and never accepts them, as a stopped service's."""
    path = tmp_path / "harness.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(64)
    try:
        yield path
    finally:
        listener.close()


@pytest.fixture
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "ANSWER_WAIT", 0.3)
    monkeypatch.setattr(wire, "SEND_WAIT", 0.4)


@pytest.fixture
def socket_waits(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """Every timeout a blocking call's socket is given, in order."""
    armed: list[float | None] = []
    settimeout = socket.socket.settimeout

    def recording(sock: socket.socket, value: float | None) -> None:
        armed.append(value)
        settimeout(sock, value)

    monkeypatch.setattr(socket.socket, "settimeout", recording)
    return armed


@pytest.mark.timeout(60)
def test_a_call_to_a_service_that_does_not_answer_gives_up_at_its_wait_naming_socket_and_wait(
    stopped_service: Path, short_waits: None, socket_waits: list[float | None]
) -> None:
    with pytest.raises(NoAnswer) as caught:
        ControlCall(stopped_service, "status").result()
    # Every blocking step (connect, send, the read that ran out) had a timeout, the rest of the call's wait:
    # never none, never non-blocking, never more than the wait from the call's start.
    assert len(socket_waits) >= 3 and all(w is not None and 0 < w <= 0.3 for w in socket_waits), socket_waits
    assert socket_waits == sorted(socket_waits, reverse=True), "each step waits only for what is left"
    assert f"{stopped_service} did not answer within 0.3 s" in caught.value.message
    # It was sent: it may still take effect, as any lost answer (a `send` falls back, a tool says so).
    assert isinstance(caught.value, AnswerLost) and isinstance(caught.value, ServiceUnavailable)


@pytest.mark.timeout(60)
def test_a_full_backlog_is_waited_on_up_to_the_wait_and_then_nothing_was_sent(
    tmp_path: Path, short_waits: None, socket_waits: list[float | None]
) -> None:
    path = tmp_path / "harness.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(0)
    queued = []
    try:
        for _ in range(8):  # fill the backlog (how many it takes is the kernel's business)
            sock = socket.socket(socket.AF_UNIX)
            sock.setblocking(False)
            try:
                sock.connect(str(path))
            except BlockingIOError:
                sock.close()
                break
            queued.append(sock)
        socket_waits.clear()
        with pytest.raises(ServiceUnavailable) as caught:
            ControlCall(path, "ping").result()
        # Connecting was retried, each try bounded by what was left of the call's wait.
        assert len(socket_waits) >= 2 and all(w is not None and 0 < w <= 0.3 for w in socket_waits), socket_waits
        assert socket_waits == sorted(socket_waits, reverse=True)
        assert not isinstance(caught.value, AnswerLost), caught.value  # never sent: nothing can take effect
        assert "did not take the connection within 0.3 s" in caught.value.message
    finally:
        for sock in queued:
            sock.close()
        listener.close()


@pytest.mark.timeout(60)
def test_the_async_client_gives_up_at_the_same_wait(
    stopped_service: Path, short_waits: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from hyperhive.service import control

    # Each await of the call is bounded by a deadline (anyio's fail_after or move_on_after, in seconds
    # from when it is armed): recorded, then armed as asked.
    armed: list[tuple[str, float]] = []

    def recording(name: str) -> object:
        original = getattr(anyio, name)

        def arm(delay: float | None, *args: object, **kwargs: object) -> object:
            armed.append((name, float("inf") if delay is None else delay))
            return original(delay, *args, **kwargs)

        return arm

    for name in ("fail_after", "move_on_after"):
        monkeypatch.setattr(control.anyio, name, recording(name))

    async def call() -> None:
        await ControlClient(stopped_service).call("send", body="hi")

    with pytest.raises(NoAnswer, match=r"did not answer within 0\.4 s"):
        anyio.run(call)
    # Connecting, sending and reading the answer each under a deadline within the call's wait (0.4 s);
    # the read's is what ran out.
    assert len(armed) >= 3 and all(0 <= delay <= 0.4 for _, delay in armed), armed
    assert armed[-1][0] == "fail_after"


def test_a_tool_call_waits_for_its_inline_wait_and_a_margin() -> None:
    margin = wire.TOOL_MARGIN
    assert answer_wait("tool", {"name": "run", "arguments": {"cmd": "x", "wait_seconds": 0}}) == margin
    assert answer_wait("tool", {"name": "status", "arguments": {"id": 1, "wait_seconds": 12}}) == margin + 12
    # Absent, the tool's default applies; out of bounds, it is capped or refused: the longest inline wait.
    for arguments in ({"cmd": "x"}, {"wait_seconds": 900}, {"wait_seconds": True}, "not an object"):
        assert answer_wait("tool", {"name": "run", "arguments": arguments}) == margin + wire.MAX_INLINE_WAIT
    assert answer_wait("status") == wire.ANSWER_WAIT and answer_wait("send") == wire.SEND_WAIT
    # A cancel answers once the sub-agent's turn (and its own sub-agents') stopped: the agents' cancel grace
    # and more (a 5 s wait gave up on a cancel still under way).
    assert answer_wait("subagent_cancel", {"id": 1}) == wire.STOP_WAIT >= 30


def test_the_longest_inline_wait_is_the_task_engines() -> None:
    from hyperhive.tasks.args import MAX_WAIT

    assert wire.MAX_INLINE_WAIT == MAX_WAIT
