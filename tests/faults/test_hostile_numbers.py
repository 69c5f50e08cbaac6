"""Numbers from outside, in every place the web view reads one (issue 24, item 10): digits that pass
`str.isdigit()` but not `int()` ('²') and digits `int()` takes but nobody types ('٣') answered 500 and logged a
traceback. Each is read by one strict helper (hyperhive/numbers.py): ASCII digits, bounded, else refused or
ignored as the place says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.faults.conftest import Record
from tests.faults.test_hostile_web import Web
from tests.process.harness_service import running_service

pytestmark = pytest.mark.timeout(120)

ODD = ["²", "٣", "１", "+7", " 7", "1_0", "9" * 40]


def csrf_of(page: bytes) -> str:
    found = re.search(rb'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:400]
    return found.group(1).decode()


def test_unicode_and_odd_digits_anywhere_a_number_is_read_answer_as_a_bad_number_never_500(
    tmp_path: Path, record: Record
) -> None:
    with running_service(tmp_path, HIVE_WEB_PORT="0") as svc:
        web = Web(svc)
        csrf = csrf_of(web.ask("GET", "/").body)
        statuses: dict[str, set[int]] = {}
        for odd in ODD:
            q = odd.encode().hex()
            quoted = "".join(f"%{q[i : i + 2]}" for i in range(0, len(q), 2))
            asked = {
                "page note": web.ask("GET", f"/?done=killed&id={quoted}"),
                "paging": web.ask("GET", f"/turns?before={quoted}&n={quoted}&agent={quoted}"),
                "outbox paging": web.ask("GET", f"/outbox?before={quoted}&n={quoted}"),
                "resume id": web.ask("GET", "/events", extra=(f"Last-Event-ID: x-{odd}",)),
            }
            for name, path in {"kill": "/tasks/kill", "cancel": "/subagents/cancel", "turn": "/cancel-turn"}.items():
                field = "turn" if name == "turn" else "id"
                form = f"csrf={csrf}&{field}={quoted}".encode()
                asked[f"form {name}"] = web.ask("POST", path, body=form, content_type=True)
            for name, answer in asked.items():
                statuses.setdefault(name, set()).add(answer.status)
        assert "Traceback" not in svc.text() and "ERROR" not in svc.text(), svc.text()[-3000:]
        assert svc.status()["state"] == "idle"
    assert not any(500 in s or -1 in s for s in statuses.values()), statuses
    assert statuses["form kill"] <= {400, 303}, statuses
    record(
        f"{len(ODD)} odd numbers ({', '.join(repr(o) for o in ODD)}) in every place the web view reads one: a "
        "page's note, the history's and the outbox's paging, the stream's Last-Event-ID, the kill, cancel and "
        "cancel-turn forms",
        "each answered as a bad number (a form 400, a page drawn without it), never 500; no traceback logged",
        ", ".join(f"{name} {sorted(s)}" for name, s in sorted(statuses.items()))
        + " (before: '²' answered 500 and logged a traceback in each)",
    )
