"""What the demo agent does for a prompt (demo_agent/plan.py, pure), and how a session knows it is a
sub-agent's (from the MCP servers it was given alone)."""

from __future__ import annotations

from acp.schema import EnvVariable, HttpMcpServer, McpServerStdio

from hyperhive.demo_agent.agent import Session
from hyperhive.demo_agent.plan import (
    DEMO_COMMAND,
    HiveMessage,
    Plan,
    Wake,
    answer_at_once,
    answer_mark,
    last_output_line,
    parse_message,
    parse_wakes,
    plan_wake,
    task_of,
)
from hyperhive.hive.envelope import Message
from hyperhive.hive.node import wake_body

TASK_WAKE_BODY = """task 3 done (exit code 0): sleep 1; echo "hello from a background task"
last stdout lines (29 bytes in all):
hello from a background task
mcp__bash__status(id=3) shows the full status."""

# The first wake of a sub-agent as the harness writes it (core/subagents.py, `_first_prompt`).
PREAMBLE = (
    "You are a sub-agent, started by the service's agent to do the task below. You work in /srv/work. Your "
    "final message in each turn is your answer. You cannot start sub-agents of your own.\n\nThe task:\n"
)


def call(plan: Plan) -> tuple[str, str, dict[str, object]] | None:
    return None if plan.tool is None else (plan.tool.server, plan.tool.tool, plan.tool.arguments)


# -- the prompt ------------------------------------------------------------------------------------------


def test_wakes_are_split_at_their_headers_and_name_their_source() -> None:
    prompt = (
        "[hyperhive] 2 wakes.\n\n--- wake 17 from operator at 2026-12-01T06:40:12Z ---\nPlease run it.\n\n"
        "--- wake 18 from bash-task-3 at 2026-12-01T06:40:15Z ---\ntask 3 done\n"
    )
    assert parse_wakes(prompt) == [Wake("operator", "Please run it."), Wake("bash-task-3", "task 3 done")]


def test_a_prompt_without_wake_headers_is_one_operator_message() -> None:
    assert parse_wakes("  hello there \n") == [Wake("operator", "hello there")]


def test_task_wake_quotes_the_last_stdout_line_not_the_status_pointer() -> None:
    assert last_output_line(TASK_WAKE_BODY) == "hello from a background task"


def test_task_wake_without_output_quotes_its_first_line() -> None:
    assert last_output_line("task 4 done (exit code 1): false\nmcp__bash__status(id=4) …") == (
        "task 4 done (exit code 1): false"
    )


# -- the service's agent ---------------------------------------------------------------------------------


def test_operator_messages_choose_the_tool() -> None:
    default = plan_wake(Wake("operator", "Please run a background task."))
    run = plan_wake(Wake("operator", "run: ls -l"))
    remind = plan_wake(Wake("operator", "remind 2s: stretch"))
    assert call(default) == ("bash", "run", {"cmd": DEMO_COMMAND, "wait_seconds": 0})
    assert call(run) == ("bash", "run", {"cmd": "ls -l", "wait_seconds": 0})
    assert call(remind) == ("hyperhive", "remind", {"after_secs": 2.0, "body": "stretch"})


def test_run_with_seconds_waits_that_long_for_the_task() -> None:
    assert call(plan_wake(Wake("operator", "run 20s: sleep 60"))) == (
        "bash",
        "run",
        {"cmd": "sleep 60", "wait_seconds": 20.0},
    )
    sub = plan_wake(Wake("parent", PREAMBLE + "run 2.5s: make"), subagent=True)
    assert call(sub) == ("bash", "run", {"cmd": "make", "wait_seconds": 2.5})


def test_delegate_starts_a_sub_agent_on_the_rest_without_waiting() -> None:
    plan = plan_wake(Wake("operator", 'delegate: run: sleep 1; echo "hi"'))
    assert call(plan) == ("hyperhive", "subagent_start", {"task": 'run: sleep 1; echo "hi"', "wait_seconds": 0})


def test_delegate_to_a_profile_names_it() -> None:
    plan = plan_wake(Wake("operator", "delegate to helper: run: make"))
    assert call(plan) == ("hyperhive", "subagent_start", {"task": "run: make", "wait_seconds": 0, "profile": "helper"})


def test_timer_wake_is_replied_as_a_reminder() -> None:
    assert call(plan_wake(Wake("timer", "stretch"))) == ("hyperhive", "reply", {"body": "Reminder: stretch"})


def test_task_wake_is_replied_to_the_operator() -> None:
    plan = plan_wake(Wake("bash-task-3", TASK_WAKE_BODY))
    assert call(plan) == ("hyperhive", "reply", {"body": "Task 3 finished: hello from a background task"})


