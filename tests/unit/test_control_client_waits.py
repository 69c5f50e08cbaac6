"""Every client call of the control socket is bounded in time (control/wire.py, `answer_wait`).

Issue 16: with the service stopped (SIGSTOP), `status`, `send` and the forwarding bash server waited for
ever. A stopped service still takes connections into its listener's backlog, so the stand-in here is a
socket that listens and never accepts."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperhive.control import wire
from hyperhive.control.wire import AnswerLost, ControlCall, NoAnswer, ServiceUnavailable, answer_wait
from hyperhive.harness.control import ControlClient


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


def test_a_call_to_a_service_that_does_not_answer_gives_up_at_its_wait_naming_socket_and_wait(
    stopped_service: Path, short_waits: None
) -> None:
    started = time.monotonic()
    with pytest.raises(NoAnswer) as caught:
        ControlCall(stopped_service, "status").result()
    took = time.monotonic() - started
    assert 0.25 < took < 2
    assert f"{stopped_service} did not answer within 0.3 s" in caught.value.message
    # It was sent: it may still take effect, as any lost answer (a `send` falls back, a tool says so).
    assert isinstance(caught.value, AnswerLost) and isinstance(caught.value, ServiceUnavailable)


def test_a_full_backlog_is_waited_on_up_to_the_wait_and_then_nothing_was_sent(
    tmp_path: Path, short_waits: None
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
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as caught:
            ControlCall(path, "ping").result()
        assert time.monotonic() - started < 2
        assert not isinstance(caught.value, AnswerLost), caught.value  # never sent: nothing can take effect
        assert "did not take the connection within 0.3 s" in caught.value.message
    finally:
        for sock in queued:
            sock.close()
        listener.close()


def test_the_async_client_gives_up_at_the_same_wait(stopped_service: Path, short_waits: None) -> None:
    import anyio

    async def call() -> None:
        await ControlClient(stopped_service).call("send", body="hi")

    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"did not answer within 0\.4 s"):
        anyio.run(call)
    assert time.monotonic() - started < 2


def test_a_tool_call_waits_for_its_inline_wait_and_a_margin() -> None:
    margin = wire.TOOL_MARGIN
    assert answer_wait("tool", {"name": "run", "arguments": {"cmd": "x", "wait_seconds": 0}}) == margin
    assert answer_wait("tool", {"name": "status", "arguments": {"id": 1, "wait_seconds": 12}}) == margin + 12
    # Absent, the tool's default applies; out of bounds, it is capped or refused: the longest inline wait.
    for arguments in ({"cmd": "x"}, {"wait_seconds": 900}, {"wait_seconds": True}, "not an object"):
        assert answer_wait("tool", {"name": "run", "arguments": arguments}) == margin + wire.MAX_INLINE_WAIT
    assert answer_wait("status") == wire.ANSWER_WAIT and answer_wait("send") == wire.SEND_WAIT


def test_the_longest_inline_wait_is_the_task_engines() -> None:
    from hyperhive.tasks.args import MAX_WAIT

    assert wire.MAX_INLINE_WAIT == MAX_WAIT
