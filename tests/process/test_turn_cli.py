"""`hyperhive turn`, run as a real subprocess against the fake claude: stdout, exit codes, sessions, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hyperhive.runtime.stream import AssistantLine, ResultLine, StreamLine, SystemLine, parse_line
from tests.process import fake_claude


@dataclass
class Cli:
    tmp: Path
    state: Path
    work: Path
    log: Path
    claude: Path

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("HIVE_", "FAKE_CLAUDE_")) and k != "NO_COLOR"}
        return {
            **base,
            "HIVE_RUNTIME": "claude",
            "HIVE_STATE_DIR": str(self.state),
            "HIVE_WORKDIR": str(self.work),
            "HIVE_CLAUDE_COMMAND": str(self.claude),
            "FAKE_CLAUDE_LOG": str(self.log),
            **extra,
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "hyperhive", "turn", *args]

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(*args), env=self.env(**env), capture_output=True, text=True, timeout=60, check=False
        )

    def calls(self) -> list[dict[str, Any]]:
        return [r for r in fake_claude.read_log(self.log) if "argv" in r]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    work = tmp_path / "work"
    work.mkdir()
    return Cli(tmp_path, tmp_path / "state", work, tmp_path / "fake_claude.jsonl", fake_claude.install(tmp_path))


def stream(stdout: str) -> list[StreamLine]:
    """Every stdout line parsed as stream-json (parse_line raises on anything else)."""
    return [parse_line(line) for line in stdout.splitlines()]


def test_a_successful_turn_prints_stream_json_lines_writes_the_transcript_and_exits_0(cli: Cli) -> None:
    done = cli.run("hello")
    assert done.returncode == 0, done.stderr
    lines = stream(done.stdout)
    assert [type(x) for x in lines] == [SystemLine, AssistantLine, ResultLine]
    assert isinstance(lines[0], SystemLine)
    sid = lines[0].session_id
    transcript = cli.state / "transcripts" / f"{sid}.jsonl"
    assert [json.loads(x) for x in transcript.read_text().splitlines()] == [
        json.loads(x) for x in done.stdout.splitlines()
    ]


def test_each_turn_starts_a_new_session_unless_resume_is_given(cli: Cli) -> None:
    first = stream(cli.run("one").stdout)[-1]
    second = stream(cli.run("two").stdout)[-1]
    assert isinstance(first, ResultLine) and isinstance(second, ResultLine)
    assert cli.run("--resume", "three").returncode == 0
    calls = cli.calls()
    assert not any(a.startswith("--resume") for a in calls[0]["argv"] + calls[1]["argv"])
    assert second.session_id != first.session_id
    assert f"--resume={second.session_id}" in calls[2]["argv"]


def test_a_failed_turn_exits_1_with_the_reason_on_stderr(cli: Cli) -> None:
    done = cli.run("[[error]]")
    assert done.returncode == 1
    assert "turn failed" in done.stderr and "API Error: Request rejected (429)" in done.stderr
    last = stream(done.stdout)[-1]
    assert isinstance(last, ResultLine) and last.is_error


def test_a_missing_claude_exits_1(cli: Cli) -> None:
    done = cli.run("hi", HIVE_CLAUDE_COMMAND=str(cli.tmp / "nope"))
    assert done.returncode == 1
    assert "cannot use the agent" in done.stderr
    (line,) = stream(done.stdout)
    assert isinstance(line, ResultLine) and line.is_error


def test_bad_configuration_exits_2_naming_the_variable(cli: Cli) -> None:
    done = cli.run("hi", HIVE_IDLE_TIMEOUT="soon", HIVE_CLAUDE_ARGS="not json")
    assert done.returncode == 2
    assert "HIVE_IDLE_TIMEOUT" in done.stderr and "HIVE_CLAUDE_ARGS" in done.stderr
    assert done.stdout == "" and cli.calls() == []


def test_bad_options_exit_2(cli: Cli) -> None:
    assert cli.run("--workdir", str(cli.tmp / "missing"), "hi").returncode == 2
    assert cli.run("--idle-timeout", "0", "hi").returncode == 2
    assert cli.run("--runtime", "other", "hi").returncode == 2


def test_options_override_the_environment(cli: Cli) -> None:
    other_work, other_state = cli.tmp / "elsewhere", cli.tmp / "state2"
    other_work.mkdir()
    done = cli.run("--workdir", str(other_work), "--state-dir", str(other_state), "hi")
    assert done.returncode == 0, done.stderr
    assert cli.calls()[0]["cwd"] == str(other_work)
    assert list((other_state / "transcripts").glob("*.jsonl"))
    assert not cli.state.exists()


def test_idle_timeout_option_stops_a_silent_turn(cli: Cli) -> None:
    done = cli.run("--idle-timeout", "0.5", "[[silent]]")
    assert done.returncode == 1
    assert "HIVE_IDLE_TIMEOUT" in done.stderr


def test_render_prints_readable_lines_on_stderr(cli: Cli) -> None:
    done = cli.run("--render", "[[tool]]")
    assert done.returncode == 0, done.stderr
    assert "● session " in done.stderr
    assert '» mcp__bash__run {"cmd": "ls"}' in done.stderr
    assert "✓ end_turn" in done.stderr
    assert "\x1b[" not in done.stderr  # not a terminal
    assert len(stream(done.stdout)) == 5  # stdout stays pure stream-json


def test_ctrl_c_interrupts_the_turn_cleanly_and_exits_130(cli: Cli) -> None:
    proc = subprocess.Popen(cli.argv("[[slow:200]]"), env=cli.env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen: list[StreamLine] = []
    try:
        while not any(isinstance(x, AssistantLine) for x in seen):
            raw = proc.stdout.readline()
            assert raw, "hyperhive turn ended before the turn started"
            seen.append(parse_line(raw))
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    last = stream(rest)[-1]
    assert isinstance(last, ResultLine) and last.stop_reason == "cancelled"
    (call,) = cli.calls()
    assert not Path(f"/proc/{call['pid']}").exists(), "the interrupted claude outlived hyperhive turn"
