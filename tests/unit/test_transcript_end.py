"""`hyperhive tail` reads a transcript's end back from the end (runtime/transcript.py's `transcript_end`): the
last lines within a byte bound, whatever the file's size, and it says what the bound left out."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hyperhive.runtime import transcript
from hyperhive.runtime.transcript import read_span, transcript_end


def expected(data: bytes, count: int, max_bytes: int) -> list[bytes]:
    """The last `count` lines lying wholly within the last `max_bytes` bytes (the final newline aside)."""
    body = data[:-1] if data.endswith(b"\n") else data
    lines = body.split(b"\n") if data else []
    shown: list[bytes] = []
    end = len(body)
    for line in reversed(lines):
        start = end - len(line)
        if len(shown) == count or start < len(body) - max_bytes:
            break
        shown.append(line)
        end = start - 1
    return shown[::-1]


@pytest.mark.parametrize("seed", range(4))
def test_the_last_lines_within_the_bound_are_found_whatever_the_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(transcript, "_BLOCK", 7)  # lines across many blocks, newlines on their edges
    rng = random.Random(seed)
    path = tmp_path / "t.jsonl"
    for _ in range(500):
        lines = [b"x" * rng.randint(0, 20) for _ in range(rng.randint(0, 8))]
        data = b"\n".join(lines) + (b"\n" if lines and rng.random() < 0.8 else b"")
        path.write_bytes(data)
        count, max_bytes = rng.randint(0, 10), rng.randint(1, 60)
        end = transcript_end(path, count, max_bytes)
        want = expected(data, count, max_bytes)
        assert [read_span(path, span) for span in end.spans] == want, (data, count, max_bytes)
        if want:
            left = len(lines) - len(want)
            assert end.earlier == (left > 0 and len(want) < count) and end.oversized == 0
        elif count and data:
            assert end.oversized > max_bytes and end.earlier


def test_a_last_line_over_the_bound_is_reported_not_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"small\n" + b"y" * 5000 + b"\n")
    end = transcript_end(path, 10, 1000)
    assert end.spans == [] and end.oversized == 1001 and end.earlier


def test_an_empty_transcript_has_no_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    assert transcript_end(path, 10, 1000) == transcript.TranscriptEnd([], earlier=False, oversized=0)
