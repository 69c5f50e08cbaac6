"""A state directory that is in the way: the service's start refused in one line, the operator's reads kept.

Issue 16, item 12 and what was seen beside it:

- `hyperhive agent` against a directory where `token`, `http.json` or `harness.sock` should be, or a state
  directory whose socket path is over the 107 bytes a Unix socket allows, ended in a traceback and exit 1
  (which systemd retries); with a file where `transcripts/` should be, or a directory for `claude-mcp.json`,
  it started and failed later. Every path of the layout (statedir/layout.py names each, with its kind) is tried
  here in the wrong kind, and a few more ways (a symlink, a FIFO that blocked the start for ever).
- On a read-only state directory even `status`, `outbox` and `tasks` failed; on a full one offline `status`
  said "disk I/O error". Reading must work when the file can be read; a write says what stops it.
- `hyperhive tail` read a 264 MB transcript whole (565 MB) and printed 91 MB; it reads back from the end.

Mounts: a read-only bind mount of the state directory and a small tmpfs filled up (root, as
test_resource_limits.py's full-disk tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hyperhive.statedir.directory import make_dirs
from hyperhive.statedir.layout import DEMO_LOG, DEMO_WORK, LAYOUT, TOKEN, Entry
from tests.faults.conftest import Record
from tests.faults.test_resource_limits import fill, needs_mount, tmpfs
from tests.process.harness_service import service_env

START_TIMEOUT = 30.0
# Made by `hyperhive demo` in its own temporary state directory, never by the service.
DEMO_ONLY = {DEMO_LOG, DEMO_WORK}


def env_in(base: Path, **extra: str) -> dict[str, str]:
    """The service's environment with everything under `base` (made here)."""
    base.mkdir(parents=True, exist_ok=True)
    return service_env(base, HIVE_CGROUP="off", **extra)


