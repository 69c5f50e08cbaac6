"""The two files hyperhive's HTTP tools keep in the state directory: the bearer token and the endpoint.

`token` (0600, created once and kept across restarts; an operator rotates it by deleting it, or writes their
own) is what every agent must present; `http.json` says where the last service to serve this state
directory listened (`{"url", "pid"}`), written while it serves and removed when it stops.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hyperhive.errors import StoreError

TOKEN_FILE = "token"
ENDPOINT_FILE = "http.json"
# Tokens an operator may write themselves: visible ASCII (it travels in a header), not too short to guess.
_TOKEN_SHAPE = re.compile(r"[\x21-\x7e]{16,1024}")


class HttpToolsError(StoreError):
    """The HTTP tools cannot start (token file unusable, server failed to start): a state directory problem,
    so `hyperhive agent` exits 3 (the unit does not restart-loop on it any faster than its backoff)."""


# -- the token ----------------------------------------------------------------------------------------


def load_token(state_dir: Path) -> str:
    """The bearer token from `<state_dir>/token`, created (0600, atomically) on first use.

    Refused, with the reason and the fix: a token file others can read or that is not ours, a symlink, or
    one whose content is not a token.
    """
    path = state_dir / TOKEN_FILE
    token = _read_token(path)
    if token is not None:
        return token
    fresh = secrets.token_urlsafe(32)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".token-")  # 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(fresh + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # atomic, and never replaces a token another process just made
    except OSError as exc:
        raise HttpToolsError(f"cannot create the token file {path}: {exc.strerror}", path=str(path)) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    token = _read_token(path)
    if token is None:
        raise HttpToolsError(f"the token file {path} vanished while it was created", path=str(path))
    return token


def _read_token(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "it is a symlink" if path.is_symlink() else exc.strerror
        raise HttpToolsError(f"cannot use the token file {path}: {why}", path=str(path)) from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise HttpToolsError(f"the token file {path} is not a regular file", path=str(path))
        if st.st_uid != os.geteuid():
            raise HttpToolsError(
                f"the token file {path} belongs to uid {st.st_uid}, not to this service (uid {os.geteuid()})",
                path=str(path),
            )
        if st.st_mode & 0o077:
            mode = stat.S_IMODE(st.st_mode)
            raise HttpToolsError(
                f"the token file {path} can be read or written by others (mode {mode:04o}); "
                f"run `chmod 600 {path}`, or delete it to have a new token made",
                path=str(path),
                mode=f"{mode:04o}",
            )
        raw = f.read(4096)
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
    """What `http.json` says (the last service to serve this state directory), or None."""
    try:
        doc = json.loads((state_dir / ENDPOINT_FILE).read_text(encoding="utf-8"))
        return Endpoint(url=str(doc["url"]), pid=int(doc["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_endpoint(state_dir: Path, endpoint: Endpoint) -> None:
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".http-")  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"url": endpoint.url, "pid": endpoint.pid}, f)
            f.write("\n")
        os.replace(tmp, state_dir / ENDPOINT_FILE)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def remove_endpoint(state_dir: Path, endpoint: Endpoint) -> None:
    """Remove `http.json` if it is still this service's (a newer service may have written its own)."""
    if read_endpoint(state_dir) == endpoint:
        with contextlib.suppress(OSError):
            (state_dir / ENDPOINT_FILE).unlink()
