"""What the demo agent does for a prompt, decided by the prompt alone and by whether it runs as a sub-agent
(pure; the package's docstring lists it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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
# A sub-agent's first wake is the harness's preamble, then this line, then the task (core/subagents.py).
_TASK_LINE = re.compile(r"^The task:[ \t]*$", re.MULTILINE)
SUBAGENT_PREFIX = "subagent-"
TASK_PREFIX = "bash-task-"
# The hive (docs/hive.md): `ask <name>: <order>` writes to another agent of the host (`ask <name>@<host>:`
# to one of another host, docs/hive-hosts.md); its messages come as wakes from `agent:<sender>` (hive/node.py,
# `wake_body`): a first line naming the message, its text, and a last line saying how to answer it.
AGENT_PREFIX = "agent:"
_NAME = r"[a-z][a-z0-9-]{0,31}"
_ADDRESS = rf"{_NAME}(?:@{_NAME})?"
_ASK = re.compile(rf"(?i:ask)\s+({_ADDRESS})\s*:\s*(.*)", re.DOTALL)
_MESSAGE_LINE = re.compile(r"message (\S+) from agent (\S+) \((.*)\):\s*")
_ANSWERING = re.compile(r"\banswering your (\S+?)(?:,|$)")
_HOW_TO_ANSWER = "[answer with "
# A task started for another agent's order carries whom to answer at the end of its command (`# answer
# alice.3`, `# answer alice@build.3`); its end's wake quotes the command on its first line.
_ANSWER_MARK = re.compile(rf"#\s*answer\s+({_ADDRESS})\.([1-9][0-9]{{0,17}})\s*$")
_FINISHED = re.compile(r"id=(\d+) ")

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
    """One wake's answer: say `before`, call `tool` (if any), then say `after` (with `{result}` filled in).

    `answers`: the id of another agent's message that the task this starts answers at its end; should the
    task end within the `run` call (no wake then tells of it), `answer_at_once` answers from its result."""

    before: str
    tool: ToolStep | None = None
    after: str = ""
    answers: str | None = None


@dataclass(frozen=True)
class HiveMessage:
    """A message from another agent, as its wake shows it."""

    id: str
    sender: str
    text: str
    answering: str | None  # the id of our message it answers


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
    if source.startswith(AGENT_PREFIX) and not subagent and (message := parse_message(body)) is not None:
        return _from_agent(message)
    if source.startswith(TASK_PREFIX):
        task = source.removeprefix(TASK_PREFIX)
        news = f"Task {task} finished: {last_output_line(body)}"
        if not subagent and (answers := answer_mark(body)) is not None:
            return _answer(answers, news, f"Task {task} has ended")
        return _tell(news, f"Task {task} has ended", subagent)
    if source == "timer":
        return _tell(f"Reminder: {body}", "A reminder is due", subagent)
    if source.startswith(SUBAGENT_PREFIX):
        sub = source.removeprefix(SUBAGENT_PREFIX)
        return _tell(f"Sub-agent {sub} answered: {first_line(body)}", f"Sub-agent {sub} has answered", subagent)
    return Plan(f"Noted the wake from {source}.")


def _order(body: str) -> Plan:
    """The operator's message to the service's agent: ask another agent, delegate, remind, or run a
    background task."""
    if ask := _ASK.fullmatch(body):
        name, order = ask.group(1), ask.group(2).strip() or "(no text)"
        return Plan(
            f"Asking agent {name}: {_shown(order)}",
            ToolStep(HYPERHIVE, "message", {"to": name, "body": order}),
            "Sent ({result}); its answer will wake me.",
        )
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


def parse_message(body: str) -> HiveMessage | None:
    """The message a wake from another agent carries (None: the body is not one, as hive/node.py writes)."""
    lines = body.splitlines()
    head = _MESSAGE_LINE.fullmatch(lines[0]) if lines else None
    if head is None:
        return None
    text = lines[1:]
    for i in range(len(text) - 1, -1, -1):  # its last `[answer with ...]` line, which ends every such wake
        if text[i].startswith(_HOW_TO_ANSWER):
            text = text[:i]
            break
    answering = _ANSWERING.search(head.group(3))
    return HiveMessage(head.group(1), head.group(2), "\n".join(text).strip(), answering and answering.group(1))


def answer_mark(body: str) -> str | None:
    """The message id a task's end answers: marked at the end of its command (`# answer alice.3`), which the
    wake quotes before its output (`task 3 done (exit code 0): <cmd>`, then `last stdout lines ...`)."""
    for line in body.splitlines():
        if line.startswith(("last stdout lines", "mcp__bash__status")):
            break
        if found := _ANSWER_MARK.search(line):
            return f"{found.group(1)}.{found.group(2)}"
    return None


def marked(cmd: str, answers: str) -> str:
    """`cmd`, marked to say that its end answers message `answers` (a shell comment: it runs the same)."""
    return f"{cmd}  # answer {answers}"


def _from_agent(message: HiveMessage) -> Plan:
    """Another agent's message: an answer to ours goes to the operator; a `run:` order runs in the
    background, answered at its end; anything else is answered at once."""
    if message.answering is not None:
        news = f"{message.sender} answered {message.answering}: {first_line(message.text)}"
        return Plan(
            f"Agent {message.sender} has answered; telling the operator.", ToolStep(HYPERHIVE, "reply", {"body": news})
        )
    if run := _RUN.fullmatch(message.text):
        step = _run_step(run)
        step = replace(step, arguments={**step.arguments, "cmd": marked(step.arguments["cmd"], message.id)})
        return Plan(
            f"Agent {message.sender} asks me to run a command; running it in the background, to answer at its end.",
            step,
            "It runs ({result}).",
            answers=message.id,
        )
    return _answer(message.id, f"Done with: {_shown(message.text)}", f"Agent {message.sender} wrote to me")


def _answer(message_id: str, body: str, what: str) -> Plan:
    """Answer another agent's message `message_id` (its sender is its id's prefix)."""
    to = message_id.rpartition(".")[0]
    return Plan(
        f"{what}; answering {to}.",
        ToolStep(HYPERHIVE, "message", {"to": to, "reply_to": message_id, "body": body}),
        "Answered ({result}).",
    )


def answer_at_once(plan: Plan, result: str) -> Plan | None:
    """When the task `plan` started for another agent ended within the `run` call (its result is the task's
    status, not `task started: ...`), the answer its end's wake would have made; None otherwise."""
    if plan.answers is None or result.startswith("task started"):
        return None
    found = _FINISHED.match(result)
    task = found.group(1) if found else "?"
    # format_view: `id=N done (exit code 0) 0.01s: <cmd>`, then `stdout (N bytes):` and the tail, then stderr.
    lines = result.splitlines()
    output = _section(lines, "stdout (")
    last = output[-1].strip() if output else (lines[0].strip() if lines else "(no output)")
    return _answer(plan.answers, f"Task {task} finished: {last}", f"Task {task} has ended already")


def _section(lines: list[str], head: str) -> list[str]:
    """The non-blank lines after the line starting with `head`, up to the `stderr` line."""
    for i, line in enumerate(lines):
        if line.startswith(head):
            rest = lines[i + 1 :]
            end = next((j for j, x in enumerate(rest) if x.startswith("stderr")), len(rest))
            return [x for x in rest[:end] if x.strip()]
    return []


def _shown(text: str) -> str:
    """Text on one line, bounded."""
    named = " ".join(text.split()) or "(nothing)"
    return named if len(named) <= 200 else named[:199] + "…"


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
    return Plan(f"Done with the task: {_shown(task)}")


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
