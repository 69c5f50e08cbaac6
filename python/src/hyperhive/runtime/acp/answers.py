"""An agent's answers as an operator reads them: JSON-RPC errors, invalid answers, the auth methods it
offers, and the refusal when it wants authentication that is not configured."""

from __future__ import annotations

from acp import RequestError
from acp.schema import InitializeResponse
from pydantic import ValidationError

from hyperhive.runtime.errors import AgentRefused

# ACP's `auth_required` error code: the agent wants `authenticate` before it opens a session.
AUTH_REQUIRED = -32000
AUTH_VARIABLE = "HIVE_ACP_AUTH_METHOD"


def rpc_error(exc: RequestError) -> str:
    detail = f" {exc.data}" if exc.data else ""
    return f"{exc} (JSON-RPC {exc.code}){detail}"


def invalid_reason(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"


def offered_auth_methods(init: InitializeResponse | None) -> dict[str, str]:
    """The auth methods the agent offered in `initialize`: id -> how an operator recognises it."""
    methods = init.auth_methods if init is not None else None
    out: dict[str, str] = {}
    for method in methods or []:
        label = method.name
        variables = [v.name for v in getattr(method, "vars", None) or []]
        if variables:
            label += f", reads {', '.join(variables)}"
        out[method.id] = label
    return out


def describe_auth_methods(methods: dict[str, str]) -> str:
    return "; ".join(f"{method_id!r} ({label})" for method_id, label in methods.items())


def auth_required(agent: str, exc: RequestError, offered: dict[str, str]) -> AgentRefused:
    """The refusal of an agent that answered `auth_required`: what to set, or that nothing can be."""
    if offered:
        hint = f"set {AUTH_VARIABLE} to one of the methods it offers: {describe_auth_methods(offered)}"
    else:
        hint = "it offers no auth method over ACP; configure its credentials in its environment or files"
    return AgentRefused(agent, f"it requires authentication ({rpc_error(exc)}); {hint}", auth_methods=list(offered))
