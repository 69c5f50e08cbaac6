"""The web view's secret in the state directory, and where its address is written.

`web-token` is the key the view signs its login cookies and CSRF tokens with: a browser stays logged in
across a restart, and deleting the file (then restarting) logs every browser out. `web.json` says where the
view listens. How both are kept (created once, private, the address written while serving) is
service/endpoint_files.py's, as for the HTTP tools' token and http.json.
"""

from __future__ import annotations

from pathlib import Path

from hyperhive.errors import StoreError
from hyperhive.service import endpoint_files
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

    def parse(raw: bytes) -> bytes:
        secret = raw.strip()
        if len(secret) < MIN_SECRET:
            raise WebError(
                f"the web view's secret {path} holds {len(secret)} bytes, fewer than {MIN_SECRET}; "
                "delete it to have a new one made",
                path=str(path),
            )
        return secret

    return endpoint_files.load_secret(path, "the web view's secret", WebError, parse)
