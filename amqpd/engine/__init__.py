"""The sans-IO protocol engine: connection and channel state machines, permissions."""
