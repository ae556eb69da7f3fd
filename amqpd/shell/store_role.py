"""Which store this node opens, and its role when the store is shared (active / standby).

Theory of operation
-------------------
One setting picks the backend (``ServerConfig.store``): unset, the SQLite file in the data
directory; a ``postgresql://`` URL, a database that several brokers may share (ActiveMQ's
JDBC master/slave). The role is a small state machine:

``standalone``
    SQLite (or no store at all): nothing to elect; the node serves at once.
``standby``
    PostgreSQL, and another node holds the store's advisory lock. The node keeps one
    connection and polls ``pg_try_advisory_lock`` every ``POLL_INTERVAL``; it does not open
    the AMQP listener, so clients get *connection refused* and move on to the next host of
    their list (pika with several hosts, aio-pika's robust connection, the JMS failover
    URL). Its admin socket answers ``amqpd ctl status`` (role: standby). A lost database
    connection is re-opened (every ``RECONNECT_INTERVAL``) without leaving the standby role.
``active``
    It got the lock: the same connection becomes the store's writer (the session that holds
    the lock is the only one that commits, see persistence/postgres/election.py), the store
    is loaded and the listeners open. :meth:`StoreRole.guard` proves the lock every
    ``CHECK_INTERVAL`` (a query that must answer within ``CHECK_TIMEOUT``, waiting for a
    batch in flight on the same connection included: a transaction that runs longer, such
    as deleting a queue of millions of messages, makes the node step down; safe, but a
    failover).
``lost``
    The guard could not prove the lock. The store's connection is dropped at once (nothing
    more can commit; batches in flight fail and their confirms become nacks), the server
    closes every client connection with 320 CONNECTION_FORCED and the process exits with
    :class:`LockLost` (status 3): a supervisor restarts it, as a standby. Going back to
    standby in-process would keep the old in-memory queues around; a fresh start is simpler
    and as fast.

With ``--workers N`` every worker has its own part of the database (worker K >= 1: the
schema ``amqpd_shard_K``, persistence/postgres/schema.py) and its own lock
(election.lock_key). Worker 0 holds the node's lock and is the one elected; it tells its
node's workers that the node is active with a file in the node's private runtime
directory (``active``), written once it holds the lock and removed as soon as an attempt
fails (a restarted worker 0 that finds another node active). Worker K competes for its
lock only while that file exists, so a standby node's workers never take a shard from
the active node's, and it steps down (``lost``, exit 3: the supervisor restarts it, and
it waits again) when the file goes away: the other node then gets every shard.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from persistence import backend
from persistence.backend import StoreBackend, redact
from persistence.errors import StoreError

if TYPE_CHECKING:
    from amqpd.shell.workers.role import WorkerRole

__all__ = ["LockLost", "StoreRole"]

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.25
RECONNECT_INTERVAL = 1.0
CHECK_INTERVAL = 1.0
CHECK_TIMEOUT = 5.0


@runtime_checkable
class LockedStore(Protocol):
    """What the guard needs of a shared store (persistence.postgres.store.PgStore)."""

    @property
    def description(self) -> str: ...

    async def holds_lock(self, timeout: float) -> bool: ...

    def abort(self) -> None: ...


class LockLost(StoreError):
    """This node stopped being the active one (it can no longer prove it holds the lock)."""


class StoreRole:
    """Opens the configured store; for PostgreSQL, first waits to become the active node.

    Args:
        store: ``None`` for the SQLite store in ``data_dir``, or a ``postgresql://`` URL.
        data_dir: The data directory (SQLite file, admin socket); None: memory only.
        synchronous: SQLite's synchronous mode.
    """

    def __init__(
        self,
        store: str | None,
        data_dir: Path | None,
        synchronous: str,
        worker: WorkerRole | None = None,
    ) -> None:
        self._url = store if backend.is_postgres_url(store) else None
        if store and self._url is None:
            backend.parse_store_url(store)  # raises StoreError with what to do
        self._shard = 0 if worker is None else worker.index  # which part of the store
        if self._url is not None and self._shard:  # every connection in its own schema
            from persistence.postgres.schema import shard_url

            self._url = shard_url(self._url, self._shard)
        # --workers N: the node is active while this file exists (see the module's doc)
        several = worker is not None and worker.count > 1
        self._active_file = worker.runtime / "active" if worker is not None and several else None
        self._data_dir = data_dir
        self._synchronous = synchronous
        self._dir_lock: IO[bytes] | None = None
        self._conn: Any = None
        self.role = "standby" if self._url else "standalone"

    @property
    def shared(self) -> bool:
        """Whether the store is a shared PostgreSQL database (there is an election)."""
        return self._url is not None

    async def prepare(self) -> None:
        """Check the setting, lock the data directory and connect (PostgreSQL only).

        Raises:
            StoreError: A bad URL, a data directory in use, or an unreachable database.
        """
        if self._url is None:
            return
        backend.parse_store_url(self._url)
        if self._data_dir is not None:
            from persistence.sqlite_open import lock_directory

            self._data_dir.mkdir(parents=True, exist_ok=True)
            self._dir_lock = lock_directory(self._data_dir)
        from persistence.postgres import election

        self._conn = await election.connect(self._url)

    async def open(self) -> StoreBackend:
        """The open store (for PostgreSQL: once this node is active)."""
        if self._url is None:
            assert self._data_dir is not None
            from persistence.store import Store

            return await Store.open(self._data_dir, self._synchronous)
        from persistence.postgres import election
        from persistence.postgres.schema import SHARD_SCHEMA_PREFIX
        from persistence.postgres.store import PgStore

        url = self._url
        key = election.lock_key(self._shard)
        conn = await self._elect(url, key)
        self._conn = None  # the store owns it now
        try:
            if self._shard:
                await conn.execute(
                    f"CREATE SCHEMA IF NOT EXISTS {SHARD_SCHEMA_PREFIX}{self._shard}"
                )
            store = await PgStore.open(url, conn, key)
        except BaseException:
            conn.terminate()
            raise
        return store

    def _node_active(self) -> bool:
        """Worker K of several: whether worker 0 holds the node's lock (always True for
        worker 0 and a node of one process)."""
        return not self._shard or (self._active_file is not None and self._active_file.exists())

    def _tell_workers(self, active: bool) -> None:
        """Worker 0 of several: whether the node is active, for its workers."""
        if self._shard or self._active_file is None:
            return
        if active:
            self._active_file.write_text(f"{os.getpid()}\n")
        else:
            self._active_file.unlink(missing_ok=True)

    def _log_waiting(self, url: str) -> None:
        if self._shard:
            log.info(
                "standby: worker %d waits for its node to be active on %s", self._shard, redact(url)
            )
            return
        log.info(
            "standby: another amqpd holds the lock of %s; waiting to take over "
            "(not listening for AMQP: clients get connection refused)",
            redact(url),
        )

    async def _elect(self, url: str, key: int) -> Any:
        from persistence.postgres import election

        conn = self._conn
        waiting = False
        while True:
            try:
                if conn is None:
                    conn = self._conn = await _connect_quietly(url)
                if conn is not None and self._node_active() and await election.try_lock(conn, key):
                    break
                if not waiting:  # only this process writes the file: remove it once
                    waiting = True
                    self._tell_workers(active=False)
                    self._log_waiting(url)
                await anyio.sleep(POLL_INTERVAL if conn is not None else RECONNECT_INTERVAL)
            except election.CONNECTION_ERRORS as exc:
                log.warning("standby: lost the connection to %s: %s", redact(url), exc)
                if conn is not None:
                    conn.terminate()
                conn = self._conn = None
        self.role = "active"
        self._tell_workers(active=True)
        log.info("active: holding the lock of %s", redact(url))
        return conn

    async def guard(self, store: StoreBackend, on_lost: Callable[[str], Awaitable[None]]) -> None:
        """Prove the lock every CHECK_INTERVAL; when that fails, drop the store's
        connection and call ``on_lost`` (which stops serving). Runs until cancelled."""
        assert isinstance(store, LockedStore)
        while True:
            await anyio.sleep(CHECK_INTERVAL)
            if not self._node_active():
                reason = "worker 0 found another node active: this worker steps down"
            elif await store.holds_lock(CHECK_TIMEOUT):
                continue
            else:
                reason = f"lost the lock of {store.description}: this node is no longer active"
            self.role = "lost"
            self._tell_workers(active=False)
            store.abort()
            log.error("%s; closing every connection and exiting", reason)
            await on_lost(reason)
            return

    def close(self) -> None:
        """Drop a connection still waiting for the lock and unlock the data directory."""
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None
        if self._dir_lock is not None:
            self._dir_lock.close()
            self._dir_lock = None


async def _connect_quietly(url: str) -> Any:
    """A connection, or None if the database cannot be reached right now (retried)."""
    from persistence.postgres import election

    try:
        return await election.connect(url, timeout=5)
    except StoreError:
        return None
