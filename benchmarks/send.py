"""Benchmark the operator's quick commands: `hyperhive send` against a running service, beside the floor.

    .venv/bin/python benchmarks/send.py [-n 100] [--compare REV]

One service (`hyperhive agent`, runtime acp, agent `benchmarks/acp_stream_agent.py`) in a temp state
directory. Each round runs, in a shuffled order, one process of each command and times it from spawn to
exit (wall, `time.perf_counter` around `subprocess.run`; CPU, user + system, from `RUSAGE_CHILDREN`):

- the floor: `python -c pass` (the same interpreter);
- `hyperhive send --help`;
- `hyperhive send TEXT` (answered by the service; the next command waits until its turn has ended);
- `hyperhive status`.

`hyperhive` is the venv's console script, as an operator runs it. `--compare REV` also runs every command
with the source tree of git revision REV (`git archive`, on PYTHONPATH) in the same rounds, against the same
service: before and after, measured in the same conditions. Results: a markdown table on stdout and in
benchmarks/send_results.md (+ .json). Target (issue 15): `hyperhive send` under 70 ms on this machine,
where the floor is about 8 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from measure import acp_service_env, median, p90, table_report, until

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
AGENT = HERE / "acp_stream_agent.py"
HYPERHIVE = Path(sys.executable).parent / "hyperhive"  # the console script pip generated
RESULTS_MD = HERE / "send_results.md"
RESULTS_JSON = HERE / "send_results.json"

sys.path.insert(0, str(REPO / "python" / "src"))
from hyperhive.control.wire import call  # noqa: E402


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process, spawn to exit. It must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def source_tree(rev: str, into: Path) -> Path:
    """python/src of git revision `rev`, unpacked under `into`."""
    archive = into / "src.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", rev, "python/src"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "python" / "src"


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hh-send-bench-") as tmp_name:
        tmp = Path(tmp_name)
        state, work = tmp / "state", tmp / "work"
        work.mkdir()
        env = acp_service_env(state, work, str(AGENT))
        env.pop("PYTHONPATH", None)
        trees = {"this tree": str(REPO / "python" / "src")}
        if args.compare:
            trees[args.compare] = str(source_tree(args.compare, tmp))
        sock = state / "harness.sock"

        def idle() -> bool:
            status = call(sock, "status")
            return bool(status["state"] == "idle" and status["queue"]["waiting"] == 0)

        # name → (argv, environment, whether it starts a turn)
        commands: dict[str, tuple[list[str], dict[str, str], bool]] = {
            "floor": ([sys.executable, "-c", "pass"], env, False)
        }
        for label, src in trees.items():
            tree_env = {**env, "PYTHONPATH": src}
            commands[f"send --help ({label})"] = ([str(HYPERHIVE), "send", "--help"], tree_env, False)
            commands[f"send ({label})"] = ([str(HYPERHIVE), "send", "benchmark"], tree_env, True)
            commands[f"status ({label})"] = ([str(HYPERHIVE), "status"], tree_env, False)

        service = subprocess.Popen(
            [sys.executable, "-m", "hyperhive", "agent"], env=env, stderr=subprocess.DEVNULL, cwd=work
        )
        try:
            until(sock.exists)
            rng = random.Random(args.seed)
            names = list(commands)
            wall: dict[str, list[float]] = {name: [] for name in names}
            cpu: dict[str, list[float]] = {name: [] for name in names}
            load_before = os.getloadavg()
            for round_ in range(args.warmup + args.n):  # the warm-up rounds write __pycache__, spawn the agent
                rng.shuffle(names)
                for name in names:
                    argv, cmd_env, turns = commands[name]
                    w, c = timed(argv, cmd_env)
                    if round_ >= args.warmup:
                        wall[name].append(w)
                        cpu[name].append(c)
                    if turns:
                        until(idle)  # the turn this send started runs on no one's clock
            load_after = os.getloadavg()
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(60)
    return {"rounds": args.n, "load": [load_before, load_after], "wall_s": wall, "cpu_s": cpu}


def report(r: dict[str, Any], argv: list[str]) -> str:
    def ms(xs: list[float]) -> str:
        return f"{median(xs) * 1e3:.1f} ms (p90 {p90(xs) * 1e3:.1f})"

    floor = median(r["wall_s"]["floor"])
    rows = [
        f"| {name} | {ms(r['wall_s'][name])} | {(median(r['wall_s'][name]) - floor) * 1e3:.1f} ms "
        f"| {median(r['cpu_s'][name]) * 1e3:.0f} ms |"
        for name in sorted(r["wall_s"], key=lambda n: (n != "floor", n))
    ]
    (l1, _, _), (l2, _, _) = r["load"]
    note = f" {r['rounds']} rounds; load average {l1:.2f} before, {l2:.2f} after."
    columns = ["command", "wall, median (p90)", "above the floor", "CPU, median"]
    return table_report("send benchmark", argv, note, columns, rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=100, help="measured rounds")
    parser.add_argument("--warmup", type=int, default=3, help="rounds run first and not counted")
    parser.add_argument("--compare", metavar="REV", help="also run the commands from git revision REV")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    results = run(args)
    RESULTS_JSON.write_text(json.dumps(results, indent=1) + "\n")
    text = report(results, ["python", "benchmarks/send.py", *sys.argv[1:]])
    RESULTS_MD.write_text(text)
    print(text)
