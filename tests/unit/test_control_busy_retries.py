"""A `busy` answer is asked again, backing off, within the call's wait (control/wire.py, `busy_retried`).

Issue 23: under a burst from other local clients, `hyperhive send` gave up at once with "the service
already serves 32 other requests at once; try again in a moment" (exit 1). No wall clock is read here: the
backoff runs on a fake clock whose only time is what the fake sleep adds, and the in-process server's
place is freed by the injected sleep, so each test checks what was asked, how often and how long it paused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

from hyperhive.control import wire
from hyperhive.control.wire import ControlError, NoAnswer, ServiceUnavailable, ask, busy_retried, retries_busy
from hyperhive.service.connections import Limits
from hyperhive.service.control import ControlServer, Reply

pytestmark = pytest.mark.timeout(60)

BUSY = "the service already serves 32 other requests at once; try again in a moment"


class FakeTime:
    """A clock that moves only when slept on; each pause recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.pauses.append(seconds)
        self.now += seconds


def busy_then(
    answers: int, time: FakeTime, *, took: float = 0.001
) -> tuple[Callable[[float], dict[str, Any]], list[tuple[float, float]]]:
    """An attempt answered `busy` `answers` times, then ok; each attempt takes `took` seconds of the clock
    and is recorded with the deadline it was given and the time it started."""
    seen: list[tuple[float, float]] = []

    def attempt(deadline: float) -> dict[str, Any]:
        seen.append((deadline, time.now))
        time.now += took
        if len(seen) <= answers:
            raise ControlError(BUSY, kind="busy")
        return {"wake_id": 7}

    return attempt, seen