def test_a_sub_agents_answer_is_relayed_by_its_first_line() -> None:
    plan = plan_wake(Wake("subagent-4", "\nTask 2 finished: hello\n\nmore of the answer"))
    assert call(plan) == ("hyperhive", "reply", {"body": "Sub-agent 4 answered: Task 2 finished: hello"})


def test_a_parent_wake_to_the_services_agent_is_only_noted() -> None:
    plan = plan_wake(Wake("parent", PREAMBLE + "run: ls"))
    assert plan.tool is None and plan.before == "Noted the wake from parent."


# -- the hive: other agents of the host ------------------------------------------------------------------


def hive_wake(sender: str, number: int, body: str, *, reply_to: str | None = None, hop: int = 1) -> Wake:
    """The wake a message from `sender` is to its recipient, as hive/node.py writes it, read back from a
    prompt (its lines quoted after `| `, as core/prompt.py does)."""
    mid = f"{sender}.{number}"
    message = Message(
        id=mid,
        sender=sender,
        recipient="bob" if sender != "bob" else "alice",
        conversation=reply_to or mid,
        hop=hop,
        reply_to=reply_to,
        body=body,
        sent_at=0.0,
    )
    quoted = "\n".join(f"| {line}" if line else "|" for line in wake_body(message).split("\n"))
    prompt = f"[hyperhive] 1 wake.\n\n--- wake 7 from agent:{sender} at 2026-12-01T06:40:12Z [3f9a61c2] ---\n{quoted}"
    [wake] = parse_wakes(prompt)
    assert wake.source == f"agent:{sender}"
    return wake


def test_ask_writes_the_order_to_the_named_agent() -> None:
    plan = plan_wake(Wake("operator", "ask bob: run: echo hi"))
    assert call(plan) == ("hyperhive", "message", {"to": "bob", "body": "run: echo hi"})
    assert "bob" in plan.before and "{result}" in plan.after


def test_ask_is_not_taken_for_another_order_and_keeps_a_multi_line_order_whole() -> None:
    plan = plan_wake(Wake("operator", "Ask build-box:  make\nmake test "))
    assert call(plan) == ("hyperhive", "message", {"to": "build-box", "body": "make\nmake test"})
    assert call(plan_wake(Wake("operator", "please ask bob: x")))[:2] == ("bash", "run")  # type: ignore[index]


def test_a_message_wake_is_read_as_node_writes_it() -> None:
    wake = hive_wake("alice", 3, 'run: sleep 1; echo "hi"\nsecond line')
    assert parse_message(wake.body) == HiveMessage("alice.3", "alice", 'run: sleep 1; echo "hi"\nsecond line', None)
    answer = hive_wake("bob", 1, "Task 1 finished: hi\nmore", reply_to="alice.3", hop=2)
    assert parse_message(answer.body) == HiveMessage("bob.1", "bob", "Task 1 finished: hi\nmore", "alice.3")
    assert parse_message("message, but not one") is None


def test_an_answer_to_our_message_is_passed_to_the_operator() -> None:
    plan = plan_wake(hive_wake("bob", 1, "Task 1 finished: hello\nmore of it", reply_to="alice.1", hop=2))
    assert call(plan) == ("hyperhive", "reply", {"body": "bob answered alice.1: Task 1 finished: hello"})


def test_a_run_order_from_an_agent_runs_in_the_background_marked_with_whom_to_answer() -> None:
    plan = plan_wake(hive_wake("alice", 1, 'run: sleep 1; echo "hello from bob\'s task"'))
    assert call(plan) == (
        "bash",
        "run",
        {"cmd": 'sleep 1; echo "hello from bob\'s task"  # answer alice.1', "wait_seconds": 0},
    )
    assert plan.answers == "alice.1"


def test_any_other_message_is_answered_at_once() -> None:
    plan = plan_wake(hive_wake("alice", 4, "what is\nthe time?"))
    assert call(plan) == (
        "hyperhive",
        "message",
        {"to": "alice", "reply_to": "alice.4", "body": "Done with: what is the time?"},
    )


def test_the_end_of_a_task_run_for_an_agent_answers_that_agent_not_the_operator() -> None:
    body = TASK_WAKE_BODY.replace('task"\n', 'task"  # answer alice.12\n', 1)
    assert answer_mark(body) == "alice.12"
    plan = plan_wake(Wake("bash-task-3", body))
    assert call(plan) == (
        "hyperhive",
        "message",
        {"to": "alice", "reply_to": "alice.12", "body": "Task 3 finished: hello from a background task"},
    )


