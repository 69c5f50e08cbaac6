"""`hyperhive send` stores its wake exactly once, even when the service stored it and died before answering.

Found by the crash rounds (tests/faults/test_crash_rounds.py): the service committed the wake, was killed
before its answer went out, and the CLI, seeing the connection close without an answer, took the service
for down and stored the wake itself: the operator's message was delivered twice. Since issue 23 a `send`
answered `busy` is asked again: with the same id, so that this still holds when the answer lost is a
repeat's.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hyperhive.store.database import Store
from hyperhive.store.wakes import WakeTable


def test_a_wake_stored_under_a_request_id_is_stored_once(tmp_path: Path) -> None:
    with Store(tmp_path / "hyperhive.db") as store:
        first = WakeTable(store).add("operator", "hello", request_id="r-1")
        again = WakeTable(store).add("operator", "hello", request_id="r-1")
        other = WakeTable(store).add("operator", "hello", request_id="r-2")
        plain = [WakeTable(store).add("operator", "hello"), WakeTable(store).add("operator", "hello")]
        assert again.id == first.id and again.request_id == "r-1"
        assert len({first.id, other.id, *(w.id for w in plain)}) == 4


BUSY = b'{"ok":false,"kind":"busy","error":"the service already serves 32 other requests at once"}\n'


def _service_that_dies_after_storing(
    state: Path, ready: threading.Event, seen: list[dict[str, object]], busy: int = 0
) -> None:
    """Answers `busy` to the first `busy` sends; takes the next, stores its wake as the service does, then
    closes without answering (killed)."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(state / "harness.sock"))
        server.listen(1)
        ready.set()
        while True:
            conn, _ = server.accept()
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    data += conn.recv(65536)
                request = json.loads(data)
                seen.append(request)
                if len(seen) <= busy:
                    conn.sendall(BUSY)
                    continue
                with Store(state / "hyperhive.db") as store:
                    WakeTable(store).add(request["from"], request["body"], request_id=request.get("request_id"))
                break
    (state / "harness.sock").unlink()


@pytest.mark.parametrize("busy", [0, 3], ids=["first", "after-busy"])
def test_send_whose_answer_is_lost_after_the_wake_was_stored_stores_it_once(tmp_path: Path, busy: int) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    Store(state / "hyperhive.db").close()
    ready, seen = threading.Event(), []  # type: ignore[var-annotated]
    service = threading.Thread(target=_service_that_dies_after_storing, args=(state, ready, seen, busy), daemon=True)
    service.start()
    assert ready.wait(10)
    env = {"PATH": "/usr/bin:/bin", "HIVE_STATE_DIR": str(state), "HIVE_WORKDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "hyperhive", "send", "only once, please"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    service.join(10)
    assert result.returncode == 0, result.stderr
    assert ("asking again for up to" in result.stderr) == bool(busy), result.stderr
    assert len(seen) == busy + 1 and isinstance(seen[0].get("request_id"), str)
    # Asked again after each `busy` with the same id, which is what finds the stored wake.
    assert len({str(r["request_id"]) for r in seen}) == 1 and len({json.dumps(r) for r in seen}) == 1
    with Store(state / "hyperhive.db") as store:
        bodies = [w.body for w in WakeTable(store).waiting()]
    assert bodies == ["only once, please"], result.stdout
