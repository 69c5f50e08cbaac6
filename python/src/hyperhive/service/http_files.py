"""The two files hyperhive's HTTP tools keep in the state directory: the bearer token and the endpoint.

The token (`token`) is what every agent must present; `http.json` says where the tools listen. How both
are kept (created once, private, the endpoint written while serving) is service/endpoint_files.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

from hyperhive.errors import StoreError
from hyperhive.service.endpoint_files import load_secret
from hyperhive.statedir.layout import StateDir

# Tokens an operator may write themselves: visible ASCII (it travels in a header), not too short to guess.
_TOKEN_SHAPE = re.compile(r"[\x21-\x7e]{16,1024}")


class HttpToolsError(StoreError):
    """The HTTP tools cannot start (token file unusable, server failed to start): a state directory problem,
    so `hyperhive agent` exits 3 (the unit does not restart-loop on it any faster than its backoff)."""


def load_token(state_dir: Path) -> str:
    """The bearer token from the state directory's token file, created (0600, atomically) on first use.

    Refused, with the reason and the fix: a token file others can read or that is not ours, a symlink
    (statedir/files.py's rules for a secret), or one whose content is not a token.
    """
    path = StateDir(state_dir).token

    def parse(raw: bytes) -> str:
        token = raw.decode("ascii", errors="replace").strip()
        if not _TOKEN_SHAPE.fullmatch(token):
            raise HttpToolsError(
                f"the token file {path} does not hold a token (16 to 1024 visible ASCII characters); "
                "delete it to have a new one made",
                path=str(path),
            )
        return token

    return load_secret(path, "the token file", HttpToolsError, parse)