def run(env: dict[str, str], *args: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hyperhive", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str | None:
    """The error line of a command that failed as it should: exactly one line on stderr, `hyperhive: …`."""
    lines = proc.stderr.strip().splitlines()
    if len(lines) == 1 and lines[0].startswith("hyperhive: ") and "Traceback" not in proc.stderr:
        return lines[0]
    return None


# -- the service's start ------------------------------------------------------------------------------


def _wrong_kind(entry: Entry) -> Callable[[Path], None]:
    """Put the other kind of thing where `entry` belongs: a directory (not empty) for a file or a socket, a
    file for a directory."""

    def plant(path: Path) -> None:
        make_dirs(path.parent)
        if entry.kind == "dir":
            path.write_text("not a directory\n")
        else:
            path.mkdir(mode=0o700)
            (path / "keep").write_text("in the way\n")

    return plant


def _symlink(path: Path) -> None:
    target = path.parent.parent / "elsewhere"
    target.write_text("a token from somewhere else 0123456789\n")
    target.chmod(0o600)
    path.symlink_to(target)


def _fifo(path: Path) -> None:
    os.mkfifo(path, 0o600)


def start_cases() -> dict[str, tuple[str, Callable[[Path], None]]]:
    """Each case: the path (relative to the state directory) and what to put there."""
    cases: dict[str, tuple[str, Callable[[Path], None]]] = {}
    for entry in LAYOUT:
        if "*" in entry.pattern or entry.pattern in DEMO_ONLY:
            continue
        other = "a file" if entry.kind == "dir" else "a directory"
        cases[f"{other} as {entry.pattern} ({entry.what})"] = (entry.pattern, _wrong_kind(entry))
    cases[f"a symlink as {TOKEN}"] = (TOKEN, _symlink)
    cases[f"a FIFO as {TOKEN}"] = (TOKEN, _fifo)
    return cases


def test_every_unusable_path_ends_the_services_start_in_one_line_and_exit_3(tmp_path: Path, record: Record) -> None:
    refused: dict[str, str] = {}
    wrong: dict[str, str] = {}
    slowest = 0.0
    for i, (case, (relative, plant)) in enumerate(start_cases().items()):
        env = env_in(tmp_path / f"case{i}")
        state = Path(env["HIVE_STATE_DIR"])
        state.mkdir(mode=0o700)
        plant(state.joinpath(*relative.split("/")))
        started = time.monotonic()
        try:
            proc = run(env, "agent")
        except subprocess.TimeoutExpired:
            wrong[case] = f"still starting after {START_TIMEOUT:g} s"
            continue
        slowest = max(slowest, time.monotonic() - started)
        line = one_line(proc)
        if proc.returncode == 3 and line is not None and relative.split("/")[-1] in line:
            refused[case] = line
        else:
            wrong[case] = f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
    # A state directory so deep that its socket's path cannot be bound (sun_path: 107 bytes and a NUL).
    env = env_in(tmp_path / "deep", HIVE_STATE_DIR=str(tmp_path / "deep" / ("d" * 100) / "state"))
    proc = run(env, "agent")
    line = one_line(proc)
    if proc.returncode == 3 and line is not None and "107" in line:
        refused["a state directory whose socket path is over 107 bytes"] = line
    else:
        wrong["a state directory whose socket path is over 107 bytes"] = f"exit {proc.returncode}: {proc.stderr[-600:]}"
    assert not wrong, "\n\n".join(f"{case}:\n{why}" for case, why in wrong.items())
    record(
        "`hyperhive agent` where a path of the state directory is unusable: each path of the layout "
        "(statedir/layout.py) as the other kind (a directory for a file or the socket, a file for a folder), "
        "the token as a symlink and as a FIFO, and a state directory whose socket path is over 107 bytes",
        "each refused at start with one line naming the path, what is there and the fix, exit 3 (no traceback, "
        "no exit 1 for systemd to retry, no start that fails later, no start blocked on the FIFO)",
        f"{len(refused)} of {len(refused) + len(wrong)} refused in one line, exit 3, slowest {slowest:.1f} s (on "
        "main 12 of these 15 were not: a traceback and exit 1 for the token, http.json, harness.sock and the long "
        "path; transcripts/ and claude-mcp.json started anyway; the FIFO held the start; five exited 3 without "
        "naming the path, or with a raw OSError)",
    )


# -- reading a state directory that cannot be written --------------------------------------------------

_WRITE_STATE = """
import os, signal, sys
from pathlib import Path
from hyperhive.store.tables import Tables
from hyperhive.store.database import Store
from hyperhive.store.tasks import TaskTable
records = Tables(Store(Path(sys.argv[1])))
records.wakes.add("operator", "please look at the logs")
records.outbox.add("agent", "the logs are clean")
task = TaskTable(records.store).create("grep -c error app.log", "/", None, os.getpid(), "0")
TaskTable(records.store).mark_running(task.id, os.getpid(), "0", 1.0)
if sys.argv[2] == "crash":
    os.kill(os.getpid(), signal.SIGKILL)  # the -wal and -shm stay, as after a crash or beside a live service
records.store.close()
"""


def write_state(state: Path, how: str) -> None:
    """A state directory with a wake, a reply, a task and a transcript; `how`: `clean` (closed: the database
    file alone) or `crash` (killed: its -wal and -shm left beside it)."""
    subprocess.run([sys.executable, "-c", _WRITE_STATE, str(state / "hyperhive.db"), how], check=False, timeout=60)
    assert (state / "hyperhive.db-wal").exists() == (how == "crash"), sorted(p.name for p in state.iterdir())
    make_dirs(state / "transcripts")
    lines = [
        {
            "type": "assistant",
            "session_id": "s1",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "the logs are clean"}]},
        },
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "session_id": "s1",
            "result": "ok",
            "duration_ms": 1200,
            "stop_reason": "end_turn",
        },
    ]
    (state / "transcripts" / "s1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` bind-mounted read-only over itself, unmounted however the test ends."""
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


READS = {
    "status": ("status",),
    "status --json": ("status", "--json"),
    "outbox": ("outbox",),
    "tasks": ("tasks",),
    "tasks show": ("tasks", "show", "1"),
    "tail": ("tail",),
}
# What each read must show of the state written above.
SHOWN = {
    "status": "1 waiting",
    "status --json": '"waiting": 1',
    "outbox": "the logs are clean",
    "tasks": "grep -c error app.log",
    "tasks show": "grep -c error app.log",
    "tail": "the logs are clean",
}


def _reads(env: dict[str, str]) -> tuple[dict[str, str], subprocess.CompletedProcess[str]]:
    """Each read's problem (none when it showed the state), and what `send` answered."""
    problems = {}
    for name, args in READS.items():
        proc = run(env, *args)
        if proc.returncode != 0 or SHOWN[name] not in proc.stdout:
            problems[name] = f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}"
    return problems, run(env, "send", "are you there?")


@needs_mount
def test_a_read_only_or_full_state_directory_is_still_read_and_a_send_says_why_not(
    tmp_path: Path, record: Record
) -> None:
    failures: dict[str, str] = {}
    for how in ("clean", "crash"):
        # Read-only: a bind mount of the state directory.
        env = env_in(tmp_path / f"ro-{how}")
        state = Path(env["HIVE_STATE_DIR"])
        state.mkdir(mode=0o700)
        write_state(state, how)
        with read_only(state):
            problems, sent = _reads(env)
        line = one_line(sent)
        if sent.returncode != 3 or line is None or "read-only" not in line:
            problems["send"] = f"exit {sent.returncode}: {sent.stderr.strip()[-300:]}"
        failures.update({f"read-only, {how}: {k}": v for k, v in problems.items()})
        # Full: a small tmpfs, filled once the state is written.
        env = env_in(tmp_path / f"full-{how}")
        state = Path(env["HIVE_STATE_DIR"])
        with tmpfs(state, "2m"):
            write_state(state, how)
            fill(state / "filler")
            problems, sent = _reads(env)
            line = one_line(sent)
            if sent.returncode != 3 or line is None or "no space left" not in line:
                problems["send"] = f"exit {sent.returncode}: {sent.stderr.strip()[-300:]}"
            status = run(env, "status").stdout
            if "no space left" not in status:
                problems["status names the full disk"] = status
        failures.update({f"full, {how}: {k}": v for k, v in problems.items()})
    assert not failures, "\n".join(f"{k}: {v}" for k, v in failures.items())
    record(
        "the operator's commands on a state directory that cannot be written: a read-only bind mount, and a full "
        "tmpfs; each with the database closed cleanly (the file alone) and after a crash (-wal and -shm left)",
        "`status` (text and JSON), `outbox`, `tasks`, `tasks show` and `tail` read it all, exit 0 (the database "
        "opened read-only when it cannot be written; offline `status` says so and why); `send` refuses in one "
        "line naming the cause, exit 3: 'read-only' or 'no space left' (it said 'disk I/O error')",
        f"{len(READS)} reads × 4 states, all shown, exit 0; send refused in one line, exit 3, naming 'read-only' "
        "and 'no space left' (offline status said 'disk I/O error'; every read failed on the read-only mount)",
    )


