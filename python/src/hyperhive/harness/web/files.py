"""The two files the web view keeps in the state directory: its secret and its address.

`web-token` (0600, created once and kept across restarts) is the key the view signs its login cookies and
CSRF tokens with: a browser stays logged in across a restart, and deleting the file (then restarting) logs
every browser out. `web.json` says where the view listens (`{"url", "pid"}`), written while it serves and
removed when it stops, as http.json is for the tools. Both are named, and kept private, by statedir/.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from hyperhive.errors import StoreError
from hyperhive.statedir.files import create_once, read_secret, write_file
from hyperhive.statedir.layout import StateDir

# A secret written by hand must be long enough not to be guessed; more is read but not needed.
MIN_SECRET = 32


class WebError(StoreError):
    """The web view's files cannot be used (its secret unusable): exit status 3, as for the HTTP tools'
    files, with the reason and the fix."""


def load_secret(state_dir: Path) -> bytes:
    """The web view's key from `web-token`, created (0600, atomically, never replacing one) on first use.

    Refused with the reason and the fix: a file others can read or that is not ours, a symlink, one too
    short to be a secret."""
    path = StateDir(state_dir).web_token
    secret = _read(path)
    if secret is None:
        try:
            create_once(path, secrets.token_urlsafe(32) + "\n")
        except OSError as exc:
            raise WebError(f"cannot create the web view's secret {path}: {exc.strerror}", path=str(path)) from exc
        secret = _read(path)
    if secret is None:
        raise WebError(f"the web view's secret {path} vanished while it was created", path=str(path))
    return secret


def _read(path: Path) -> bytes | None:
    try:
        raw = read_secret(path, "the web view's secret")
    except StoreError as exc:
        raise WebError(exc.message, **exc.data) from exc
    if raw is None:
        return None
    secret = raw.strip()
    if len(secret) < MIN_SECRET:
        raise WebError(
            f"the web view's secret {path} holds {len(secret)} bytes, fewer than {MIN_SECRET}; "
            "delete it to have a new one made",
            path=str(path),
        )
    return secret


@dataclass(frozen=True)
class WebEndpoint:
    url: str
    pid: int


def read_endpoint(state_dir: Path) -> WebEndpoint | None:
    """What `web.json` says (the last service to serve the view of this state directory), or None."""
    try:
        doc = json.loads(StateDir(state_dir).web_endpoint.read_text(encoding="utf-8"))
        return WebEndpoint(url=str(doc["url"]), pid=int(doc["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_endpoint(state_dir: Path, endpoint: WebEndpoint) -> None:
    write_file(StateDir(state_dir).web_endpoint, json.dumps({"url": endpoint.url, "pid": endpoint.pid}) + "\n")


def remove_endpoint(state_dir: Path, endpoint: WebEndpoint) -> None:
    """Remove `web.json` if it is still this service's."""
    if read_endpoint(state_dir) == endpoint:
        with contextlib.suppress(OSError):
            StateDir(state_dir).web_endpoint.unlink()
