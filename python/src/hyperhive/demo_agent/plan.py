"""What the demo agent does for a prompt, decided by the prompt alone (pure; the package's docstring lists it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from acp.schema import (
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    ToolKind,
)

DEMO_COMMAND = 'sleep 1; echo "hello from a background task"'
BASH = "bash"
HYPERHIVE = "hyperhive"

# A wake's header: `--- wake 17 from operator at 2026-12-01T06:40:12Z [3f9a61c2] ---` (tolerant: any `---`
# line naming `from <source>`; no line of a wake's text starts with `---`, each starts with `|`).
_HEADER = re.compile(r"^---.*?\bfrom (\S+).*$", re.MULTILINE)
_QUOTED = re.compile(r"^\| ?", re.MULTILINE)
_REMIND = re.compile(r"remind\s+(\d+(?:\.\d+)?)\s*s\s*:\s*(.*)", re.DOTALL | re.IGNORECASE)
_RUN = re.compile(r"run:\s*(.*)", re.DOTALL | re.IGNORECASE)

ContentBlock = (
    TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock | EmbeddedResourceContentBlock
)


@dataclass(frozen=True)
class Wake:
    source: str
    body: str


@dataclass(frozen=True)
class ToolStep:
    server: str
    tool: str
    arguments: dict[str, Any]
    kind: ToolKind = "other"


@dataclass(frozen=True)
class Plan:
    """One wake's answer: say `before`, call `tool` (if any), then say `after` (with `{result}` filled in)."""

    before: str
    tool: ToolStep | None = None
    after: str = ""


def parse_wakes(prompt: str) -> list[Wake]:
    """The wakes a harness prompt lists, in order; a prompt without wake headers is one operator message."""
    headers = list(_HEADER.finditer(prompt))
    if not headers:
        return [Wake("operator", prompt.strip())]
    wakes = []
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(prompt)
        wakes.append(Wake(match.group(1), _QUOTED.sub("", prompt[match.end() : end].strip())))
    return wakes


def last_output_line(body: str) -> str:
    """The last stdout line a task's wake quotes, else the wake's first line (`task 3 done (exit code 0): …`).

    The engine's wake body is `task … : CMD`, then `last stdout lines (N bytes in all):` and the lines,
    then a line pointing at `mcp__bash__status`.
    """
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("last stdout lines"):
            output = [x for x in lines[i + 1 :] if x.strip() and not x.startswith("mcp__bash__status")]
            if output:
                return output[-1].strip()
    return lines[0].strip() if lines else "(no output)"


def plan_wake(wake: Wake) -> Plan:
    """What the demo agent does for one wake (see the package's docstring)."""
    source, body = wake.source, wake.body
    if source == "operator":
        if remind := _REMIND.fullmatch(body):
            after, text = float(remind.group(1)), remind.group(2).strip() or "(no text)"
            return Plan(
                f"Setting a reminder for {after:g} s.",
                ToolStep(HYPERHIVE, "remind", {"after_secs": after, "body": text}),
                "Reminder set ({result}).",
            )
        run = _RUN.fullmatch(body)
        cmd = run.group(1).strip() if run and run.group(1).strip() else DEMO_COMMAND
        return Plan(
            "Starting a background task for you.",
            ToolStep(BASH, "run", {"cmd": cmd, "wait_seconds": 0}, kind="execute"),
            "It runs in the background ({result}); I will tell you when it is done.",
        )
    if source.startswith("bash-task-"):
        task = source.removeprefix("bash-task-")
        reply = f"Task {task} finished: {last_output_line(body)}"
        return Plan(f"Task {task} has ended; telling the operator.", ToolStep(HYPERHIVE, "reply", {"body": reply}))
    if source == "timer":
        reply = f"Reminder: {body}"
        return Plan("A reminder is due; telling the operator.", ToolStep(HYPERHIVE, "reply", {"body": reply}))
    return Plan(f"Noted the wake from {source}.")


def prompt_text(blocks: list[ContentBlock]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextContentBlock))
