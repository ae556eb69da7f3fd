"""Which broker serves a shared PostgreSQL store: a session-level advisory lock.

Every broker pointed at the same database connects and polls
``pg_try_advisory_lock(LOCK_KEY)``; the one that gets it is the *active* node, and that same
connection becomes its store's only writer (persistence/postgres/store.py). PostgreSQL
releases a session lock only when the session ends (the process died, its socket closed,
or the server dropped it), and a session that ended can commit nothing more. So every batch
the active commits was committed while it held the lock, and a standby that gets the lock
next and then loads the store sees all of them: two brokers never serve the same store.

The lock connection asks the server to probe an idle client (TCP keepalives after 5 s, then
every 2 s, 3 probes), so the lock of a machine that vanished from the network is released
after about 11 s; a process that was killed releases it at once (its socket is closed).
The active proves it still holds the lock every second (:func:`holds_lock`, with a short
timeout) and stops serving as soon as it cannot.
"""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from persistence.backend import redact
from persistence.errors import StoreError

__all__ = ["LOCK_KEY", "connect", "holds_lock", "lock_key", "try_lock"]

log = logging.getLogger(__name__)

LOCK_KEY = 0x616D7170
"""The advisory lock key (the ASCII bytes ``amqp``): one amqpd store per database."""

_SERVER_SETTINGS = {
    "application_name": "amqpd",
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
}


def lock_key(shard: int) -> int:
    """The lock of worker ``shard``'s part of the store (``--workers N``: worker 0 holds
    `LOCK_KEY`, the node's own; worker K its shard's, persistence/postgres/schema.py)."""
    return LOCK_KEY + (shard << 32)


_TRY_LOCK = "SELECT pg_try_advisory_lock($1::bigint)"
# A bigint key shows in pg_locks as classid = high half, objid = low half, objsubid = 1.
_HOLDS_LOCK = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND pid = pg_backend_pid() AND classid = $1::bigint AND objid = $2::bigint"
    " AND objsubid = 1)"
)

# What a lost or refused connection raises.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


async def connect(url: str, timeout: float = 10.0) -> Any:
    """Open a connection to the store's database (an ``asyncpg.Connection``).

    Raises:
        StoreError: The server cannot be reached or refused the connection (one line that
            says what to check).
    """
    try:
        return await asyncpg.connect(url, timeout=timeout, server_settings=_SERVER_SETTINGS)
    except CONNECTION_ERRORS as exc:
        raise StoreError(
            f"cannot connect to PostgreSQL at {redact(url)}: {exc or type(exc).__name__}; "
            "check --store (user, host, port, database) and that the server is up"
        ) from exc


async def try_lock(conn: Any, key: int = LOCK_KEY) -> bool:
    """Take the store's lock (or the lock ``key``) on ``conn`` if it is free (never waits)."""
    return bool(await conn.fetchval(_TRY_LOCK, key))


async def holds_lock(conn: Any, timeout: float, key: int = LOCK_KEY) -> bool:
    """Whether ``conn``'s session still holds the lock ``key`` (asks the server)."""
    return bool(await conn.fetchval(_HOLDS_LOCK, key >> 32, key & 0xFFFFFFFF, timeout=timeout))
