"""The durable store: one SQLite database in the state directory, shared by every hyperhive process.

    database.py   Store: opening (private files, WAL, the busy timeout, refusing what is not ours), the
                  migrations applied forward, transactions; what an SQLite failure means for the operator
    schema.py     the migrations, one per schema version, append only
    tasks.py      the `tasks` table (TaskTable), written by the task engine and `hyperhive tasks`
    wakes.py      the `wakes` table (WakeTable): every read and write of it
    sessions.py   the `sessions` table (SessionTable): the agent session each runtime resumes
    subagents.py  the `subagents` table (SubagentTable)
    turns.py      the `turns` table (TurnTable) and the transactions a turn's start and end make across
                  tables (wakes delivered, set aside with their notice, a sub-agent's report)
    outbox.py     the `outbox` table (OutboxTable): what the operator reads
    tables.py     Tables: every table on one connection, as one agent sees them

Each table has one module that writes it.
"""
