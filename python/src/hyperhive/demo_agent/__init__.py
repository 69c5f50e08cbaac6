"""`hyperhive demo-agent`: a deterministic ACP agent for `hyperhive demo` and the tests. No model.

It speaks ACP v1 over stdio on the official SDK's agent side and really uses the MCP servers the client
gives it in `session/new` / `session/load` (the mcp SDK's stdio and streamable-HTTP clients), so a demo
exercises the same path a real agent takes: the bash server starts a background task, the task's end
wakes the agent, the agent replies through hyperhive's own tools.

What a turn does is decided by the prompt alone (the agent keeps no state, so `session/load` works after
any restart). The prompt lists wakes, each under a header naming its source
(`--- wake 17 from operator at 2026-12-01T06:40:12Z [3f9a61c2] ---`, docs/architecture.md "The prompt
format"), each line of its text after `| `; a prompt without headers is one operator message. Per wake:

- from `operator`: `mcp__bash__run` with `wait_seconds: 0` and the command `sleep 1; echo "hello from a
  background task"` (or the text after `run: `; `run <N>s: <cmd>` waits up to N s for it);
  `remind <N>s: <text>` calls `mcp__hyperhive__remind` instead; `delegate: <task>` calls
  `mcp__hyperhive__subagent_start` with the task and `wait_seconds: 0` (`delegate to <profile>: <task>`,
  with that profile); `ask <name>: <order>` calls `mcp__hyperhive__message` (docs/hive.md) with
  `{"to": name, "body": order}` (`ask <name>@<host>:` for an agent of another host, docs/hive-hosts.md);
- from `agent:<sender>` (a message of another agent of the host, hive/node.py's `wake_body`): one that
  answers ours (`answering your <id>`) is passed on with `mcp__hyperhive__reply`, "<sender> answered <id>:
  <its text's first line>"; a `run: <cmd>` order runs in the background as above, its command marked with
  whom its end answers (`<cmd>  # answer <id>`, a shell comment); anything else is answered at once with
  `mcp__hyperhive__message` `{"to": sender, "reply_to": id, "body": "Done with: <text>"}`;
- from `bash-task-<id>`: `mcp__hyperhive__reply` with "Task <id> finished: <its last stdout line>", or,
  when its command is marked `# answer <name>.<n>`, `mcp__hyperhive__message` with that to `<name>`,
  `reply_to` `<name>.<n>` (also at once, should such a task end within the `run` call);
- from `timer`: `mcp__hyperhive__reply` with "Reminder: <body>";
- from `subagent-<id>`: `mcp__hyperhive__reply` with "Sub-agent <id> answered: <the answer's first line>";
- from anyone else: a sentence saying it was noted.

With `--ask` it asks the client's permission (`session/request_permission`, allow once or reject) before
each bash tool call, and says so instead of calling it when it is not allowed (docs/permissions.md).

It runs as a sub-agent when the bash server it is given (session/new, session/load) has `HIVE_AGENT_ID` in
its env: decided per session, from that list alone. A sub-agent has no operator and must not `reply` (the
final text of its turn is its answer to its parent), so:

- from `parent`, or from `operator` (who may message a sub-agent from the web view; only the service writes
  such a wake) (its task is after the line `The task:`; a follow-up message is all task): `run: <cmd>`
  calls `mcp__bash__run` (`wait_seconds: 0`, or N with `run <N>s:`), `delegate: <task>` calls
  `mcp__hyperhive__subagent_start`, anything else is answered with a sentence naming the task;
- from `bash-task-<id>`, `timer` and `subagent-<id>`: the sentence the service's agent would reply, said
  as its answer ("Task <id> finished: <last line>", ...).

Each turn ends with a `usage_update`. A missing, failing or silent MCP server is reported in the text and
the turn ends normally (every MCP call is bounded). `session/cancel` stops the turn at once (`cancelled`).
Stdout is the ACP stream: fd 1 is moved aside before anything runs and pointed at stderr, where the logs go.

The modules, by job: `plan.py` what a prompt asks for (pure), `mcp_call.py` one MCP tool call, `agent.py`
the ACP agent, `stdio.py` serving it on stdin/stdout.
"""
