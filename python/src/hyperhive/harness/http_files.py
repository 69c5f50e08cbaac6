"""The two files hyperhive's HTTP tools keep in the state directory: the bearer token and the endpoint.

The token (0600, created once and kept across restarts; an operator rotates it by deleting it, or writes
their own) is what every agent must present; the endpoint file says where the last service to serve this
state directory listened (`{"url", "pid"}`), written while it serves and removed when it stops. Both are
named, and kept private, by statedir/.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from hyperhive.errors import StoreError
from hyperhive.statedir.files import create_once, read_secret, write_file
from hyperhive.statedir.layout import StateDir

# Tokens an operator may write themselves: visible ASCII (it travels in a header), not too short to guess.
_TOKEN_SHAPE = re.compile(r"[\x21-\x7e]{16,1024}")


class HttpToolsError(StoreError):
    """The HTTP tools cannot start (token file unusable, server failed to start): a state directory problem,
    so `hyperhive agent` exits 3 (the unit does not restart-loop on it any faster than its backoff)."""


# -- the token ----------------------------------------------------------------------------------------


def load_token(state_dir: Path) -> str:
    """The bearer token from the state directory's token file, created (0600, atomically) on first use.

    Refused, with the reason and the fix: a token file others can read or that is not ours, a symlink
    (statedir/files.py's rules for a secret), or one whose content is not a token.
    """
    path = StateDir(state_dir).token
    token = _read_token(path)
    if token is not None:
        return token
    try:
        create_once(path, secrets.token_urlsafe(32) + "\n")  # never replaces a token just made
    except OSError as exc:
        raise HttpToolsError(f"cannot create the token file {path}: {exc.strerror}", path=str(path)) from exc
    token = _read_token(path)
    if token is None:
        raise HttpToolsError(f"the token file {path} vanished while it was created", path=str(path))
    return token


def _read_token(path: Path) -> str | None:
    try:
        raw = read_secret(path, "the token file")
    except StoreError as exc:  # not a file only we can read: the tools cannot start
        raise HttpToolsError(exc.message, **exc.data) from exc
    if raw is None:
        return None
    token = raw.decode("ascii", errors="replace").strip()
    if not _TOKEN_SHAPE.fullmatch(token):
        raise HttpToolsError(
            f"the token file {path} does not hold a token (16 to 1024 visible ASCII characters); "
            "delete it to have a new one made",
            path=str(path),
        )
    return token


# -- the recorded endpoint ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    url: str
    pid: int


def read_endpoint(state_dir: Path) -> Endpoint | None:
    """What the endpoint file says (the last service to serve this state directory), or None."""
    try:
        doc = json.loads(StateDir(state_dir).endpoint.read_text(encoding="utf-8"))
        return Endpoint(url=str(doc["url"]), pid=int(doc["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_endpoint(state_dir: Path, endpoint: Endpoint) -> None:
    write_file(StateDir(state_dir).endpoint, json.dumps({"url": endpoint.url, "pid": endpoint.pid}) + "\n")


def remove_endpoint(state_dir: Path, endpoint: Endpoint) -> None:
    """Remove the endpoint file if it is still this service's (a newer service may have written its own)."""
    if read_endpoint(state_dir) == endpoint:
        with contextlib.suppress(OSError):
            StateDir(state_dir).endpoint.unlink()
