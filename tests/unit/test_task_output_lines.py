"""The last lines of a task's output, as its end's wake and the web view show them (tasks/output.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hyperhive.tasks.output import last_lines


def test_a_progress_bar_rewritten_with_carriage_returns_is_one_line_as_the_terminal_left_it() -> None:
    bar = "".join(f"\r{pct}%" for pct in range(0, 101))
    text = "built the thing\n" + bar + "\ndone\n"
    assert last_lines(text, 3) == "built the thing\n100%\ndone"


def test_only_a_newline_ends_a_line_and_a_crlf_ending_is_no_rewrite() -> None:
    text = "one\r\ntwo\u2028still two\x0cand still\r\nthree\x85same\r\n"
    assert last_lines(text, 2) == "two\u2028still two\x0cand still\nthree\x85same"


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r")), min_size=1), st.integers(1, 30))
def test_lines_without_carriage_returns_are_the_last_ones_whole(lines: list[str], count: int) -> None:
    text = "\n".join(lines) + "\n"
    expected = "\n".join(lines).rstrip("\n").split("\n")[-count:]
    assert last_lines(text, count) == "\n".join(expected)
