"""Numbers someone else wrote (a form, a query, a header, a cookie, an environment variable), read one strict
way: ASCII digits only, a bounded length, else nothing.

`str.isdigit()` also passes '²' and other digits `int()` refuses (a request with one answered 500 and logged a
traceback), and `int()` alone takes '٣', ' 7', '+7' and '1_000'. Standard library only.
"""

from __future__ import annotations

MAX_DIGITS = 18  # below 2**63: fits SQLite's integers


def count(text: str | None, *, digits: int = MAX_DIGITS) -> int | None:
    """`text` as a whole number if it is 1 to `digits` ASCII digits, else None."""
    if text is None or not 0 < len(text) <= digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)
