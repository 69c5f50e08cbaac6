"""A secret and an endpoint in the state directory: the pair each of the service's HTTP servers keeps.

hyperhive's tools keep `token` (the bearer token every agent presents) and `http.json`; the web view keeps
`web-token` (the key its cookies are signed with) and `web.json` (service/http_files.py, web/files.py say
what each secret must be). Both are named, and kept private, by statedir/:

- a secret is created once (0600, atomically, never replacing one just made) and kept across restarts; an
  operator rotates it by deleting it, or writes their own. It is read only when it is ours alone (a file
  others can read, not ours, a symlink is refused, with the reason and the fix);
- an endpoint file says where the last service to serve this state directory listened (`{"url", "pid"}`),
  written while it serves and removed when it stops, if it is still this service's (a newer service may
  have written its own).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hyperhive.errors import StoreError
from hyperhive.statedir.files import create_once, read_secret, write_file

_T = TypeVar("_T")


def load_secret(path: Path, what: str, error: type[StoreError], parse: Callable[[bytes], _T]) -> _T:
    """The secret in `path` (`what` names it in messages: "the token file"), created on first use.

    `parse` makes the secret of the file's bytes, raising `error` when they are not one. A file that
    cannot be read as a secret, or created, is `error` too (a state directory problem: exit status 3)."""
    found = _read(path, what, error, parse)
    if found is not None:
        return found
    try:
        create_once(path, secrets.token_urlsafe(32) + "\n")  # never replaces a secret just made
    except OSError as exc:
        raise error(f"cannot create {what} {path}: {exc.strerror}", path=str(path)) from exc
    found = _read(path, what, error, parse)
    if found is None:
        raise error(f"{what} {path} vanished while it was created", path=str(path))
    return found


def _read(path: Path, what: str, error: type[StoreError], parse: Callable[[bytes], _T]) -> _T | None:
    try:
        raw = read_secret(path, what)
    except StoreError as exc:  # not a file only we can read
        raise error(exc.message, **exc.data) from exc
    return None if raw is None else parse(raw)


@dataclass(frozen=True)
class Endpoint:
    url: str
    pid: int


def read_endpoint(path: Path) -> Endpoint | None:
    """What the endpoint file says (the last service to serve this state directory), or None."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return Endpoint(url=str(doc["url"]), pid=int(doc["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_endpoint(path: Path, endpoint: Endpoint) -> None:
    write_file(path, json.dumps({"url": endpoint.url, "pid": endpoint.pid}) + "\n")


def remove_endpoint(path: Path, endpoint: Endpoint) -> None:
    """Remove the endpoint file if it is still this service's (a newer service may have written its own)."""
    if read_endpoint(path) == endpoint:
        with contextlib.suppress(OSError):
            path.unlink()
