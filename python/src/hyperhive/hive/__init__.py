"""The hive: named agents on one host that message each other (docs/hive.md).

Above the agent's core and below the service shell: the roster (who is on the host and who may write to
whom), the guards on a message, the transport between services (one seam, a Unix socket per agent today),
the postman that delivers what this agent's store holds for others, and the `message` tools.
"""
