"""Following the service's live stream (`outbox -f`, `tail -f`) for as long as it runs, again after a drop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from hyperhive.cli.operator import fail
from hyperhive.control.wire import ControlError, ServiceUnavailable
from hyperhive.errors import EXIT_BUSY as EXIT_NOT_RUNNING

if TYPE_CHECKING:
    from collections.abc import Callable

    from hyperhive.config import Config
    from hyperhive.harness.control import ControlClient


def follow_service(
    config: Config,
    on_event: Callable[[dict[str, Any]], None],
    *,
    on_subscribed: Callable[[dict[str, Any]], None] | None = None,
    say_missed: bool = False,
) -> None:
    """Follow the live stream for as long as the service runs: `on_event` for each event, `on_subscribed`
    with the service's answer to each subscription.

    A follower that falls behind (a slow terminal, or one suspended with Ctrl-Z during a busy turn) is
    dropped by the service, or cut off when it stops reading; that is not the service stopping (issue 16:
    it said so and exited 0). So when the stream ends, the follower subscribes again, and with `say_missed`
    says how many events it did not show (the events' `seq`), or that the service restarted. Only when
    nothing answers any more has the service stopped.
    """
    import anyio

    from hyperhive.harness.control import ControlClient

    try:
        anyio.run(follow_stream, ControlClient(config.state.socket), on_event, on_subscribed, say_missed)
    except ServiceUnavailable as exc:
        fail(f"{exc.message}; nothing to follow", EXIT_NOT_RUNNING)
    except ControlError as exc:
        fail(exc.message)
    except KeyboardInterrupt:
        return
    click.echo("hyperhive: the service stopped", err=True)


async def follow_stream(
    client: ControlClient,
    on_event: Callable[[dict[str, Any]], None],
    on_subscribed: Callable[[dict[str, Any]], None] | None,
    say_missed: bool,
) -> None:
    import contextlib

    import anyio

    expected: int | None = None  # the `seq` of the next event; None until subscribed
    pid = None
    while True:
        async with contextlib.aclosing(client.stream("subscribe")) as events:
            try:
                answer = await anext(events)
            except ServiceUnavailable:
                if expected is None:
                    raise
                return  # it was there, and nothing answers now: the service stopped
            next_seq = answer.get("next_seq")
            next_seq = next_seq if isinstance(next_seq, int) else 0
            if say_missed and expected is not None:
                # On stderr: with --json, standard output holds the stream's lines and nothing else.
                now = f" (turn {answer['turn']} running)" if answer.get("turn") else ""
                if answer.get("pid") != pid:
                    click.echo(f"── the service restarted (pid {answer.get('pid')}); following it{now}", err=True)
                elif next_seq > expected:
                    click.echo(
                        f"── fell behind: {next_seq - expected} events not shown; following again{now}", err=True
                    )
            pid, expected = answer.get("pid"), next_seq
            if on_subscribed is not None:
                on_subscribed(answer)
            async for event in events:
                if event.get("event") == "dropped":
                    break
                seq = event.get("seq")
                if isinstance(seq, int):
                    expected = seq + 1
                on_event(event)
        # Dropped, or cut off: subscribe again, after a breath (a stopping service may still accept).
        await anyio.sleep(0.1)
