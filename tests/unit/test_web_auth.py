"""The web view's keys (service/web/auth.py): one-time codes, signed session cookies, CSRF tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperhive.service.web.app import reached_over_https
from hyperhive.service.web.auth import CODE_SECONDS, MAX_CODES, MAX_REVOKED, SESSION_SECONDS, WebAuth
from hyperhive.service.web.files import WebError

KEY = b"k" * 43


def cookie_header(auth: WebAuth, value: str) -> list[tuple[bytes, bytes]]:
    return [(b"cookie", f"other=1; {auth.cookie_name}={value}".encode())]


def test_a_code_logs_in_once_and_not_after_it_expired() -> None:
    auth = WebAuth(KEY)
    code = auth.issue_code(now=1000.0)
    assert auth.redeem(code, now=1001.0) is True
    assert auth.redeem(code, now=1002.0) is False  # used
    late = auth.issue_code(now=1000.0)
    assert auth.redeem(late, now=1000.0 + CODE_SECONDS + 1) is False
    assert auth.redeem("a guess", now=1000.0) is False


def test_codes_waiting_at_once_are_bounded_the_oldest_going_first() -> None:
    auth = WebAuth(KEY)
    codes = [auth.issue_code(now=1000.0 + i) for i in range(MAX_CODES + 1)]
    assert auth.redeem(codes[0], now=1100.0) is False
    assert all(auth.redeem(c, now=1100.0) for c in codes[1:])


def test_a_session_cookie_proves_its_session_until_it_expires_or_is_logged_out() -> None:
    auth = WebAuth(KEY)
    value = auth.new_session(now=1000.0)
    headers = cookie_header(auth, value)
    base = auth.base_of(value)
    sid = auth.session(headers, base, now=1001.0)
    assert sid is not None and value.startswith(sid + ".")
    assert auth.session(headers, base, now=1000.0 + SESSION_SECONDS + 1) is None
    assert auth.session(headers, None, now=1001.0) is None  # off its base, as no cookie
    assert auth.session(headers, auth.base_of(auth.new_session()), now=1001.0) is None
    auth.revoke(headers, base, now=1002.0)
    assert auth.session(headers, base, now=1003.0) is None


def test_a_logout_survives_a_restart_and_the_list_is_bounded(tmp_path: Path) -> None:
    """Issue 24, 4: revocations lived in memory, and a logged-out cookie worked again after a restart."""
    path = tmp_path / "web-revoked.json"
    auth = WebAuth(KEY, path)
    value = auth.new_session()
    headers, base = cookie_header(auth, value), auth.base_of(value)
    assert auth.revoke(headers, base)
    auth.save()
    again = WebAuth(KEY, path)
    assert again.session(headers, base) is None
    kept = auth.new_session()
    assert again.session(cookie_header(again, kept), auth.base_of(kept)) is not None
    for _ in range(MAX_REVOKED + 10):
        one = auth.new_session()
        auth.revoke(cookie_header(auth, one), auth.base_of(one))
    auth.save()
    assert len(path.read_text()) < MAX_REVOKED * 64
    path.write_text("not json")
    with pytest.raises(WebError, match="unreadable"):
        WebAuth(KEY, path)


def test_a_forged_or_foreign_cookie_proves_nothing() -> None:
    auth = WebAuth(KEY)
    sid, expires, mac = auth.new_session(now=1000.0).split(".")
    other = WebAuth(b"o" * 43)
    base = auth.base(sid)
    assert auth.session(cookie_header(auth, f"{sid}.{int(expires) + 10**6}.{mac}"), base, now=1001.0) is None
    assert auth.session(cookie_header(auth, f"{sid}x.{expires}.{mac}"), auth.base(f"{sid}x"), now=1001.0) is None
    foreign = other.new_session(now=1000.0)
    assert auth.session(cookie_header(auth, foreign), auth.base_of(foreign), now=1001.0) is None
    assert auth.session([(b"cookie", b"garbage")], base, now=1001.0) is None
    assert other.cookie_name != auth.cookie_name  # two services on one host keep their cookies apart


def test_the_cookie_is_httponly_and_samesite_strict_and_secure_over_https() -> None:
    auth = WebAuth(KEY)
    plain = auth.cookie("v.1.m", secure=False).decode()
    assert "HttpOnly" in plain and "SameSite=Strict" in plain and "Secure" not in plain
    assert f"Path={auth.base('v')}/;" in plain  # sent back under its session's base only
    assert "; Secure" in auth.cookie("v.1.m", secure=True).decode()


def test_a_csrf_token_is_its_sessions_own() -> None:
    auth = WebAuth(KEY)
    assert auth.csrf_ok("s1", auth.csrf("s1"))
    assert not auth.csrf_ok("s2", auth.csrf("s1"))
    assert not auth.csrf_ok("s1", "")


def test_secure_follows_what_the_proxy_says_not_the_host_alone() -> None:
    """Issue 24, 5: behind nginx as docs/web.md shows it (no `Host $host`), the Host is 127.0.0.1:<port>, and the
    cookie was set without `Secure` although the browser's Origin was https."""
    proxied = {b"agent.example.com"}
    loopback = (b"host", b"127.0.0.1:8377")
    assert reached_over_https([loopback, (b"origin", b"https://agent.example.com")], proxied)
    assert reached_over_https([loopback, (b"x-forwarded-proto", b"https")], proxied)
    assert reached_over_https([(b"host", b"agent.example.com")], proxied)
    assert not reached_over_https([loopback, (b"origin", b"http://127.0.0.1:8377")], proxied)
    assert not reached_over_https([loopback], proxied)
    assert not reached_over_https([loopback, (b"x-forwarded-proto", b"http")], proxied)
