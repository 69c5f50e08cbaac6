"""Who may use the web view: one-time login codes, signed session cookies, CSRF tokens.

The operator asks the running service for a code (`hyperhive web-login`, control op `web_login`), which
travels in the login link's fragment (`/login#code=...`: a browser never sends a fragment, so it is in no
request line and no log) and is exchanged once, within `CODE_SECONDS`, for a cookie: HttpOnly (no script
reads it), SameSite=Strict (no other site's page sends it), Path=/, Secure when the view is reached over
https. The cookie is `<session id>.<expiry>.<MAC>`, signed with the view's secret (web/files.py): it needs
no table, outlives restarts, and is void once the secret is deleted. Every form carries the session's CSRF
token, a MAC of its id: a page of another origin can neither read it nor, without it, post for the
operator.

Codes live in memory (a restart voids those not used yet); at most `MAX_CODES` wait at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

from hyperhive.numbers import count

CODE_SECONDS = 300.0
SESSION_SECONDS = 30 * 24 * 3600
MAX_CODES = 16
MAX_REVOKED = 1024


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class WebAuth:
    """The view's keys and codes. Synchronous and cheap: a cookie's check is one HMAC."""

    def __init__(self, secret: bytes) -> None:
        self._key = secret
        # Cookies are per host, not per port: two services on one machine must not overwrite each other's.
        self.cookie_name = "hyperhive-" + self._mac("cookie-name")[:10]
        self._codes: dict[bytes, float] = {}  # sha256 of a code → when it expires
        self._revoked: dict[str, int] = {}  # session id → its expiry (logged out before it)

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

    def session(self, headers: list[tuple[bytes, bytes]], now: float | None = None) -> str | None:
        """The session id a request's cookie proves, or None (no cookie of ours, a bad MAC, expired, logged
        out)."""
        now = time.time() if now is None else now
        for value in self._cookies(headers):
            parts = value.split(".")
            if len(parts) != 3 or count(parts[1]) is None:
                continue
            sid, expires, mac = parts
            if not hmac.compare_digest(mac, self._mac(f"session:{sid}:{expires}")):
                continue
            if int(expires) > now and sid not in self._revoked:
                return sid
        return None

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
        """The Set-Cookie header's value that gives a browser `value`."""
        flags = f"; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        return f"{self.cookie_name}={value}{flags}".encode("ascii")

    def expired_cookie(self, *, secure: bool) -> bytes:
        flags = "; Path=/; Max-Age=0; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        return f"{self.cookie_name}={flags}".encode("ascii")

    def revoke(self, headers: list[tuple[bytes, bytes]], now: float | None = None) -> None:
        """Log the request's session out: its cookie is refused from now on, even if replayed."""
        now = time.time() if now is None else now
        sid = self.session(headers, now)
        if sid is None:
            return
        expires = next(int(v.split(".")[1]) for v in self._cookies(headers) if v.startswith(sid + "."))
        self._revoked = {s: t for s, t in self._revoked.items() if t > now}
        if len(self._revoked) >= MAX_REVOKED:  # the oldest-expiring goes: bounded whatever is posted
            del self._revoked[min(self._revoked, key=self._revoked.__getitem__)]
        self._revoked[sid] = expires

    # -- CSRF ----------------------------------------------------------------------------------------

    def csrf(self, sid: str) -> str:
        return self._mac(f"csrf:{sid}")

    def csrf_ok(self, sid: str, token: str) -> bool:
        return hmac.compare_digest(token.encode("utf-8", "replace"), self.csrf(sid).encode("ascii"))
