"""The ACP backend: turns driven through any Agent Client Protocol agent, reported as claude stream-json.

- `runtime.py`: `AcpRuntime`, the `Runtime` (sessions, turn outcome, errors);
- `link.py`: one running agent (initialize, sessions, the wire lent to one turn at a time, endings);
- `spawn.py`: the agent's process, a `hyperhive.procs.Child` with the harness's whole environment;
- `answers.py`: the agent's errors, invalid answers and auth methods as an operator reads them;
- `transport.py`: the wire (bounded NDJSON framing, protocol errors, wire-order hooks);
- `gate.py`: which turn a `session/update` belongs to, by wire position;
- `turn.py`: one prompt in flight (idle watchdog, cancel, kill), against the small `PromptPeer` protocol;
- `translate.py`: `session/update` → stream-json lines (pure);
- `tool_calls.py`: a tool call's name, input and result text as the stream shows them (pure);
- `client.py`: what hyperhive answers the agent (permissions by policy).
"""

from hyperhive.runtime.acp.client import PermissionPolicy, choose_option
from hyperhive.runtime.acp.runtime import AcpRuntime
from hyperhive.runtime.acp.tool_calls import mcp_tool_name, tool_name
from hyperhive.runtime.acp.translate import Translator

__all__ = ["AcpRuntime", "PermissionPolicy", "Translator", "choose_option", "mcp_tool_name", "tool_name"]