def test_busy_answers_are_asked_again_with_growing_jittered_pauses_until_one_is_taken() -> None:
    time = FakeTime()
    attempt, seen = busy_then(8, time)
    told: list[tuple[str, float]] = []
    draws = iter([0.0, 0.999, 0.5, 0.0, 0.999, 0.25, 0.0, 0.999])
    answer = busy_retried(
        attempt,
        15.0,
        on_busy=lambda exc, left: told.append((exc.message, left)),
        clock=time.clock,
        sleep=time.sleep,
        jitter=lambda: next(draws),
    )
    assert answer == {"wake_id": 7}
    assert len(seen) == 9
    # One deadline for every attempt: the call's wait from its first, never renewed.
    assert {deadline for deadline, _ in seen} == {1015.0}
    # Doubling from 50 ms up to 1 s, each drawn between half and all of it.
    bases = [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for pause, base, draw in zip(time.pauses, bases, [0.0, 0.999, 0.5, 0.0, 0.999, 0.25, 0.0, 0.999], strict=True):
        assert pause == pytest.approx(base * (0.5 + draw / 2))
        assert base / 2 <= pause < base
    # The operator is told once, at the first `busy`, with what is left of the wait.
    assert told == [(BUSY, pytest.approx(15.0 - 0.001))]


def test_a_burst_that_outlasts_the_wait_ends_in_busy_saying_how_long_and_how_often() -> None:
    time = FakeTime()
    attempt, seen = busy_then(10_000, time)
    with pytest.raises(ControlError) as caught:
        busy_retried(attempt, 15.0, clock=time.clock, sleep=time.sleep, jitter=lambda: 0.999)
    error = caught.value
    assert error.data["kind"] == "busy" and error.data["tries"] == len(seen)
    assert error.message == f"busy for 15 s (asked {len(seen)} times): {BUSY}"
    # Within the wait: no attempt started with less than the reserve left, and no pause past the deadline.
    assert all(start <= 1015.0 - wire.BUSY_RESERVE for _, start in seen)
    assert time.now <= 1015.0
    assert max(time.pauses) < wire.BUSY_MOST
    # About 15 attempts in 15 s at the most pause (1 s), not a spin.
    assert 10 <= len(seen) <= 25, len(seen)


def test_any_other_answer_or_failure_ends_the_retries_at_once() -> None:
    time = FakeTime()

    def refused(deadline: float) -> dict[str, Any]:
        raise ControlError("nothing to send: the message is empty", kind="bad_request")

    with pytest.raises(ControlError, match="empty"):
        busy_retried(refused, 15.0, clock=time.clock, sleep=time.sleep)
    calls: list[float] = []

    def lost(deadline: float) -> dict[str, Any]:
        calls.append(deadline)
        if len(calls) == 1:
            raise ControlError(BUSY, kind="busy")
        raise NoAnswer("no answer")

    # A lost answer may have taken effect: it is the caller's to judge (`send` stores the wake itself,
    # under the same request id), never asked again here.
    with pytest.raises(NoAnswer):
        busy_retried(lost, 15.0, clock=time.clock, sleep=time.sleep)
    assert len(calls) == 2 and len(time.pauses) == 1


def test_only_ops_that_a_repeat_cannot_do_twice_are_asked_again() -> None:
    assert all(retries_busy(op) for op in ("ping", "status", "subagents"))
    assert retries_busy("send", {"body": "hi", "request_id": "abc"})
    assert not retries_busy("send", {"body": "hi"})  # without its id, a repeat could store it twice
    assert not any(retries_busy(op) for op in ("tool", "subagent_cancel", "web_login", "subscribe"))


# -- against a real ControlServer, in-process ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_send_refused_busy_is_sent_again_with_its_id_and_taken_once_a_place_is_free(tmp_path: Path) -> None:
    release = anyio.Event()
    sends: list[dict[str, Any]] = []

    async def slow_ping(req: dict[str, Any]) -> Reply:
        await release.wait()
        return Reply({"pong": True})

    async def send(req: dict[str, Any]) -> Reply:
        sends.append(req)
        return Reply({"wake_id": len(sends)})

    server = ControlServer(tmp_path / "harness.sock", {"ping": slow_ping, "send": send}, Limits(other=1))
    pauses: list[float] = []
    told: list[str] = []

    def sleep(seconds: float) -> None:  # the burst ends after the second `busy`
        pauses.append(seconds)
        if len(pauses) == 2:
            anyio.from_thread.run_sync(release.set)

    def client() -> dict[str, Any]:
        params = {"body": "hello", "request_id": "r-1", "from": "operator"}
        return ask(server.path, "send", params, on_busy=lambda exc, left: told.append(exc.message), sleep=sleep)

    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        holder: list[dict[str, Any]] = []

        async def hold() -> None:
            holder.append(await anyio.to_thread.run_sync(lambda: wire.call(server.path, "ping")))

        tg.start_soon(hold)
        while server.admission.serving("other") < 1:
            await anyio.sleep(0.01)
        answer = await anyio.to_thread.run_sync(client)
        while not holder:
            await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert answer == {"wake_id": 1}
    assert holder == [{"pong": True}]
    # Asked until taken (the refused ones never reached the handler), the same id each time, and the
    # operator told once why it waits.
    assert len(pauses) >= 2 and len(sends) == 1 and sends[0]["request_id"] == "r-1"
    assert told == ["the service already serves 1 other requests at once; try again in a moment"]


@pytest.mark.anyio
async def test_an_op_that_would_act_twice_is_not_asked_again(tmp_path: Path) -> None:
    release = anyio.Event()

    async def slow_ping(req: dict[str, Any]) -> Reply:
        await release.wait()
        return Reply({"pong": True})

    async def cancel(req: dict[str, Any]) -> Reply:
        raise AssertionError("never served")

    server = ControlServer(tmp_path / "harness.sock", {"ping": slow_ping, "subagent_cancel": cancel}, Limits(other=1))
    slept: list[float] = []
    pinged = anyio.Event()

    async def hold() -> None:
        await anyio.to_thread.run_sync(lambda: wire.call(server.path, "ping"))
        pinged.set()

    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        tg.start_soon(hold)
        while server.admission.serving("other") < 1:
            await anyio.sleep(0.01)

        def client() -> None:
            ask(server.path, "subagent_cancel", {"id": 3}, sleep=slept.append)

        with pytest.raises(ControlError) as caught:
            await anyio.to_thread.run_sync(client)
        release.set()
        await pinged.wait()
        tg.cancel_scope.cancel()
    assert caught.value.data["kind"] == "busy" and not slept
    assert not isinstance(caught.value, ServiceUnavailable)
    assert json.dumps(caught.value.data) == '{"kind": "busy"}'
