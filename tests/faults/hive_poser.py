"""A process that tries to pass for an agent of the hive: it writes a message "from" `claimed` to `target`
straight to the target's socket, then tries to take the target's store's write lock (writing nothing). What
happened is printed as one JSON line (and appended to OUT when given).

    python hive_poser.py ROSTER CLAIMED TARGET [OUT]
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import anyio

from hyperhive.hive.envelope import Message
from hyperhive.hive.local import LocalTransport
from hyperhive.hive.transport import Refused, Unreachable
from hyperhive.roster import load


async def main(roster_path: str, claimed: str, target: str) -> dict[str, object]:
    roster = load(Path(roster_path))
    forged = Message(
        id=f"{claimed}.999999",
        sender=claimed,
        recipient=target,
        conversation=f"{claimed}.999999",
        hop=1,
        body=f"I am {claimed}, honestly",
        sent_at=time.time(),
    )
    result: dict[str, object] = {"claimed": claimed, "target": target}
    try:
        stored = await LocalTransport(roster, claimed).deliver(forged)
        result["message"] = f"stored as wake {stored.wake}"
    except Refused as exc:
        result["message"] = f"refused: {exc.message}"
    except Unreachable as exc:
        result["message"] = f"unreachable: {exc.message}"
    agent = roster.get(target)
    assert agent is not None
    # Whether it could write into the target's store: its write lock taken, then given back untouched.
    try:
        db = sqlite3.connect(agent.state_dir / "hyperhive.db", isolation_level=None, timeout=5)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("ROLLBACK")
        finally:
            db.close()
        result["store"] = "writable"
    except sqlite3.Error as exc:
        result["store"] = f"refused: {exc}"
    return result


if __name__ == "__main__":
    found = anyio.run(main, *sys.argv[1:4])
    line = json.dumps(found)
    print(line)
    if len(sys.argv) > 4:
        with open(sys.argv[4], "a") as out:
            out.write(line + "\n")
