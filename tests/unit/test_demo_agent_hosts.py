"""The demo agent across hosts (docs/hive-hosts.md): `ask <name>@<host>:`, a message from `name@host`
answered to that address, and the task marked with an id of another host's message."""

from __future__ import annotations

from hyperhive.demo_agent.plan import Wake, answer_mark, plan_wake
from tests.unit.test_demo_agent_plan import TASK_WAKE_BODY, call, hive_wake


def test_ask_takes_an_address_of_another_host() -> None:
    plan = plan_wake(Wake("operator", "ask bob@gpu: run: echo hi"))
    assert call(plan) == ("hyperhive", "message", {"to": "bob@gpu", "body": "run: echo hi"})
    assert "bob@gpu" in plan.before


def test_a_run_order_from_another_host_is_marked_and_its_end_answers_that_address() -> None:
    plan = plan_wake(hive_wake("alice@build", 3, "run: echo hi"))
    step = call(plan)
    assert step is not None and step[:2] == ("bash", "run") and step[2]["cmd"] == "echo hi  # answer alice@build.3"
    assert plan.answers == "alice@build.3"
    body = TASK_WAKE_BODY.replace('task"\n', 'task"  # answer alice@build.3\n', 1)
    assert answer_mark(body) == "alice@build.3"
    assert call(plan_wake(Wake("bash-task-3", body))) == (
        "hyperhive",
        "message",
        {"to": "alice@build", "reply_to": "alice@build.3", "body": "Task 3 finished: hello from a background task"},
    )


def test_an_answer_from_another_host_goes_to_the_operator_naming_its_address() -> None:
    plan = plan_wake(hive_wake("bob@gpu", 1, "Task 1 finished: hi", reply_to="alice@build.1", hop=2))
    assert call(plan) == ("hyperhive", "reply", {"body": "bob@gpu answered alice@build.1: Task 1 finished: hi"})
