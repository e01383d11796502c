"""The engine server as a child process group, and the watchdog that kills the group when its owner dies."""
