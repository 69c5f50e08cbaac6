"""Following the service's live stream (`outbox -f`, `tail -f`) for as long as the operator wants: again
after a drop, and across the service's restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from hyperhive.cli.operator import fail
from hyperhive.control.wire import ControlError, ServiceUnavailable
from hyperhive.errors import EXIT_BUSY as EXIT_NOT_RUNNING
from hyperhive.errors import EXIT_STATE

if TYPE_CHECKING:
    from collections.abc import Callable

    from hyperhive.config import Config
    from hyperhive.service.control import ControlClient

# While nothing answers, the follower asks again after this long, doubling up to the most: a restarted
# service is followed within 2 s of its socket answering, and a stopped one costs a connect every 2 s.
RECONNECT_FIRST = 0.1
RECONNECT_MOST = 2.0


def follow_service(
    config: Config,
    on_event: Callable[[dict[str, Any]], None],
    *,
    on_subscribed: Callable[[dict[str, Any]], None] | None = None,
    say_missed: bool = False,
) -> None:
    """Follow the live stream until Ctrl-C: `on_event` for each event, `on_subscribed` with the service's
    answer to each subscription.

    A follower that falls behind (a slow terminal, or one suspended with Ctrl-Z during a busy turn) is
    dropped by the service, or cut off when it stops reading; that is not the service stopping (issue 16:
    it said so and exited 0). And a service that stops is mostly one restarting (issue 23: `tail -f` ended
    at each restart, where the web view followed). So when the stream ends, the follower subscribes again,
    with backoff while nothing answers (saying that it waits), and with `say_missed` says how many events it
    did not show (the events' `seq`), or that the service restarted. It ends only on Ctrl-C, or when the
    state directory is gone (exit 3, saying so). No service at the start is exit 4, as before.
    """
    import anyio

    from hyperhive.service.control import ControlClient

    def gone() -> str | None:
        root = config.state_dir
        return None if root.is_dir() else f"the state directory {root} is gone; nothing more to follow"

    client = ControlClient(config.state.socket)
    try:
        reason = anyio.run(follow_stream, client, on_event, on_subscribed, say_missed, gone)
    except ServiceUnavailable as exc:
        fail(f"{exc.message}; nothing to follow", EXIT_NOT_RUNNING)
    except ControlError as exc:
        fail(exc.message)
    except KeyboardInterrupt:
        return
    fail(reason, EXIT_STATE)


async def follow_stream(
    client: ControlClient,
    on_event: Callable[[dict[str, Any]], None],
    on_subscribed: Callable[[dict[str, Any]], None] | None,
    say_missed: bool,
    gone: Callable[[], str | None],
) -> str:
    """Follow until `gone` gives a reason to stop (asked while nothing answers), which it returns."""
    import contextlib

    import anyio

    expected: int | None = None  # the `seq` of the next event; None until subscribed
    pid = None
    down_since: float | None = None  # since when nothing answers (None: it answered last)
    delay = RECONNECT_FIRST
    while True:
        async with contextlib.aclosing(client.stream("subscribe")) as events:
            try:
                answer = await anext(events)
            except ServiceUnavailable:
                if expected is None:
                    raise  # nothing to follow at the start: the caller says so
                reason = gone()
                if reason is not None:
                    return reason
                if down_since is None:
                    down_since = anyio.current_time()
                    # On stderr: with --json, standard output holds the stream's lines and nothing else.
                    click.echo("── the service does not answer; waiting for it to start again (Ctrl-C ends)", err=True)
                await anyio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MOST)
                continue
            next_seq = answer.get("next_seq")
            next_seq = next_seq if isinstance(next_seq, int) else 0
            if expected is not None:
                now = f" (turn {answer['turn']} running)" if answer.get("turn") else ""
                after = "" if down_since is None else f" after {anyio.current_time() - down_since:.1f} s"
                if answer.get("pid") != pid:
                    click.echo(f"── reconnected{after}: the service restarted (pid {answer.get('pid')}){now}", err=True)
                elif down_since is not None:
                    click.echo(f"── reconnected{after} to the same service (pid {pid}){now}", err=True)
                if say_missed and answer.get("pid") == pid and next_seq > expected:
                    click.echo(
                        f"── fell behind: {next_seq - expected} events not shown; following again{now}", err=True
                    )
            pid, expected, down_since, delay = answer.get("pid"), next_seq, None, RECONNECT_FIRST
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
        await anyio.sleep(RECONNECT_FIRST)
