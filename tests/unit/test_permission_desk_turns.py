"""A permission request outlives no turn: asked where nothing cancels the ask with its turn (claude's permission
prompt, an HTTP request hyperhive's server holds while claude is interrupted: the real CLI's request stayed
waiting, `status` saying "needs you", for a turn cancelled long before), it is withdrawn when the turn that
asked is over; unless the service is stopping, when it waits on for the turn carried again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from hyperhive.core.inbox import Inbox
from hyperhive.core.live import LiveFeed
from hyperhive.core.permissions import TURN_ENDED, PermissionDesk
from hyperhive.runtime.permissions import PermissionAnswer, PermissionQuestion
from hyperhive.store.database import Store
from hyperhive.store.tables import Tables

pytestmark = pytest.mark.anyio

QUESTION = PermissionQuestion("Write", "Write", {"file_path": "/w/note.txt", "content": "hi"})


@asynccontextmanager
async def desk_of(tmp_path: Path) -> AsyncIterator[PermissionDesk]:
    path = tmp_path / "hyperhive.db"
    inbox = Inbox(Tables(Store(path)), Tables(Store(path)), feed=LiveFeed())
    try:
        yield PermissionDesk(inbox, timeout=600)
    finally:
        inbox.close()


async def asked_then_turn_over(desk: PermissionDesk) -> PermissionAnswer | None:
    """Turn 1 asks; once its request waits, the turn is over; the answer the asker got (None: still asking)."""
    turn: list[int | None] = [1]
    asker = desk.asker(0, lambda: turn[0])
    answer: PermissionAnswer | None = None

    async def ask() -> None:
        nonlocal answer
        answer = await asker.ask(QUESTION)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        with anyio.fail_after(10):
            while not desk.asking():
                await anyio.sleep(0.01)
        turn[0] = None
        with anyio.move_on_after(5):
            while answer is None:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    return answer


async def test_a_request_whose_turn_ends_unanswered_is_withdrawn_and_the_asker_told(tmp_path: Path) -> None:
    async with desk_of(tmp_path) as desk:
        answer = await asked_then_turn_over(desk)
        assert answer is not None and not answer.allow and answer.reason == TURN_ENDED
        [row] = await desk.inbox.read(lambda t: t.permissions.recent())
        assert (row.state, row.reason) == ("withdrawn", TURN_ENDED)
        assert desk.asking() == []


async def test_a_request_cut_while_the_service_stops_waits_on_for_the_next_start(tmp_path: Path) -> None:
    async with desk_of(tmp_path) as desk:
        desk.stopping()
        await asked_then_turn_over(desk)
        [row] = await desk.inbox.read(lambda t: t.permissions.waiting())
        assert row.state == "waiting"
