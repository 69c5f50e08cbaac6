"""A real Prometheus (Debian's /usr/bin/prometheus, on 127.0.0.1, its storage in tmp_path) scrapes a running
service's metrics endpoint every second, and its query API returns the turns the service ran: the text is
what Prometheus itself reads, not only what prometheus_client's parser accepts."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.process.harness_service import running_service
from tests.process.test_metrics import answered_turns

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

pytestmark = pytest.mark.skipif(
    not Path(PROMETHEUS).is_file(),
    reason="Debian's prometheus is not installed (.ci/run installs it: apt-get install prometheus)",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def prometheus(tmp_path: Path, target: str) -> Iterator[tuple[str, Path]]:
    """Prometheus scraping `target` (host:port) every second; its API's URL and its log. Stopped and reaped
    at the end, killed if it does not stop."""
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: hyperhive\n    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(api: str, promql: str) -> list[dict[str, object]] | None:
    """The instant query's result vector, or None while Prometheus is not answering yet."""
    url = f"{api}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            doc = json.loads(answer.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def test_a_real_prometheus_scrapes_the_turns_the_service_ran(tmp_path: Path) -> None:
    with running_service(tmp_path, HIVE_METRICS_PORT="0") as svc:
        svc.cli("send", "say:one")
        answered_turns(svc, 1)
        svc.cli("send", "say:two")
        answered_turns(svc, 2)
        target = svc.status()["metrics"].removeprefix("http://").removesuffix("/metrics")
        with prometheus(tmp_path, target) as (api, log):
            deadline = time.monotonic() + 90
            seen: list[dict[str, object]] | None = None
            while time.monotonic() < deadline:
                seen = query(api, "hyperhive_turns_total")
                if seen and sum(float(r["value"][1]) for r in seen) == 2:  # type: ignore[index]
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(f"Prometheus never showed 2 turns (last answer {seen}):\n{log.read_text()}")
            labels = [(r["metric"], r["value"]) for r in seen]
            answered = [v for m, v in labels if m.get("agent") == "main" and m.get("outcome") == "answered"]  # type: ignore[attr-defined]
            assert len(answered) == 1 and answered[0][1] == "2"  # type: ignore[index]
            # The target is healthy: Prometheus read the whole answer without an error of its own.
            (up,) = query(api, 'up{job="hyperhive"}') or [None]
            assert up is not None and up["value"][1] == "1"  # type: ignore[index]
            buckets = query(api, 'hyperhive_turn_duration_seconds_bucket{agent="main",le="+Inf"}')
            assert buckets and buckets[0]["value"][1] == "2"  # type: ignore[index]
