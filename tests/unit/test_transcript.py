"""TranscriptSink: every turn's lines, as JSONL, in the file of its session."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hyperhive.runtime.stream import StreamLine, line_from_dict
from hyperhive.runtime.transcript import TranscriptSink
from hyperhive.statedir.layout import transcript

pytestmark = pytest.mark.anyio


def init(sid: str | None) -> StreamLine:
    return line_from_dict({"type": "system", "subtype": "init", "session_id": sid})


def text(body: str, sid: str | None = None) -> StreamLine:
    return line_from_dict(
        {"type": "assistant", "message": {"content": [{"type": "text", "text": body}]}, "session_id": sid}
    )


def result(sid: str | None) -> StreamLine:
    return line_from_dict({"type": "result", "session_id": sid, "result": "done"})


def read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def names(directory: Path, pattern: str = "*") -> list[str]:
    return sorted(p.name for p in directory.glob(pattern))


async def test_lines_go_to_the_sessions_file_as_jsonl_and_turns_append(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path / "transcripts")
    for turn in ("one", "two"):
        for line in (init("s1"), text(turn, "s1"), result("s1")):
            await sink.emit(line)
    docs = read(tmp_path / "transcripts" / "s1.jsonl")
    assert [d["type"] for d in docs] == ["system", "assistant", "result"] * 2
    assert docs[1]["message"]["content"][0]["text"] == "one"  # type: ignore[index]
    assert docs[4]["message"]["content"][0]["text"] == "two"  # type: ignore[index]


async def test_each_line_is_on_disk_as_soon_as_it_is_emitted(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path)
    await sink.emit(init("s1"))
    assert len(read(tmp_path / "s1.jsonl")) == 1  # no close, no result yet


async def test_lines_before_the_session_is_known_wait_and_keep_their_order(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path)
    await sink.emit(text("early"))
    assert names(tmp_path) == []
    await sink.emit(text("named", "s2"))
    await sink.emit(result("s2"))
    docs = read(tmp_path / "s2.jsonl")
    assert [d.get("session_id") for d in docs] == [None, "s2", "s2"]


async def test_a_turn_that_never_names_a_session_goes_to_an_unknown_file(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path)
    await sink.emit(text("orphan"))
    await sink.emit(result(None))
    (name,) = names(tmp_path, "unknown-*.jsonl")
    assert [d["type"] for d in read(tmp_path / name)] == ["assistant", "result"]


async def test_close_writes_out_lines_still_waiting_for_a_session(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path)
    await sink.emit(text("cut short"))
    sink.close()
    (name,) = names(tmp_path, "unknown-*.jsonl")
    assert len(read(tmp_path / name)) == 1


async def test_a_new_session_after_a_turn_gets_its_own_file(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path)
    for sid in ("a", "b"):
        await sink.emit(init(sid))
        await sink.emit(result(sid))
    assert names(tmp_path) == ["a.jsonl", "b.jsonl"]


async def test_transcripts_are_private(tmp_path: Path) -> None:
    sink = TranscriptSink(tmp_path / "transcripts")
    await sink.emit(result("s1"))
    assert stat.S_IMODE((tmp_path / "transcripts").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "transcripts" / "s1.jsonl").stat().st_mode) == 0o600


def transcript_name(session_id: str) -> str:
    path = transcript(Path("transcripts"), session_id)
    assert path.parent == Path("transcripts")
    return path.name


def test_session_ids_cannot_escape_the_directory() -> None:
    assert transcript_name("6dde8fc5-d8ff-418a-96f2-073dbfd81ae6") == "6dde8fc5-d8ff-418a-96f2-073dbfd81ae6.jsonl"
    assert transcript_name("../../etc/passwd") == "_.._etc_passwd.jsonl"
    assert transcript_name("..") == "_.jsonl"


async def test_a_transcript_that_cannot_be_written_never_fails_the_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A full state directory (here /dev/full, ENOSPC on every write) used to fail the turn, then stop the service.
    transcripts = tmp_path / "transcripts"
    transcripts.mkdir()
    (transcripts / "full.jsonl").symlink_to("/dev/full")
    sink = TranscriptSink(transcripts)
    for line in (init("full"), text("lost", "full"), result("full")):
        await sink.emit(line)
    assert "not in the transcript" in caplog.text and "3 line(s)" in caplog.text
    for line in (init("s2"), text("kept", "s2"), result("s2")):  # the next turn is written again
        await sink.emit(line)
    await sink.emit(init("full"))
    sink.close()  # a failed close does not raise either
    assert [d["type"] for d in read(transcripts / "s2.jsonl")] == ["system", "assistant", "result"]
