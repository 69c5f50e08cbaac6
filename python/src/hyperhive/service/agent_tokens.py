"""Who calls hyperhive's HTTP tools: the bearer token of each agent.

The service's own agent holds the token file's token (service/http_files.py). Each sub-agent gets its own,
derived from it: `s<id>.<HMAC-SHA256(token, "subagent-<id>")>`, so no table of tokens is kept, a restart
gives a sub-agent the same token, and a token names its agent only if it was made from the service's own.
The tools read the caller from the verified token (`caller()`): a sub-agent's reminders wake it, its
sub-agents are its own. Not a wall between agents (they run as one user, and the token file is readable
by them all): the routing of each call to the agent that made it.
"""

from __future__ import annotations

import hashlib
import hmac

from mcp.server.auth.middleware.auth_context import get_access_token

from hyperhive.numbers import count

MAIN = 0


class AgentTokens:
    def __init__(self, token: str) -> None:
        self._key = token.encode("ascii")

    def for_agent(self, agent: int) -> str:
        if agent == MAIN:
            return self._key.decode("ascii")
        return f"s{agent}.{self._mac(agent)}"

    def agent_of(self, presented: bytes) -> int | None:
        """The agent this token belongs to, or None (compared in constant time)."""
        if presented.startswith(b"s") and b"." in presented:
            number, _, mac = presented[1:].partition(b".")
            if not number.isdigit() or len(number) > 12:
                return None
            agent = int(number)
            return agent if agent > MAIN and hmac.compare_digest(mac, self._mac(agent).encode("ascii")) else None
        return MAIN if hmac.compare_digest(presented, self._key) else None

    def _mac(self, agent: int) -> str:
        return hmac.new(self._key, f"subagent-{agent}".encode("ascii"), hashlib.sha256).hexdigest()


def caller() -> int:
    """The agent whose verified token the request in hand carries (the service's own outside a request)."""
    token = get_access_token()
    agent = None if token is None else count(token.client_id)
    return MAIN if agent is None else agent
