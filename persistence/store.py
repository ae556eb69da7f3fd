"""The durable store: one SQLite database (via aiosqlite) per data directory.

:class:`Store` applies journal batches, one transaction each, and loads everything back at
startup. It owns two aiosqlite connections (each runs its statements on its own thread):

* the *writer*, which only runs :meth:`Store.apply` transactions, one at a time (a small
  batch on the event loop's own thread: `INLINE_MAX_ROWS`);
* the *reader* (``query_only``), for :meth:`Store.load` and :meth:`Store.load_access`.
  WAL gives it a snapshot of committed data only, so a read never sees half of a batch
  that the writer is in the middle of, and never waits for it.

The data directory is locked (``flock`` on ``amqpd.lock``) while a store is open, so two
brokers cannot share it. Opening the file (lock, identity, settings, migrations) is
persistence/sqlite_open.py; reading it back at startup is persistence/sqlite_load.py.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import aiosqlite
import anyio

from persistence import access, schema
from persistence.errors import StoreError
from persistence.records import Batch, OpKind, QueueKey, RecoveredState
from persistence.sqlite_load import load_state
from persistence.sqlite_open import close_quietly, lock_directory, prepare, rollback_quietly

__all__ = ["Store", "StoreError"]

log = logging.getLogger(__name__)

_QID = "(SELECT id FROM queues WHERE vhost = ?1 AND name = ?2)"

# A lone batch (``apply(inline=True)``: the group committer saw no other input since the
# last batch) of at most this many rows is written on the event loop's own thread, fsync
# included, instead of aiosqlite's writer thread. That is a quiet broker: a publisher
# waiting for each confirm, a tx.commit per message. There the two thread hand-offs (wake
# the writer, wake the loop with the result) were a third of the round trip and most of its
# CPU (docs/perf-2026-11-27-session9.md). With several publishers (or a larger batch) the
# thread stays: the loop reads and journals the next messages while it writes, so they
# share the next fsync (8 publishers waiting for each confirm: 2x the rate of inline
# writes).
INLINE_MAX_ROWS = 8
# A transaction slower than this (a slow or saturated disk) sends every batch of the next
# INLINE_BACKOFF seconds to the thread: on a slow disk the loop is held by at most one
# transaction a second. (A healthy disk's commits take 0.1-0.3 ms here, 3-4 ms at p99 when
# the WAL is checkpointed: a 2 ms threshold kept two thirds of a lone publisher's batches
# on the thread.)
INLINE_SLOW = 0.010
INLINE_BACKOFF = 1.0

# The statements of each operation kind, run in order with the same rows (see OpKind for the
# row layouts). Numbered parameters let one row feed several statements.
_SQL: dict[OpKind, tuple[str, ...]] = {
    OpKind.DELETE_BINDING: (
        "DELETE FROM bindings WHERE vhost = ? AND source = ? AND destination_kind = ?"
        " AND destination = ? AND routing_key = ? AND arguments = ?",
    ),
    OpKind.DELETE_QUEUE: (
        f"DELETE FROM messages WHERE queue_id = {_QID}",
        f"DELETE FROM dedup_ids WHERE queue_id = {_QID}",
        "DELETE FROM bindings WHERE vhost = ?1 AND destination_kind = 'queue' AND destination = ?2",
        "DELETE FROM queues WHERE vhost = ?1 AND name = ?2",
    ),
    OpKind.DELETE_EXCHANGE: (
        "DELETE FROM bindings WHERE vhost = ?1 AND source = ?2",
        "DELETE FROM bindings WHERE vhost = ?1 AND destination_kind = 'exchange'"
        " AND destination = ?2",
        "DELETE FROM exchanges WHERE vhost = ?1 AND name = ?2",
    ),
    OpKind.PUT_EXCHANGE: (
        "INSERT OR REPLACE INTO exchanges (vhost, name, type, auto_delete, internal, arguments)"
        " VALUES (?, ?, ?, ?, ?, ?)",
    ),
    OpKind.PUT_QUEUE: (
        # An upsert, not REPLACE: the queue keeps its id and with it its messages.
        "INSERT INTO queues (vhost, name, auto_delete, arguments) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (vhost, name) DO UPDATE"
        " SET auto_delete = excluded.auto_delete, arguments = excluded.arguments",
    ),
    OpKind.PUT_BINDING: (
        "INSERT OR IGNORE INTO bindings"
        " (vhost, source, destination_kind, destination, routing_key, arguments)"
        " VALUES (?, ?, ?, ?, ?, ?)",
    ),
    OpKind.DELETE_MESSAGE: (f"DELETE FROM messages WHERE queue_id = {_QID} AND seq = ?3",),
    OpKind.INSERT_MESSAGE: (
        # A message for a queue that is not stored gets queue_id NULL and fails the batch
        # (NOT NULL): that is a bug in the caller, not something to drop silently.
        "INSERT OR REPLACE INTO messages (queue_id, seq, exchange, routing_key, header, body,"
        f" redelivered, delivery_count, expires_at) VALUES ({_QID}, ?3, ?4, ?5, ?6, ?7, ?8,"
        " ?9, ?10)",
    ),
    OpKind.MARK_DELIVERED: (
        "UPDATE messages SET redelivered = 1, delivery_count = ?4"
        f" WHERE queue_id = {_QID} AND seq = ?3",
    ),
    OpKind.FORGET_IDS: (f"DELETE FROM dedup_ids WHERE queue_id = {_QID} AND pos <= ?3",),
    OpKind.REMEMBER_ID: (
        f"INSERT OR REPLACE INTO dedup_ids (queue_id, pos, id) VALUES ({_QID}, ?3, ?4)",
    ),
}
_READ_BODIES = (
    f"SELECT seq, body FROM messages WHERE queue_id = {_QID} AND seq > ?3 ORDER BY seq LIMIT ?4"
)
_READ_MESSAGES = (
    "SELECT seq, exchange, routing_key, header, body FROM messages"
    f" WHERE queue_id = {_QID} AND seq > ?3 ORDER BY seq LIMIT ?4"
)
RECLAIM_STEP = 64  # pages (512 KiB) given back per step between batches
RECLAIM_KEEP = 256  # free pages kept for reuse: the file stays within 2 MiB of its content


class Store:
    """The SQLite store of one data directory.

    Create it with :meth:`open`; close it with :meth:`close` (or ``async with``). Methods
    must be called from the event loop that opened it; :meth:`apply` must not be called
    again before the previous call returned (the group committer guarantees it).
    """

    def __init__(
        self,
        path: Path,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        lock: IO[bytes] | None,
    ) -> None:
        """Use :meth:`open` instead."""
        self._path = path
        self._writer = writer
        self._reader = reader
        self._lock = lock
        self._closed = False
        self._applying = False
        self._inline_from = 0.0  # small batches are written inline from then on (INLINE_SLOW)
        self._clock = time.monotonic
        self.created = False  # the file was created (initialised) by this open

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def description(self) -> str:
        """The database file, for logs."""
        return str(self._path)

    def body_reader(self) -> BodyReader:
        """A new synchronous reader of committed bodies (for paging; the caller closes it)."""
        return BodyReader(self._path)

    @classmethod
    async def open(cls, data_dir: Path, synchronous: str = "FULL") -> Store:
        """Open (creating or migrating if needed) the store in ``data_dir``.

        Args:
            data_dir: The data directory; created if missing. The database is
                ``data_dir / "amqpd.sqlite3"``.
            synchronous: ``"FULL"`` (default: a commit survives power loss), ``"NORMAL"``
                (survives a crash of the process; the last commits may be lost on power
                loss) or ``"EXTRA"``.

        Returns:
            The open store.

        Raises:
            StoreError: The directory cannot be created or is in use by another store, the
                file is not SQLite, belongs to another application or to a newer amqpd, or
                SQLite failed.
            ValueError: ``synchronous`` is not one of the accepted modes.
        """
        sync = synchronous.upper()
        if sync not in schema.SYNCHRONOUS_MODES:
            raise ValueError(
                f"synchronous must be one of {', '.join(schema.SYNCHRONOUS_MODES)}, "
                f"not {synchronous!r}"
            )
        data_dir = Path(data_dir)
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create data directory {data_dir}: {exc}") from exc
        path = data_dir / schema.DB_FILENAME
        lock = lock_directory(data_dir)
        writer: aiosqlite.Connection | None = None
        reader: aiosqlite.Connection | None = None
        try:
            schema.check_file_header(path)
            # check_same_thread off: small batches are written from the event loop's thread
            # (Store.apply), never while the writer thread runs anything (``_applying``)
            writer = await aiosqlite.connect(path, isolation_level=None, check_same_thread=False)
            created = await prepare(writer, path, sync) == 0
            reader = await aiosqlite.connect(path, isolation_level=None)
            await reader.execute("PRAGMA query_only = ON")
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                for db in (reader, writer):
                    if db is not None:
                        await close_quietly(db)
            if lock is not None:
                lock.close()
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise StoreError(f"cannot open {path}: {exc}") from exc
            raise
        log.info("opened store %s (schema %d, synchronous=%s)", path, schema.SCHEMA_VERSION, sync)
        store = cls(path, writer, reader, lock)
        store.created = created
        return store

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def apply(self, batch: Batch, *, inline: bool = False) -> None:
        """Write a batch in one transaction, committed before this returns.

        A batch with no operations is a no-op. Cancellation does not interrupt a started
        transaction: it runs to its commit or rollback.

        Args:
            batch: The batch, from :meth:`persistence.journal.Journal.take_batch`.
            inline: The caller saw nothing else arrive since the previous batch (a lone
                round trip): a batch of at most `INLINE_MAX_ROWS` rows is then written on
                this thread, fsync included, unless the back-off of a slow transaction
                (`INLINE_SLOW`) is running. Otherwise the writer thread writes it.

        Raises:
            StoreError: SQLite or the operating system failed (the transaction was rolled
                back; the store stays usable and later batches succeed once the cause is
                gone), or the store is closed.
            RuntimeError: Another ``apply`` is still in flight.
        """
        if not batch.ops:
            return
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        if self._applying:
            raise RuntimeError("Store.apply called while another apply is in flight")
        self._applying = True
        started = self._clock()
        try:
            if inline and _rows(batch) <= INLINE_MAX_ROWS and started >= self._inline_from:
                self._apply_inline(batch)
            else:
                await self._apply_on_thread(batch)
        finally:
            self._applying = False
            ended = self._clock()
            if ended - started >= INLINE_SLOW:  # a slow disk: keep the loop out of it a while
                self._inline_from = ended + INLINE_BACKOFF

    def _apply_inline(self, batch: Batch) -> None:
        """Write a small batch on the event loop's thread (see `INLINE_MAX_ROWS`)."""
        failure = f"could not commit batch {batch.id} to {self._path}"
        try:
            conn = self._writer._conn
        except ValueError as exc:  # aiosqlite's "no active connection"
            raise StoreError(f"{failure}: {exc}") from exc
        try:
            _write_statements_to(conn, _batch_statements(batch.ops))
        except (sqlite3.Error, OSError, ValueError) as exc:
            try:  # _write_statements_to rolled back already unless SQLite itself failed
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the next transaction starts with a ROLLBACK anyway
            raise StoreError(f"{failure}: {exc}") from exc

    async def _apply_on_thread(self, batch: Batch) -> None:
        db = self._writer
        with anyio.CancelScope(shield=True):
            try:
                # The whole transaction runs as one call on aiosqlite's writer thread: one
                # thread hop per batch instead of one per statement (a lone confirm's
                # latency and CPU are dominated by those hops). `_execute` is the helper
                # aiosqlite's own execute_* methods use; covered by the store tests.
                await db._execute(_write_batch, db, batch.ops)  # type: ignore[no-untyped-call]
            except (sqlite3.Error, OSError, ValueError) as exc:
                # ValueError: aiosqlite's "no active connection" (thread gone).
                await rollback_quietly(db)
                raise StoreError(
                    f"could not commit batch {batch.id} to {self._path}: {exc}"
                ) from exc

    async def reclaim(self, pages: int = RECLAIM_STEP, keep: int = RECLAIM_KEEP) -> bool:
        """Give free pages back to the file system, at most ``pages`` per call
        (``PRAGMA incremental_vacuum``), while more than ``keep`` pages are free. The
        group committer calls it between batches when the journal is idle, so a commit
        waits at most for one small step.

        Returns:
            True if more free pages are left to give back.

        Raises:
            StoreError: SQLite failed or the store is closed.
        """
        db = self._writer
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        if self._applying:
            raise RuntimeError("Store.reclaim called while an apply is in flight")
        self._applying = True
        more = False
        try:
            with anyio.CancelScope(shield=True):
                more = await db._execute(_reclaim, db, pages, keep)  # type: ignore[no-untyped-call]
        except (sqlite3.Error, OSError, ValueError) as exc:
            raise StoreError(f"could not reclaim free space in {self._path}: {exc}") from exc
        finally:
            self._applying = False
        return more

    async def load(
        self, body_window: int | None = None, messages: bool = True, keys_only: str = ""
    ) -> RecoveredState:
        """Read everything back: definitions and every message, in ``seq`` order per queue.

        Reads one consistent snapshot of committed data. With ``body_window``, only the first
        ``body_window`` messages of each queue carry their body; the others come with an
        empty body and ``body_size`` set (memory stays bounded for long queues). With
        ``messages=False`` only the definitions are read (for the admin commands). Queues
        whose name starts with a non-empty ``keys_only`` come back as their messages'
        ``seq`` only (``message_keys``; their rows are read back a page at a time).

        Returns:
            The stored state.

        Raises:
            StoreError: SQLite failed or a stored definition is corrupt.
        """
        db = self._reader_or_raise()
        try:
            await db.execute("BEGIN")
            try:
                return await load_state(db, body_window, messages, keys_only)
            finally:
                await db.execute("COMMIT")
        except (sqlite3.Error, OSError, ValueError) as exc:
            raise StoreError(f"cannot load {self._path}: {exc}") from exc

    async def load_access(self) -> access.AccessState:
        """Read the users, vhosts and permissions (one snapshot).

        Raises:
            StoreError: SQLite failed or the store is closed.
        """
        db = self._reader_or_raise()
        try:
            await db.execute("BEGIN")
            try:
                rows = {
                    key: list(await db.execute_fetchall(sql))
                    for key, sql in access.LOAD_SQL.items()
                }
            finally:
                await db.execute("COMMIT")
        except (sqlite3.Error, OSError, ValueError) as exc:
            raise StoreError(f"cannot load access control from {self._path}: {exc}") from exc
        return access.rows_to_state(rows)

    async def save_access(self, state: access.AccessState) -> None:
        """Replace the stored users, vhosts and permissions in one transaction.

        Like :meth:`apply`, one call on the writer thread. It must not run while an
        ``apply`` is in flight: a running broker calls it through
        :meth:`persistence.group_commit.GroupCommitter.commit_then`.

        Raises:
            StoreError: SQLite failed (nothing was changed) or the store is closed.
            RuntimeError: An ``apply`` is in flight.
        """
        db = self._writer
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        if self._applying:
            raise RuntimeError("Store.save_access called while an apply is in flight")
        self._applying = True
        with anyio.CancelScope(shield=True):
            try:
                statements = access.state_to_statements(state)
                await db._execute(_write_statements, db, statements)  # type: ignore[no-untyped-call]
            except (sqlite3.Error, OSError, ValueError) as exc:
                await rollback_quietly(db)
                raise StoreError(f"cannot save access control to {self._path}: {exc}") from exc
            finally:
                self._applying = False

    async def close(self) -> None:
        """Close the store (rolling back an unfinished transaction) and unlock the directory.

        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await rollback_quietly(self._writer)
            await close_quietly(self._reader)
            await close_quietly(self._writer)
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        log.info("closed store %s", self._path)

    def _reader_or_raise(self) -> aiosqlite.Connection:
        if self._closed:
            raise StoreError(f"store {self._path} is closed")
        return self._reader


def _rows(batch: Batch) -> int:
    return sum(len(rows) for _kind, rows in batch.ops)


def _batch_statements(ops: list[tuple[OpKind, list[Any]]]) -> Iterable[tuple[str, list[Any]]]:
    return ((sql, rows) for kind, rows in ops for sql in _SQL[kind])


def _write_batch(db: aiosqlite.Connection, ops: list[tuple[OpKind, list[Any]]]) -> None:
    """Run on the writer thread: one transaction with every operation of a batch."""
    _write_statements(db, _batch_statements(ops))


def _reclaim(db: aiosqlite.Connection, pages: int, keep: int) -> bool:
    """Run on the writer thread: one bounded incremental vacuum step if enough is free."""
    conn = db._conn
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    if free <= keep:
        return False
    # executescript steps the statement to the end; execute() would free one page only.
    conn.executescript(f"PRAGMA incremental_vacuum({int(min(pages, free - keep))});")
    left = conn.execute("PRAGMA freelist_count").fetchone()[0]
    if left <= keep:  # done: let the next checkpoint shrink the file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return bool(left > keep)


def _write_statements(
    db: aiosqlite.Connection, statements: Iterable[tuple[str, list[Any]]]
) -> None:
    """Run on the writer thread: BEGIN IMMEDIATE, each ``(sql, rows)``, COMMIT (or ROLLBACK)."""
    _write_statements_to(db._conn, statements)


def _write_statements_to(
    conn: sqlite3.Connection, statements: Iterable[tuple[str, list[Any]]]
) -> None:
    """BEGIN IMMEDIATE, each ``(sql, rows)``, COMMIT (or ROLLBACK) on ``conn``."""
    if conn.in_transaction:  # left open by an earlier failure; never commit it
        conn.execute("ROLLBACK")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, rows in statements:
            conn.executemany(sql, rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class BodyReader:
    """Synchronous, read-only access to committed message bodies (a page at a time).

    The broker core calls it while dispatching, when it reaches messages whose bodies were
    dropped from memory. It is synchronous on purpose: a delivery frame cannot be produced
    before the body is there, and suspending a channel for an await would reorder its
    replies. One page of 1 KiB bodies reads in about a millisecond from SQLite's cache; WAL
    lets it read while the group committer writes.
    """

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._db.execute("PRAGMA query_only = ON")

    def read_bodies(self, queue: QueueKey, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        """``(seq, body)`` of up to ``limit`` committed messages with ``seq > after_seq``.

        Raises:
            StoreError: SQLite failed.
        """
        try:
            rows = self._db.execute(_READ_BODIES, (queue[0], queue[1], after_seq, limit))
            return list(rows)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read message bodies of {queue}: {exc}") from exc

    def read_messages(
        self, queue: QueueKey, after_seq: int, limit: int
    ) -> list[tuple[int, str, str, bytes, bytes]]:
        """``(seq, exchange, routing_key, header, body)`` of up to ``limit`` committed
        messages with ``seq > after_seq``.

        Raises:
            StoreError: SQLite failed.
        """
        try:
            rows = self._db.execute(_READ_MESSAGES, (queue[0], queue[1], after_seq, limit))
            return list(rows)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read messages of {queue}: {exc}") from exc

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
