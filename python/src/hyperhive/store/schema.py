"""The database's schema: the migrations that build it, one version at a time, and what they make.

The version is `PRAGMA user_version`. A database is moved forward only, one migration after another, by
`Store` when it opens it (store/database.py); a database from a newer hyperhive is refused untouched.
"""

from __future__ import annotations

import re

# Each entry moves the schema from version i to i + 1. Append only; never edit a released one.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        cmd TEXT NOT NULL,
        cwd TEXT NOT NULL,
        status TEXT NOT NULL,
        timeout_secs REAL,
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        exit_code INTEGER,
        signal INTEGER,
        error TEXT,
        pid INTEGER,
        pid_start TEXT,
        owner_pid INTEGER NOT NULL,
        owner_start TEXT NOT NULL,
        kill_requested INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_status ON tasks(status);
    CREATE TABLE wakes (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at REAL NOT NULL,
        not_before REAL NOT NULL,
        delivered_at REAL
    );
    CREATE INDEX wakes_pending ON wakes(delivered_at, not_before);
    """,
    # 2: the agent sessions each runtime resumes (runtime key: "claude", or "acp:<command>").
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        runtime TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        archived_at REAL
    );
    CREATE INDEX sessions_current ON sessions(runtime, archived_at);
    """,
    # 3: the harness's turn loop. A wake counts the turns that tried to carry it (`attempts`), is set aside
    # after too many failed ones (never retried forever), can be cancelled (a reminder the agent withdrew),
    # and names the turn that delivered it. Turns are recorded; replies and notices go to the outbox.
    """
    ALTER TABLE wakes ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE wakes ADD COLUMN set_aside_at REAL;
    ALTER TABLE wakes ADD COLUMN set_aside_reason TEXT;
    ALTER TABLE wakes ADD COLUMN cancelled_at REAL;
    ALTER TABLE wakes ADD COLUMN turn_id INTEGER;
    CREATE TABLE turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started_at REAL NOT NULL,
        ended_at REAL,
        wake_ids TEXT NOT NULL,
        prompt_chars INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        stop_reason TEXT,
        error TEXT,
        result TEXT,
        session_id TEXT,
        context_used INTEGER,
        context_size INTEGER,
        cost_usd REAL,
        duration_ms INTEGER
    );
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at REAL NOT NULL,
        source TEXT NOT NULL,
        body TEXT NOT NULL,
        turn_id INTEGER
    );
    """,
    # 4: what a task used, read from its cgroup when it ran in one (CPU time, peak memory).
    """
    ALTER TABLE tasks ADD COLUMN cpu_usec INTEGER;
    ALTER TABLE tasks ADD COLUMN memory_peak INTEGER;
    """,
    # 5: the client's id for a `send`, so that a send retried after a lost answer (the service killed
    # between storing the wake and answering; the CLI then stores it itself) stores it once, not twice.
    """
    ALTER TABLE wakes ADD COLUMN request_id TEXT;
    CREATE UNIQUE INDEX wakes_request_id ON wakes(request_id) WHERE request_id IS NOT NULL;
    """,
    # 6: sub-agents. Each wake, turn and task belongs to one agent: 0 is the service's own, any other number
    # a sub-agent's id. A sub-agent is its own session driven by its own turn loop; its answers and
    # failures reach its parent as wakes (from `subagent-<id>`).
    """
    ALTER TABLE wakes ADD COLUMN agent INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE turns ADD COLUMN agent INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN agent INTEGER NOT NULL DEFAULT 0;
    DROP INDEX wakes_pending;
    CREATE INDEX wakes_pending ON wakes(agent, delivered_at, not_before);
    CREATE TABLE subagents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        parent INTEGER NOT NULL,
        depth INTEGER NOT NULL,
        profile TEXT NOT NULL,
        task TEXT NOT NULL,
        workdir TEXT NOT NULL,
        worktree INTEGER NOT NULL DEFAULT 0,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        ended_at REAL,
        turns INTEGER NOT NULL DEFAULT 0,
        busy_ms INTEGER NOT NULL DEFAULT 0,
        answer TEXT,
        error TEXT,
        context_used INTEGER,
        context_size INTEGER,
        cost_usd REAL
    );
    CREATE INDEX subagents_parent ON subagents(parent, state);
    """,
    # 7: the hive (docs/hive.md). `hive_sent`: the messages this agent wrote to other agents, each queued
    # until the recipient's service stored it (`delivered`), then told how the recipient's turn that read it
    # ended (`answered` or `failed`, from its receipt), or `refused` by the recipient. `hive_received`: the
    # ledger of messages this agent was given, one row per message id (a redelivery finds it and stores
    # nothing again), with the wake that carries it, how the turn that read it ended, and when the receipt
    # saying so reached its sender.
    """
    CREATE TABLE hive_sent (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL UNIQUE,
        recipient TEXT NOT NULL,
        reply_to TEXT,
        conversation TEXT NOT NULL,
        hop INTEGER NOT NULL,
        body TEXT NOT NULL,
        turn_id INTEGER,
        created_at REAL NOT NULL,
        state TEXT NOT NULL,
        delivered_at REAL,
        ended_at REAL,
        reader_turn INTEGER,
        error TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_try REAL NOT NULL
    );
    CREATE INDEX hive_sent_due ON hive_sent(state, next_try);
    CREATE INDEX hive_sent_recipient ON hive_sent(recipient, created_at);
    CREATE TABLE hive_received (
        message_id TEXT PRIMARY KEY,
        sender TEXT NOT NULL,
        conversation TEXT NOT NULL,
        hop INTEGER NOT NULL,
        reply_to TEXT,
        wake_id INTEGER NOT NULL,
        received_at REAL NOT NULL,
        outcome TEXT,
        turn_id INTEGER,
        ended_at REAL,
        receipt_at REAL,
        receipt_attempts INTEGER NOT NULL DEFAULT 0,
        receipt_next_try REAL
    );
    CREATE INDEX hive_received_wake ON hive_received(wake_id);
    CREATE INDEX hive_received_receipts ON hive_received(receipt_at, receipt_next_try);
    CREATE INDEX hive_received_sender ON hive_received(sender, received_at);
    """,
    # 8: permission requests held for the operator (the `ask` policy; store/permissions.py): each request
    # with its state (waiting, allowed, denied, expired, withdrawn), who answered and when, and when the
    # asking agent was given the answer (`delivered_at`: a re-run turn that asks the same again before
    # then is given the stored answer); and the "always" rules an operator set, revocable.
    """
    CREATE TABLE permission_requests (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent INTEGER NOT NULL,
        turn_id INTEGER,
        tool TEXT NOT NULL,
        title TEXT NOT NULL,
        input TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        created_at REAL NOT NULL,
        deadline REAL NOT NULL,
        state TEXT NOT NULL,
        always INTEGER NOT NULL DEFAULT 0,
        reason TEXT,
        answered_by TEXT,
        answered_at REAL,
        delivered_at REAL
    );
    CREATE INDEX permission_requests_open ON permission_requests(state, deadline);
    CREATE INDEX permission_requests_asked ON permission_requests(fingerprint, delivered_at);
    CREATE TABLE permission_rules (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tool TEXT NOT NULL,
        request_id INTEGER,
        created_at REAL NOT NULL,
        created_by TEXT NOT NULL,
        revoked_at REAL
    );
    CREATE INDEX permission_rules_tool ON permission_rules(tool, revoked_at);
    """,
    # 9: the tokens a turn used, where its runtime told them (claude's `result.usage`, ACP's prompt usage):
    # what the metrics count besides the cost; and the index a scrape reads the turns' figures from
    # (store/metrics.py: one pass grouped by agent and outcome), narrow where a turn's row is wide (its
    # result's text), so that a scrape's cost grows with the number of turns as little as it can.
    """
    ALTER TABLE turns ADD COLUMN input_tokens INTEGER;
    ALTER TABLE turns ADD COLUMN output_tokens INTEGER;
    CREATE INDEX turns_figures ON turns(agent, outcome, duration_ms, cost_usd, input_tokens, output_tokens);
    """,
)
# Every table a migration creates (and SQLite's own for AUTOINCREMENT), read from the migrations so the
# list cannot fall behind them: a version-0 database holding any other table is not ours.
OWN_TABLES = frozenset(re.findall(r"CREATE TABLE (\w+)", "".join(MIGRATIONS))) | {"sqlite_sequence"}
SCHEMA_VERSION = len(MIGRATIONS)
