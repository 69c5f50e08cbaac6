"""What a task's arguments may be: the bounds on its seconds and the checks every caller applies.

Shared by the engine (which applies them, whoever calls it: the tools, `hyperhive tasks`) and the bash
tools (tasks/tools.py: their argument models, and their declarations, which state the bounds to the agent).
Standard library only: the per-turn forwarding server imports the declarations on its 100 ms start-up path.
Every refusal is a `ToolFailure` naming the value, never a crash: the agent reads it and tries again.
"""

from __future__ import annotations

import math

from hyperhive.errors import ToolFailure

DEFAULT_WAIT = 3.0
MAX_WAIT = 30.0
# A week: a larger timeout is almost certainly a unit mistake (milliseconds for seconds).
MAX_TIMEOUT = 7 * 24 * 3600.0
# Any larger integer is far beyond every bound above, and may not fit a float (10**400 does not).
MAX_SECONDS = 10**15


def check_cmd(value: object) -> str:
    """A shell command: a non-empty string that a shell, a file and the store can all hold."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:  # a lone surrogate: valid JSON, not UTF-8
            raise ToolFailure(
                f"cmd is not valid Unicode: a lone surrogate at position {exc.start}", field="cmd"
            ) from exc
    if not isinstance(value, str) or not value.strip():
        raise ToolFailure("cmd must be a non-empty shell command", field="cmd")
    if "\x00" in value:
        raise ToolFailure("cmd must not contain NUL bytes", field="cmd")
    return value


def check_wait(value: object, name: str = "wait_seconds") -> float:
    """Validate a wait window: a number of seconds ≥ 0; above MAX_WAIT it is capped, as documented."""
    seconds = _number(value, name)
    if seconds < 0:
        raise ToolFailure(f"{name} must be 0 or more seconds, got {value!r}", field=name, value=repr(value))
    return min(seconds, MAX_WAIT)


def check_timeout(value: object) -> float | None:
    if value is None:
        return None
    seconds = _number(value, "timeout_secs")
    if seconds <= 0 or seconds > MAX_TIMEOUT:
        raise ToolFailure(
            f"timeout_secs must be more than 0 and at most {MAX_TIMEOUT:.0f} seconds (a week), got {value!r};"
            " omit it for no timeout",
            field="timeout_secs",
            value=repr(value),
        )
    return seconds


def check_id(value: object) -> int:
    """Task ids are positive integers; agents sometimes send them as strings ("7"), which is fine.

    Anything else is refused naming the value: booleans, fractions, digits that are not ASCII ("²" passes
    `str.isdigit`, not `int`), negative numbers, and integers beyond SQLite's 64 bits.
    """
    tid: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        tid = value
    elif isinstance(value, str) and (text := value.strip()).isascii() and text.isdigit():
        tid = int(text) if len(text) <= 19 else 2**63  # longer is out of range (and int() refuses 4300+ digits)
    if tid is not None and 0 < tid < 2**63:
        return tid
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        shown = f"an integer of {value.bit_length()} bits"
    else:
        shown = repr(value if not isinstance(value, str) or len(value) <= 40 else value[:39] + "…")
        shown = shown if len(shown) <= 60 else f"a {type(value).__name__}"
    raise ToolFailure(
        f"no task with id {shown}: task ids are whole numbers from 1 to 2**63-1, as run() returns them;"
        " list() shows the known tasks",
        field="id",
        value=shown,
    )


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolFailure(f"{name} must be a number of seconds, got {value!r}", field=name, value=repr(value))
    if isinstance(value, int) and abs(value) > MAX_SECONDS:
        # Before float(), which raises OverflowError past 1e308; and the digits, not a 400-digit repr.
        raise ToolFailure(f"{name} must be a number of seconds, got an integer of {len(str(value))} digits", field=name)
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ToolFailure(f"{name} must be a finite number of seconds, got {value!r}", field=name)
    return seconds
