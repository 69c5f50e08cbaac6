"""The demo agent (`hyperhive demo-agent`), unchanged, with a clock: when its process began and when each ACP step came.

    python benchmarks/demo_agent_clock.py --stats PATH

Appends one JSON line to PATH per step, with this process's pid and the time (`time.time()`, the same
machine's clock as the benchmark's): `boot` (this file's first line, before anything is imported),
`initialize`, `session` (session/new or session/load answered), `arrival` (a prompt came; with the wakes'
sources and the `mark-…` words in it, by which the benchmark knows whose prompt it is) and `answer` (the
turn's final message is sent and its `end_turn` about to go).
"""

import time

BOOT = time.time()  # before the imports: the process's start as near as Python sees it

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from hyperhive.demo_agent.agent import DemoAgent  # noqa: E402
from hyperhive.demo_agent.plan import parse_wakes, prompt_text  # noqa: E402
from hyperhive.demo_agent.stdio import serve  # noqa: E402

MARK = re.compile(r"\bmark-[\w-]+")


class ClockedDemoAgent(DemoAgent):
    def __init__(self, stats: Path) -> None:
        super().__init__()
        self.stats = stats
        self.note("boot", at=BOOT)

    def note(self, verb: str, *, at: float | None = None, **fields: Any) -> None:
        line = {"verb": verb, "t": time.time() if at is None else at, "pid": os.getpid(), **fields}
        with self.stats.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    async def initialize(self, *args: Any, **kwargs: Any) -> Any:
        self.note("initialize")
        return await super().initialize(*args, **kwargs)

    async def new_session(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().new_session(*args, **kwargs)
        self.note("session", session=response.session_id)
        return response

    async def load_session(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().load_session(*args, **kwargs)
        self.note("session", session=kwargs.get("session_id"))
        return response

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        text = prompt_text(prompt)
        sources = [w.source for w in parse_wakes(text)]
        self.note("arrival", session=session_id, sources=sources, marks=MARK.findall(text))
        response = await super().prompt(session_id, prompt, **kwargs)
        self.note("answer", session=session_id, sources=sources)
        return response


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stats", type=Path, required=True, help="append each step's time to this file")
    asyncio.run(serve(ClockedDemoAgent(parser.parse_args().stats)))
