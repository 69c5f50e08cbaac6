"""What the demo agent does for a prompt, decided by the prompt alone and by whether it runs as a sub-agent
(pure; the package's docstring lists it)."""

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
# `run: <cmd>` starts a task in the background; `run <N>s: <cmd>` waits up to N s for it (a turn that long).
_RUN = re.compile(r"run(?:\s+(\d+(?:\.\d+)?)\s*s)?\s*:\s*(.*)", re.DOTALL | re.IGNORECASE)
# `delegate: <task>`, or `delegate to <profile>: <task>` for a sub-agent of that profile.
_DELEGATE = re.compile(r"delegate(?:\s+to\s+([a-z][a-z0-9-]*))?:\s*(.*)", re.DOTALL | re.IGNORECASE)
# A sub-agent's first wake is the harness's preamble, then this line, then the task (harness/subagents.py).
_TASK_LINE = re.compile(r"^The task:[ \t]*$", re.MULTILINE)
SUBAGENT_PREFIX = "subagent-"
TASK_PREFIX = "bash-task-"

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


def task_of(body: str) -> str:
    """What a sub-agent's parent asks of it: the text after the line `The task:` of its first wake, or the
    whole of a follow-up message (which has no preamble)."""
    found = _TASK_LINE.search(body)
    return (body[found.end() :] if found else body).strip()


def first_line(text: str) -> str:
    """The first line that says something (a sub-agent's answer may open with blank lines)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "(nothing)")


def plan_wake(wake: Wake, *, subagent: bool = False) -> Plan:
    """What the demo agent does for one wake (see the package's docstring). A sub-agent (`subagent`) has
    no operator: what it would reply, it says, since the final text of its turn is its parent's answer."""
    source, body = wake.source, wake.body
    if source == "operator" and not subagent:
        return _order(body)
    if source in ("parent", "operator") and subagent:  # the operator may message a sub-agent (the web view)
        return _task(task_of(body))
    if source.startswith(TASK_PREFIX):
        task = source.removeprefix(TASK_PREFIX)
        return _tell(f"Task {task} finished: {last_output_line(body)}", f"Task {task} has ended", subagent)
    if source == "timer":
        return _tell(f"Reminder: {body}", "A reminder is due", subagent)
    if source.startswith(SUBAGENT_PREFIX):
        sub = source.removeprefix(SUBAGENT_PREFIX)
        return _tell(f"Sub-agent {sub} answered: {first_line(body)}", f"Sub-agent {sub} has answered", subagent)
    return Plan(f"Noted the wake from {source}.")


def _order(body: str) -> Plan:
    """The operator's message to the service's agent: delegate, remind, or run a background task."""
    if delegate := _DELEGATE.fullmatch(body):
        return _delegate(delegate.group(2).strip(), delegate.group(1))
    if remind := _REMIND.fullmatch(body):
        after, text = float(remind.group(1)), remind.group(2).strip() or "(no text)"
        return Plan(
            f"Setting a reminder for {after:g} s.",
            ToolStep(HYPERHIVE, "remind", {"after_secs": after, "body": text}),
            "Reminder set ({result}).",
        )
    return Plan(
        "Starting a background task for you.",
        _run_step(_RUN.fullmatch(body)),
        "It runs in the background ({result}); I will tell you when it is done.",
    )


def _task(task: str) -> Plan:
    """A sub-agent's task from its parent: run a command, delegate further, or answer at once."""
    if run := _RUN.fullmatch(task):
        return Plan(
            "Running the task's command in the background; I will answer when it ends.",
            _run_step(run),
            "It runs ({result}).",
        )
    if delegate := _DELEGATE.fullmatch(task):
        return _delegate(delegate.group(2).strip(), delegate.group(1))
    named = " ".join(task.split()) or "(nothing)"
    return Plan(f"Done with the task: {named if len(named) <= 200 else named[:199] + '…'}")


def _run_step(run: re.Match[str] | None) -> ToolStep:
    """`mcp__bash__run` for a `run:` order (the demo's own command without one or with an empty one)."""
    cmd = run.group(2).strip() if run and run.group(2).strip() else DEMO_COMMAND
    wait = float(run.group(1)) if run and run.group(1) else 0
    return ToolStep(BASH, "run", {"cmd": cmd, "wait_seconds": wait}, kind="execute")


def _delegate(task: str, profile: str | None = None) -> Plan:
    arguments: dict[str, Any] = {"task": task or "(no task)", "wait_seconds": 0}
    if profile is not None:
        arguments["profile"] = profile
    return Plan(
        "Delegating it to a sub-agent.", ToolStep(HYPERHIVE, "subagent_start", arguments), "Delegated ({result})."
    )


def _tell(news: str, what: str, subagent: bool) -> Plan:
    """Pass news on: a sub-agent says it (its answer), the service's agent replies to the operator."""
    if subagent:
        return Plan(news)
    return Plan(f"{what}; telling the operator.", ToolStep(HYPERHIVE, "reply", {"body": news}))


def prompt_text(blocks: list[ContentBlock]) -> str:
    return "\n".join(b.text for b in blocks if isinstance(b, TextContentBlock))
