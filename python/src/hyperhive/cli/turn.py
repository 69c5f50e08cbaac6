"""`hyperhive turn PROMPT`: one turn through the configured runtime, stream-json on stdout like `claude --print`.

Every line also goes to the transcript. Exit status: 0 the turn succeeded, 1 it failed (the reason on
stderr), 2 bad configuration, 128 + signal when stopped by SIGINT (130), SIGTERM or SIGHUP: the turn is
interrupted cleanly first, so the agent process never outlives the command.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import BinaryIO

import anyio
import click
from anyio.abc import TaskStatus

from hyperhive.cli import config_or_exit
from hyperhive.config import Config
from hyperhive.errors import ConfigError, HyperhiveError, StoreError
from hyperhive.runtime import Runtime, make_runtime
from hyperhive.runtime.base import Sink, TeeSink
from hyperhive.runtime.render import RenderSink
from hyperhive.runtime.sessions import Sessions
from hyperhive.runtime.stream import StreamLine, dump_line
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.store.database import Store

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StdoutSink:
    """stream-json to a byte stream, one flushed line each. UTF-8 whatever the locale says.

    A reader that goes away (`| head`) does not stop the turn: output stops, the transcript keeps it all.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.broken = False

    async def emit(self, line: StreamLine) -> None:
        if self.broken:
            return
        try:
            self.stream.write(dump_line(line).encode("utf-8") + b"\n")
            self.stream.flush()
        except BrokenPipeError:
            self.broken = True
            # Point the descriptor at /dev/null so the interpreter's final flush does not complain.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)


@click.command()
@click.argument("prompt")
@click.option("--runtime", type=click.Choice(["claude", "acp"]), help="Override HIVE_RUNTIME.")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECS",
    help="Override HIVE_IDLE_TIMEOUT: seconds without stream activity before the turn is stopped.",
)
@click.option("--workdir", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Override HIVE_WORKDIR.")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), help="Override HIVE_STATE_DIR.")
@click.option(
    "--resume/--new",
    default=False,
    help="Continue the recorded session, or (default) archive it and start a new one, like `claude --print`.",
)
@click.option("--render", is_flag=True, help="Also print the turn readably on stderr.")
def turn(
    *,
    prompt: str,
    runtime: str | None,
    idle_timeout: float | None,
    workdir: Path | None,
    state_dir: Path | None,
    resume: bool,
    render: bool,
) -> None:
    """Run one turn with PROMPT; stream-json lines on stdout."""
    config = config_or_exit(
        runtime=runtime,
        idle_timeout=idle_timeout,
        workdir=workdir.absolute() if workdir else None,
        state_dir=state_dir.absolute() if state_dir else None,
    )
    sys.exit(anyio.run(_main, config, prompt, resume, render))


async def _main(config: Config, prompt: str, resume: bool, render: bool) -> int:
    from hyperhive.control.lock import holder

    if (pid := holder(config.state.lock)) is not None:
        # The service owns this state directory's session: a side turn would archive or fork it.
        who = f" (pid {pid})" if pid else ""
        click.echo(
            f"hyperhive: a hyperhive service{who} runs on {config.state_dir}; `hyperhive send TEXT` gives it a "
            "message instead, or use another --state-dir for a separate turn",
            err=True,
        )
        return 4
    try:
        store = Store(config.state.db)
    except StoreError as exc:
        click.echo(f"hyperhive: {exc}", err=True)
        return 2
    try:
        runtime = make_runtime(config, Sessions(store))
    except HyperhiveError as exc:
        store.close()
        click.echo(f"hyperhive: {exc}", err=True)
        return 2 if isinstance(exc, ConfigError) else 1
    transcript = TranscriptSink(config.state.transcripts)
    sinks: list[Sink] = [transcript, StdoutSink(sys.stdout.buffer)]
    if render:
        sinks.append(RenderSink(sys.stderr))
    stopped_by: signal.Signals | None = None
    code = 1
    try:
        async with anyio.create_task_group() as tg:

            async def watch_signals(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                nonlocal stopped_by
                with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
                    task_status.started()
                    async for signum in signals:
                        if stopped_by is not None or not runtime.interrupt():
                            tg.cancel_scope.cancel()  # a second signal, or nothing to interrupt: stop now
                        stopped_by = stopped_by or signal.Signals(signum)

            await tg.start(watch_signals)  # handlers in place before the agent starts
            code = await _one_turn(runtime, prompt, resume, TeeSink(*sinks))
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await runtime.aclose()
        transcript.close()
        store.close()
    return 128 + stopped_by if stopped_by is not None else code


async def _one_turn(runtime: Runtime, prompt: str, resume: bool, sink: Sink) -> int:
    try:
        if not resume:
            await runtime.archive()
        await runtime.run(prompt, sink)
    except HyperhiveError as exc:  # the turn failed; its result line is already on stdout
        click.echo(f"hyperhive: turn failed: {exc}", err=True)
        return 1
    return 0
