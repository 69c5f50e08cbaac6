"""Who may use the web view: one-time login codes, signed session cookies bound to the session's own
address, CSRF tokens.

The operator asks the running service for a code (`hyperhive web-login`, control op `web_login`), which
travels in the login link's fragment (`/login#code=...`: a browser never sends a fragment, so it is in no
request line and no log) and is exchanged once, within `CODE_SECONDS`, for a cookie and the session's
address. The cookie is `<session id>.<expiry>.<MAC>`, signed with the view's secret (web/files.py): it needs
no table, outlives restarts, and is void once the secret is deleted. HttpOnly (no script reads it),
SameSite=Strict, Secure when the view is reached over https.

A browser sends a cookie to every port of its host (cookies are scoped by host and path, never by port;
SameSite ignores ports too): a page another local user serves on another port of 127.0.0.1, reached by a
link, would get the view's cookie and could replay it from its own process. So a cookie alone opens
nothing: each session's pages live under an address of its own, its *base* (`/s/<key>/`, the key a MAC of
the session id: unguessable, and never sent anywhere but to the view), and its cookie is scoped to that
path: a browser sends it only there, never to `/` of another port. A request is the operator's only when
its path is under a session's base and carries that session's cookie (web/gate.py).

Every form carries the session's CSRF token, a MAC of its id. Logging out revokes the session: its id
is kept, until the cookie would have expired, in `web-revoked.json` in the state directory (at most
`MAX_REVOKED`, written whole and atomically), so that a restart does not bring it back.

Codes live in memory (a restart voids those not used yet); at most `MAX_CODES` wait at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from pathlib import Path

from hyperhive.errors import StoreError
from hyperhive.numbers import count
from hyperhive.service.web.files import WebError
from hyperhive.statedir.files import read_secret, write_file

CODE_SECONDS = 300.0
SESSION_SECONDS = 30 * 24 * 3600
MAX_CODES = 16
MAX_REVOKED = 1024
# A session's base: `/s/` and 22 characters of a MAC of its id (132 bits).
BASE_PREFIX = "/s/"
_BASE = re.compile(r"(/s/[A-Za-z0-9_-]{22})(/.*)")
_SID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def split_base(path: str) -> tuple[str | None, str]:
    """A request path as the session's base and the route under it (`/s/<key>/turns` → `/s/<key>`,
    `/turns`); (None, path) for a path under no base."""
    found = _BASE.fullmatch(path)
    return (found.group(1), found.group(2)) if found else (None, path)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class WebAuth:
    """The view's keys and codes. Synchronous and cheap: a cookie's check is one HMAC."""

    def __init__(self, secret: bytes, revoked: Path | None = None) -> None:
        self._key = secret
        # Cookies are per host, not per port: two services on one machine must not overwrite each other's.
        self.cookie_name = "hyperhive-" + self._mac("cookie-name")[:10]
        self._codes: dict[bytes, float] = {}  # sha256 of a code → when it expires
        self._revoked_file = revoked
        self._revoked: dict[str, int] = _load_revoked(revoked)  # session id → its expiry (logged out before it)

    def _mac(self, text: str) -> str:
        return _b64(hmac.new(self._key, text.encode("utf-8"), hashlib.sha256).digest())

    # -- codes ---------------------------------------------------------------------------------------

    def issue_code(self, now: float | None = None) -> str:
        """A new one-time login code, good for `CODE_SECONDS`; the oldest waiting one goes past `MAX_CODES`."""
        now = time.time() if now is None else now
        self._codes = {h: t for h, t in self._codes.items() if t > now}
        while len(self._codes) >= MAX_CODES:
            del self._codes[min(self._codes, key=self._codes.__getitem__)]
        code = secrets.token_urlsafe(24)
        self._codes[hashlib.sha256(code.encode()).digest()] = now + CODE_SECONDS
        return code

    def redeem(self, code: str, now: float | None = None) -> bool:
        """Use up `code`: True once, for a code issued here and not expired."""
        now = time.time() if now is None else now
        expires = self._codes.pop(hashlib.sha256(code.encode("utf-8", "replace")).digest(), None)
        return expires is not None and expires > now

    # -- sessions ------------------------------------------------------------------------------------

    def new_session(self, now: float | None = None) -> str:
        """A fresh session's cookie value."""
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        sid = secrets.token_urlsafe(16)
        return f"{sid}.{expires}.{self._mac(f'session:{sid}:{expires}')}"

    def base(self, sid: str) -> str:
        """The address under which session `sid`'s pages live (`/s/<key>`), and its cookie's path."""
        return BASE_PREFIX + self._mac(f"base:{sid}")[:22]

    def base_of(self, value: str) -> str:
        """The base of the session a fresh cookie value (`new_session`) belongs to."""
        return self.base(value.partition(".")[0])

    def session(self, headers: list[tuple[bytes, bytes]], base: str | None, now: float | None = None) -> str | None:
        """The session id a request's cookie proves for a request under `base`, or None (no cookie of ours, a
        bad MAC, expired, logged out, or the cookie of another base: a cookie is good under its own only)."""
        if base is None:
            return None
        now = time.time() if now is None else now
        for value in self._cookies(headers):
            parts = value.split(".")
            if len(parts) != 3 or count(parts[1]) is None:
                continue
            sid, expires, mac = parts
            if not hmac.compare_digest(mac, self._mac(f"session:{sid}:{expires}")):
                continue
            if int(expires) > now and sid not in self._revoked and hmac.compare_digest(self.base(sid), base):
                return sid
        return None

    def any_session(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the request carries a cookie of ours with a good MAC (for admission's budgets only: it
        opens nothing)."""
        return any(self._good(v) for v in self._cookies(headers))

    def _good(self, value: str) -> bool:
        parts = value.split(".")
        return (
            len(parts) == 3
            and count(parts[1]) is not None
            and hmac.compare_digest(parts[2], self._mac(f"session:{parts[0]}:{parts[1]}"))
        )

    def _cookies(self, headers: list[tuple[bytes, bytes]]) -> list[str]:
        prefix = self.cookie_name + "="
        found = []
        for name, value in headers:
            if name != b"cookie":
                continue
            for part in value.decode("latin-1").split(";"):
                pair = part.strip()
                if pair.startswith(prefix):
                    found.append(pair[len(prefix) :])
        return found

    def cookie(self, value: str, *, secure: bool) -> bytes:
        """The Set-Cookie header's value that gives a browser `value`, sent back only under its session's base."""
        path = self.base_of(value) + "/"
        flags = f"; Path={path}; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        return f"{self.cookie_name}={value}{flags}".encode("ascii")

    def expired_cookie(self, base: str, *, secure: bool) -> bytes:
        flags = f"; Path={base}/; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        return f"{self.cookie_name}={flags}".encode("ascii")

    def revoke(self, headers: list[tuple[bytes, bytes]], base: str | None, now: float | None = None) -> bool:
        """Log the request's session out: its cookie is refused from now on, even if replayed. Whether the
        revocations changed (then `save` them)."""
        now = time.time() if now is None else now
        sid = self.session(headers, base, now)
        if sid is None:
            return False
        expires = next(int(v.split(".")[1]) for v in self._cookies(headers) if v.startswith(sid + "."))
        self._revoked = {s: t for s, t in self._revoked.items() if t > now}
        if len(self._revoked) >= MAX_REVOKED:  # the oldest-expiring goes: bounded whatever is posted
            del self._revoked[min(self._revoked, key=self._revoked.__getitem__)]
        self._revoked[sid] = expires
        return True

    def save(self) -> None:
        """Write the revocations whole (atomically, 0600): a restart keeps every session logged out. Blocking:
        called on a worker thread."""
        if self._revoked_file is not None:
            doc = {"revoked": dict(self._revoked)}
            write_file(self._revoked_file, json.dumps(doc, separators=(",", ":")) + "\n")

    # -- CSRF ----------------------------------------------------------------------------------------

    def csrf(self, sid: str) -> str:
        return self._mac(f"csrf:{sid}")

    def csrf_ok(self, sid: str, token: str) -> bool:
        return hmac.compare_digest(token.encode("utf-8", "replace"), self.csrf(sid).encode("ascii"))


def _load_revoked(path: Path | None) -> dict[str, int]:
    """The sessions logged out and not yet expired, from `web-revoked.json`; refused (WebError) when it
    is there but cannot be trusted, as the view's secret is: the view would let logged-out cookies in."""
    if path is None:
        return {}
    try:
        raw = read_secret(path, "the web view's revocations", limit=MAX_REVOKED * 128)
    except StoreError as exc:
        raise WebError(exc.message, **exc.data) from exc
    if raw is None:
        return {}
    try:
        doc = json.loads(raw)
        found = doc["revoked"]
        if not isinstance(found, dict):
            raise TypeError("not an object")
        now = time.time()
        kept = {str(s): int(t) for s, t in found.items() if _SID.fullmatch(str(s)) and int(t) > now}
    except (ValueError, KeyError, TypeError) as exc:
        raise WebError(
            f"the web view's revocations {path} are unreadable ({exc}); delete it and web-token (every browser is "
            "logged out) to start again",
            path=str(path),
        ) from exc
    return dict(sorted(kept.items(), key=lambda item: item[1])[-MAX_REVOKED:])
