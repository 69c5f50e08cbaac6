"""One strict way to read a number someone else wrote (hyperhive/numbers.py)."""

from __future__ import annotations

import pytest

from hyperhive.numbers import count


@pytest.mark.parametrize("text", ["", "²", "٣", "１", "+7", " 7", "7 ", "1_0", "-1", "0x1", "1.0", "9" * 19])
def test_anything_but_ascii_digits_within_the_bound_is_no_number(text: str) -> None:
    assert count(text) is None


def test_ascii_digits_within_the_bound_are_read() -> None:
    assert (count("0"), count("007"), count("9" * 18)) == (0, 7, 10**18 - 1)
    assert count("123456", digits=5) is None and count(None) is None