def test_a_mark_in_a_tasks_output_is_not_whom_it_answers() -> None:
    body = TASK_WAKE_BODY.replace("hello from a background task\nmcp", "# answer alice.1\nmcp")
    assert answer_mark(body) is None
    assert call(plan_wake(Wake("bash-task-3", body)))[1] == "reply"  # type: ignore[index]


def test_a_task_for_an_agent_that_ended_within_the_run_call_is_answered_at_once() -> None:
    plan = plan_wake(hive_wake("alice", 2, "run: echo hi"))
    started = "task started: id=5\nIt is still running; you will be woken when it ends"
    assert answer_at_once(plan, started) is None
    ended = "id=5 done (exit code 0) 0.01s: echo hi  # answer alice.2\nstdout (3 bytes):\nhi\nstderr: (empty)"
    then = answer_at_once(plan, ended)
    assert then is not None and call(then) == (
        "hyperhive",
        "message",
        {"to": "alice", "reply_to": "alice.2", "body": "Task 5 finished: hi"},
    )
    assert answer_at_once(plan_wake(Wake("operator", "run: echo hi")), ended) is None, "the operator's: a wake"


def test_a_sub_agent_only_notes_an_agents_message() -> None:
    plan = plan_wake(hive_wake("alice", 1, "run: ls"), subagent=True)
    assert plan.tool is None and plan.before == "Noted the wake from agent:alice."


def test_a_wake_from_an_agent_that_is_no_message_is_only_noted() -> None:
    assert call(plan_wake(Wake("agent:alice", "something else"))) is None


# -- a sub-agent -----------------------------------------------------------------------------------------


def test_the_task_is_what_follows_the_task_line_or_the_whole_follow_up() -> None:
    assert task_of(PREAMBLE + "run: ls\n") == "run: ls"
    assert task_of("  and now the rest  ") == "and now the rest"


def test_a_sub_agent_runs_its_tasks_command_in_the_background() -> None:
    plan = plan_wake(Wake("parent", PREAMBLE + 'run: sleep 1; echo "hi"'), subagent=True)
    assert call(plan) == ("bash", "run", {"cmd": 'sleep 1; echo "hi"', "wait_seconds": 0})


def test_a_sub_agent_delegates_further_when_its_task_says_so() -> None:
    plan = plan_wake(Wake("parent", PREAMBLE + "delegate: count the files"), subagent=True)
    assert call(plan) == ("hyperhive", "subagent_start", {"task": "count the files", "wait_seconds": 0})


def test_any_other_task_is_answered_with_a_sentence_naming_it() -> None:
    plan = plan_wake(Wake("parent", PREAMBLE + "summarise\nthe README"), subagent=True)
    assert plan.tool is None and plan.before == "Done with the task: summarise the README"


def test_a_sub_agent_says_what_the_services_agent_would_reply_and_never_replies() -> None:
    sub = [
        plan_wake(Wake("bash-task-3", TASK_WAKE_BODY), subagent=True),
        plan_wake(Wake("timer", "stretch"), subagent=True),
        plan_wake(Wake("subagent-9", "done"), subagent=True),
    ]
    assert [(p.tool, p.before) for p in sub] == [
        (None, "Task 3 finished: hello from a background task"),
        (None, "Reminder: stretch"),
        (None, "Sub-agent 9 answered: done"),
    ]


def test_a_sub_agent_does_what_the_operator_messages_it_as_it_does_its_parents_task() -> None:
    # Only the service writes such a wake: the operator messaging a sub-agent from the web view
    # (Subagents.message as the operator); an agent's message to its sub-agent comes from `parent`.
    plan = plan_wake(Wake("operator", "run: echo hi"), subagent=True)
    assert plan.tool is not None and plan.tool.arguments["cmd"] == "echo hi"


# -- which a session is ----------------------------------------------------------------------------------


def bash(**env: str) -> McpServerStdio:
    variables = [EnvVariable(name=k, value=v) for k, v in env.items()]
    return McpServerStdio(name="bash", command="hyperhive", args=["bash-mcp"], env=variables)


def test_a_session_is_a_sub_agents_when_its_bash_server_speaks_for_an_agent_id() -> None:
    hive = HttpMcpServer(type="http", name="hyperhive", url="http://127.0.0.1:1/mcp", headers=[])
    assert Session.given("/w", [bash(HIVE_AGENT_ID="3", HIVE_SOCKET="/s"), hive]).subagent
    assert not Session.given("/w", [bash(HIVE_SOCKET="/s"), hive]).subagent
    assert not Session.given("/w", []).subagent
    other = McpServerStdio(name="tools", command="x", args=[], env=[EnvVariable(name="HIVE_AGENT_ID", value="3")])
    assert not Session.given("/w", [other]).subagent, "only the bash server says whose tasks they are"
