"""The durable store: one SQLite database in the state directory, shared by every hyperhive process.

    database.py   Store: opening (private files, WAL, the busy timeout, refusing what is not ours), the
                  migrations applied forward, transactions; what an SQLite failure means for the operator
    schema.py     the migrations, one per schema version, append only
    tasks.py      the `tasks` table (TaskTable), written by the task engine and `hyperhive tasks`
    wakes.py      the `wakes` table (WakeTable): every read and write of it
    sessions.py   the `sessions` table (SessionTable): the agent session each runtime resumes

Each table has one module that writes it; the harness's own tables (turns, outbox) are harness/records.py's.
"""