# -- a huge transcript --------------------------------------------------------------------------------

TRANSCRIPT_MB = 264
BLOCK_CHARS = 900 * 1024


def write_transcript(path: Path) -> int:
    """A transcript of about TRANSCRIPT_MB MB: text blocks of 900 KiB (as an agent flooding text writes them),
    then a result line; its size."""
    make_dirs(path.parent)
    text = ("all work and no play " * (BLOCK_CHARS // 21))[:BLOCK_CHARS]
    with path.open("w") as f:
        n = 0
        while f.tell() < TRANSCRIPT_MB * 1_000_000:
            block = {"type": "text", "text": f"block {n}: {text}"}
            f.write(
                json.dumps(
                    {"type": "assistant", "session_id": "s1", "message": {"role": "assistant", "content": [block]}}
                )
                + "\n"
            )
            n += 1
        f.write(
            json.dumps(
                {
                    "type": "result",
                    "subtype": "success",
                    "is_error": False,
                    "session_id": "s1",
                    "result": "the end",
                    "duration_ms": 4200,
                    "stop_reason": "end_turn",
                }
            )
            + "\n"
        )
    return path.stat().st_size


# Started from a small process of its own: a child's peak RSS (ru_maxrss) starts at its parent's RSS when it
# was forked, and the test process grows over a session (the whole fault suite in one: 167 MiB "for tail").
_MEASURE = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, s, u = os.wait4(p.pid, 0); "
    "sys.stderr.write(f'\\n@maxrss {u.ru_maxrss}\\n'); sys.exit(os.waitstatus_to_exitcode(s))"
)


def measured(env: dict[str, str], *args: str) -> tuple[int, int, str, int]:
    """Run the CLI; its exit status, peak RSS in KiB, stderr, and the bytes it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "hyperhive", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    printed = 0
    assert proc.stdout is not None and proc.stderr is not None
    while chunk := proc.stdout.read(1 << 20):
        printed += len(chunk)
    err, _, rss = proc.stderr.read().decode(errors="replace").rpartition("\n@maxrss ")
    proc.wait()
    return proc.returncode, int(rss), err.rstrip("\n") + "\n", printed


def test_tail_of_a_huge_transcript_shows_its_end_in_bounded_memory(tmp_path: Path, record: Record) -> None:
    env = env_in(tmp_path)
    state = Path(env["HIVE_STATE_DIR"])
    state.mkdir(mode=0o700)
    write_state(state, "clean")
    size = write_transcript(state / "transcripts" / "zz-huge.jsonl")
    started = time.monotonic()
    code, rss_kib, err, printed = measured(env, "tail")
    took = time.monotonic() - started
    assert code == 0, err
    # Reading the whole file peaked at 537 MiB; bounded, 69 to 121 MiB were seen (the CLI's own imports count).
    assert rss_kib < 200 * 1024, f"tail peaked at {rss_kib // 1024} MiB for a {size // 1_000_000} MB transcript"
    assert printed < 4 * 1024 * 1024, f"tail printed {printed} bytes"
    assert "earlier" in err or "before" in err, f"tail did not say that lines were left out: {err!r}"
    # More on request: a larger --bytes shows more of the end, still bounded by it.
    more_code, more_rss, more_err, more_printed = measured(env, "tail", "-n", "20", "--bytes", "16M")
    assert more_code == 0 and more_printed > printed and more_rss < 160 * 1024, (more_code, more_err, more_rss)
    last = run(env, "tail", "-n", "1").stdout
    assert "end_turn" in last, last
    record(
        f"`hyperhive tail` on a {size // 1_000_000} MB transcript of 900 KiB text blocks",
        "it shows the end (the last lines within --bytes, 2 MiB by default; -n and --bytes for more), read "
        "back from the end: memory bounded by --bytes, not by the file; it says when lines were left out",
        f"peak RSS {rss_kib // 1024} MiB, printed {printed / 1e6:.1f} MB in {took:.1f} s; with -n 20 --bytes 16M: "
        f"{more_rss // 1024} MiB, {more_printed / 1e6:.1f} MB (on main: 537 MiB, 183 MB printed)",
    )
