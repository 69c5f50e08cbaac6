"""What the service shares with the processes that reach it: the control socket's wire and the state lock.

Below both `service/` (which serves the socket and holds the lock) and `bash_mcp/` (whose per-turn server
finds the service by the lock and calls it over the socket), so neither imports the other. Standard
library only: the forwarding bash server imports both on its 100 ms start-up path.
"""
